"""Drivers for ``calls`` operations, hiding the differences between client libraries.

PyMongo's ``AsyncMongoClient`` returns awaitable ``aggregate`` results while
Motor and mongomock-motor return cursors directly; synchronous clients need no
awaiting at all. Those differences live here and nowhere else.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo.errors import InvalidOperation

from mongo_ckpt.calls import Call, Cursor, Emit, NextBatch, Operation, Relay
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.telemetry import SpanInfo

T = TypeVar("T")
logger = logging.getLogger("mongo_ckpt")


class ClientClosedError(MongoCkptError, RuntimeError):
    """The MongoDB client behind a saver or store has been closed."""


def _closed(exc: InvalidOperation) -> Exception:
    if "after close" in str(exc):
        return ClientClosedError(
            "the MongoDB client was closed: create the saver/store with an open client, "
            "or use it inside its from_conn_string(...) context manager"
        )
    return exc


def _invoke(collections: Mapping[str, Any], call: Call) -> Any:
    return getattr(collections[call.collection], call.method)(*call.args, **call.kwargs)


def _is_cursor_call(call: Call) -> bool:
    return call.method in ("find", "aggregate")


def execute(collections: Mapping[str, Any], step: Call | NextBatch) -> Any:
    """Perform one step on synchronous collections."""
    try:
        if isinstance(step, NextBatch):
            return list(islice(step.cursor.source, step.size))
        result = _invoke(collections, step)
        if _is_cursor_call(step):
            return Cursor(iter(result)) if step.stream else list(result)
        return result
    except InvalidOperation as exc:
        raise _closed(exc) from exc


async def aexecute(collections: Mapping[str, Any], step: Call | NextBatch) -> Any:
    """Perform one step on asynchronous collections (PyMongo async, Motor, mongomock-motor)."""
    try:
        if isinstance(step, NextBatch):
            batch: list[Any] = []
            while len(batch) < step.size:
                try:
                    batch.append(await anext(step.cursor.source))
                except StopAsyncIteration:
                    break
            return batch
        result = _invoke(collections, step)
        if inspect.isawaitable(result):
            result = await result
        if _is_cursor_call(step):
            return Cursor(aiter(result)) if step.stream else [doc async for doc in result]
        return result
    except InvalidOperation as exc:
        raise _closed(exc) from exc


def iterate(collections: Mapping[str, Any], relay: Relay[Any]) -> Iterator[Any]:
    """Run ``relay``'s operation synchronously, yielding what it emits."""
    while (step := relay.next_step()) is not None:
        if isinstance(step, Emit):
            yield step.item
            continue
        try:
            relay.returned(execute(collections, step))
        except Exception as exc:
            relay.failed(exc)


async def aiterate(collections: Mapping[str, Any], relay: Relay[Any]) -> AsyncIterator[Any]:
    """Run ``relay``'s operation asynchronously, yielding what it emits."""
    while (step := relay.next_step()) is not None:
        if isinstance(step, Emit):
            yield step.item
            continue
        try:
            relay.returned(await aexecute(collections, step))
        except Exception as exc:
            relay.failed(exc)


def _emitted(item: Any) -> TypeError:
    return TypeError(f"a run operation emitted {item!r}; iterate emitting operations instead")


def run(collections: Mapping[str, Any], operation: Operation[T]) -> T:
    """Run a non-emitting ``operation`` synchronously and return its result."""
    relay = Relay(operation)
    for item in iterate(collections, relay):
        raise _emitted(item)
    return relay.value


