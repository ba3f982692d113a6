"""Fault injection for the checkpointer's collections (this module holds no tests).

``Faults`` wraps ``saver.collections`` in place (the client under ``calls.CLIENT`` too).
Each method call is numbered across all of them; a ``Fault`` armed for call ``n`` makes
that call fail in one of three ways:

- ``before``: raise ``AutoReconnect`` without sending anything;
- ``cut``: a ``bulk_write`` (of a collection, or the client-level one of a put across
  collections) applies its first ``k`` requests, then ``AutoReconnect`` (a connection
  lost in the middle of a batch);
- ``after``: the server applies the call, then the reply is lost (``AutoReconnect``).

``Interleave`` runs a hook before every call but the first of an operation (a
concurrent writer landing between two steps). Both work on sync collections and,
by returning awaitables, on async ones.
"""

from __future__ import annotations

import inspect
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bson
from pymongo.errors import AutoReconnect

import mongo_ckpt
import mongo_ckpt.store
from mongo_ckpt import calls, drivers

MODES = ("before", "cut", "after")


@dataclass
class Fault:
    call: int  # the 0-based number of the call that fails
    mode: str  # one of MODES
    k: int = 0  # for "cut": requests applied before the failure


class _Proxy:
    def __init__(self, inner: Any, name: str, owner: Any) -> None:
        self._inner, self._name, self._owner = inner, name, owner

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if not callable(value) or attr.startswith("_"):
            return value
        return lambda *args, **kwargs: self._owner.invoke(self._name, attr, value, args, kwargs)


def _fail(result: Any) -> Any:
    """Raise ``AutoReconnect`` once ``result`` (maybe awaitable) has been completed."""
    if inspect.isawaitable(result):

        async def finish() -> Any:
            await result
            raise AutoReconnect("reply lost (injected)")

        return finish()
    raise AutoReconnect("reply lost (injected)")


class _Wrapper:
    """Puts every collection of ``collections`` behind a ``_Proxy`` calling ``invoke``."""

    def __init__(self, collections: dict[str, Any]) -> None:
        self._collections = collections
        self._originals = dict(collections)
        for name, coll in self._originals.items():
            collections[name] = _Proxy(coll, name, self)

    def restore(self) -> None:
        self._collections.update(self._originals)


class Faults(_Wrapper):
    """Wraps ``collections`` in place; ``arm`` a fault, read ``calls`` afterwards."""

    def __init__(self, collections: dict[str, Any]) -> None:
        self.calls: list[tuple[str, str, int]] = []  # (collection, method, bulk size)
        self.unordered: set[int] = set()  # numbers of the unordered bulk writes
        self.fault: Fault | None = None
        self.fired = False
        super().__init__(collections)

    def arm(self, fault: Fault | None) -> None:
        self.calls, self.unordered, self.fault, self.fired = [], set(), fault, False

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        number = len(self.calls)
        size = len(args[0]) if attr == "bulk_write" else 0
        self.calls.append((name, attr, size))
        if not kwargs.get("ordered", True):
            self.unordered.add(number)
        fault = self.fault
        if fault is None or fault.call != number:
            return method(*args, **kwargs)
        self.fired = True
        if fault.mode == "before":
            raise AutoReconnect("connection lost before the call (injected)")
        if fault.mode == "after":
            return _fail(method(*args, **kwargs))
        assert attr == "bulk_write", f"cut applies to bulk_write, not {attr}"
        requests = list(args[0])[: fault.k]
        if not requests:
            raise AutoReconnect("connection lost before any request (injected)")
        return _fail(method(requests, *args[1:], **kwargs))


class CutFaults(Faults):
    """``Faults`` whose ``cut`` of a call that is not a bulk write loses its reply instead
    (a fault drawn at random for an operation whose calls are not known in advance)."""

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        fault = self.fault
        if (
            fault is not None
            and fault.mode == "cut"
            and fault.call == len(self.calls)
            and attr != "bulk_write"
        ):
            fault.mode = "after"
        return super().invoke(name, attr, method, args, kwargs)


class Interleave(_Wrapper):
    """Runs ``hook()`` before every collection call except the first (sync collections);
    with ``only`` (collection, method), before the calls of that method alone."""

    def __init__(
        self,
        collections: dict[str, Any],
        hook: Callable[[], None],
        only: tuple[str, str] | None = None,
    ) -> None:
        self.hook, self.count, self.only = hook, 0, only
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        if (self.count and self.only is None) or self.only == (name, attr):
            self.hook()
        self.count += 1
        return method(*args, **kwargs)


class ByteCounter(_Wrapper):
    """Sums the BSON size of every document ``find``/``aggregate`` return (sync collections)."""

    def __init__(self, collections: dict[str, Any]) -> None:
        self.bytes = 0
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        result = method(*args, **kwargs)
        if attr not in ("find", "aggregate"):
            return result
        return self._counted(result)

    def _counted(self, cursor: Any) -> Any:
        for doc in cursor:
            self.bytes += len(bson.encode(doc))
            yield doc


class Serialized(_Wrapper):
    """One call at a time across threads, with ``find``/``aggregate`` read in full inside it
    (sync collections). mongomock is not thread-safe: two threads deleting one document
    raise ``KeyError``. A server applies each command atomically; this makes mongomock do so."""

    def __init__(self, collections: dict[str, Any], lock: threading.Lock) -> None:
        self.lock = lock
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        with self.lock:
            result = method(*args, **kwargs)
            return list(result) if attr in ("find", "aggregate") else result


LIBRARY = [Path(mongo_ckpt.__file__).parent, Path(mongo_ckpt.store.__file__).parent]


def issuing_line(exc: BaseException) -> str:
    """The ``mongo_ckpt.calls`` constructor line of the call that failed (the last frame of
    that module in the traceback), after checking that the frame before it is a library
    line outside the call plumbing: the operation that issued the call."""
    frames = traceback.extract_tb(exc.__traceback__)
    last = max(i for i, frame in enumerate(frames) if frame.filename == calls.__file__)
    issuer = frames[last - 1]
    assert any(folder in Path(issuer.filename).parents for folder in LIBRARY), issuer
    assert issuer.filename not in {calls.__file__, drivers.__file__}, issuer
    return frames[last].line or ""