async def arun(collections: Mapping[str, Any], operation: Operation[T]) -> T:
    """Run a non-emitting ``operation`` asynchronously and return its result."""
    relay = Relay(operation)
    async for item in aiterate(collections, relay):
        raise _emitted(item)
    return relay.value


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def run_on_loop(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop | None, owner: str
) -> T:
    """Run ``coro`` on ``loop`` (the async object's own) from another thread and wait.

    This is how the sync methods of the async saver and store work; calling them
    from the loop's own thread would deadlock, so that is refused.
    """
    if loop is not None and running_loop() is loop:
        coro.close()
        raise asyncio.InvalidStateError(
            f"Synchronous calls to {owner} are only allowed from a different thread. From "
            "the event loop's thread use the async interface, e.g. `await x.aget(...)` or "
            "`await graph.ainvoke(...)`."
        )
    if loop is None or not loop.is_running():
        coro.close()
        raise RuntimeError(
            f"{owner}'s sync methods need the event loop it runs on to be running in another "
            "thread; use the async methods, or the sync class"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


_DONE = object()
_STARTING = threading.Lock()


def _stoppable(operation: Operation[T], stopped: Callable[[], bool]) -> Operation[T | None]:
    """``operation``, closed before its next step once ``stopped()`` (maintenance is safe to
    cut between any two calls)."""
    relay = Relay(operation)
    while not stopped():
        if (step := relay.next_step()) is None:
            return relay.value
        try:
            relay.returned((yield step))
        except Exception as exc:
            relay.failed(exc)
    operation.close()
    return None


class SyncDriver:
    """How a saver or store on synchronous collections runs its operations, each
    ``_prepared`` first; the async methods run them in a worker thread."""

    if TYPE_CHECKING:  # supplied by the class this is mixed into
        collections: dict[str, Any]

        def _prepared(self, operation: Operation[T], span: SpanInfo | None) -> Operation[T]: ...

    _background: threading.Thread | None = None
    _background_stop: threading.Event

    def _run(self, operation: Operation[T], span: SpanInfo | None = None) -> T:
        return run(self.collections, self._prepared(operation, span))

    def _start_background(self, operation: Operation[Any], what: str, span: SpanInfo) -> None:
        """Run ``operation`` in a daemon thread unless one is running; its error is logged
        on the ``mongo_ckpt`` logger, never raised."""
        with _STARTING:  # puts from several threads: one starts it
            if self._background is not None and self._background.is_alive():
                operation.close()
                return
            stop = self._background_stop = threading.Event()
            prepared = _stoppable(self._prepared(operation, span), stop.is_set)

            def work() -> None:
                try:
                    run(self.collections, prepared)
                except Exception:
                    logger.exception("mongo-ckpt %s failed (in the background)", what)

            job = threading.Thread(target=work, name=f"mongo-ckpt {what}", daemon=True)
            self._background = job
            job.start()

    def _join_background(self, timeout: float | None, *, stop: bool = False) -> bool:
        """Wait for the background operation (stopped at its next call with ``stop``);
        ``True`` once none is running."""
        job = self._background
        if job is None:
            return True
        if stop:
            self._background_stop.set()
        job.join(timeout)
        return not job.is_alive()

    async def _ajoin_background(self, timeout: float | None, *, stop: bool = False) -> bool:
        return await asyncio.to_thread(self._join_background, timeout, stop=stop)

    def _iter(self, operation: Operation[Any], span: SpanInfo | None = None) -> Iterator[Any]:
        return iterate(self.collections, Relay(self._prepared(operation, span)))

    async def _arun(self, operation: Operation[T], span: SpanInfo | None = None) -> T:
        return await asyncio.to_thread(self._run, operation, span)

    async def _aiter(
        self, operation: Operation[Any], span: SpanInfo | None = None
    ) -> AsyncIterator[Any]:
        items = self._iter(operation, span)
        while (item := await asyncio.to_thread(next, items, _DONE)) is not _DONE:
            yield item


class AsyncDriver:
    """How a saver or store on asynchronous collections runs its operations, each
    ``_prepared`` first; the sync methods submit them to the object's event loop from
    another thread."""

    if TYPE_CHECKING:  # supplied by the class this is mixed into
        collections: dict[str, Any]

        def _prepared(self, operation: Operation[T], span: SpanInfo | None) -> Operation[T]: ...

        def _bind_running_loop(self) -> None: ...

        def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T: ...

        loop: asyncio.AbstractEventLoop | None

    _background: asyncio.Task[Any] | None = None

    async def _arun(self, operation: Operation[T], span: SpanInfo | None = None) -> T:
        self._bind_running_loop()
        return await arun(self.collections, self._prepared(operation, span))

    def _start_background(self, operation: Operation[Any], what: str, span: SpanInfo) -> None:
        """Run ``operation`` in a task on the saver's loop unless one is running (called
        from the loop or, for the sync methods, another thread); its error is logged on the
        ``mongo_ckpt`` logger, never raised."""
        loop = self.loop
        if loop is not None and running_loop() is loop:
            self._spawn(operation, what, span)
        elif loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._spawn, operation, what, span)
        else:
            operation.close()

    def _spawn(self, operation: Operation[Any], what: str, span: SpanInfo) -> None:
        if self._background is not None and not self._background.done():
            operation.close()
            return

        async def work() -> None:
            try:
                await arun(self.collections, self._prepared(operation, span))
            except Exception:
                logger.exception("mongo-ckpt %s failed (in the background)", what)

        self._background = asyncio.get_running_loop().create_task(work())

    async def _ajoin_background(self, timeout: float | None, *, stop: bool = False) -> bool:
        """Wait for the background task (cancelled first with ``stop``: maintenance is safe
        to cut); ``True`` once none is running."""
        await asyncio.sleep(0)  # a task handed over from another thread starts first
        task = self._background
        if task is None or task.done():
            return True
        if stop:
            task.cancel()
        await asyncio.wait({task}, timeout=timeout)
        return task.done()

    def _join_background(self, timeout: float | None, *, stop: bool = False) -> bool:
        return self._on_loop(self._ajoin_background(timeout, stop=stop))

    async def _aiter(
        self, operation: Operation[Any], span: SpanInfo | None = None
    ) -> AsyncIterator[Any]:
        self._bind_running_loop()
        async for item in aiterate(self.collections, Relay(self._prepared(operation, span))):
            yield item

    def _run(self, operation: Operation[T], span: SpanInfo | None = None) -> T:
        return self._on_loop(self._arun(operation, span))

    def _iter(self, operation: Operation[Any], span: SpanInfo | None = None) -> Iterator[Any]:
        items = self._aiter(operation, span)
        while (item := self._on_loop(_next(items))) is not _DONE:
            yield item


async def _next(items: AsyncIterator[Any]) -> Any:
    return await anext(items, _DONE)
