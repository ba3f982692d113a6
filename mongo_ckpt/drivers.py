"""Drivers for ``calls`` operations, hiding the differences between client libraries.

PyMongo's ``AsyncMongoClient`` returns awaitable ``aggregate`` results while
Motor and mongomock-motor return cursors directly; synchronous clients need no
awaiting at all. Those differences live here and nowhere else.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from itertools import islice
from typing import Any

from pymongo.errors import InvalidOperation

from mongo_ckpt.calls import Call, Emit, NextBatch, Operation


class ClientClosedError(RuntimeError):
    """The MongoDB client behind a saver or store has been closed."""


def _closed(exc: InvalidOperation) -> Exception:
    if "after close" in str(exc):
        return ClientClosedError(
            "the MongoDB client was closed: create the saver/store with an open client, "
            "or use it inside its from_conn_string(...) context manager"
        )
    return exc


def _invoke(collections: Mapping[str, Any], call: Call) -> Any:
    kwargs = dict(call.kwargs)
    return getattr(collections[call.collection], call.method)(*call.args, **kwargs)


def _is_cursor_call(call: Call) -> bool:
    return call.method in ("find", "aggregate")


def execute(collections: Mapping[str, Any], step: Call | NextBatch) -> Any:
    """Perform one step on synchronous collections."""
    try:
        if isinstance(step, NextBatch):
            return list(islice(step.cursor, step.size))
        result = _invoke(collections, step)
        if _is_cursor_call(step):
            return iter(result) if step.stream else list(result)
        return result
    except InvalidOperation as exc:
        raise _closed(exc) from exc


async def aexecute(collections: Mapping[str, Any], step: Call | NextBatch) -> Any:
    """Perform one step on asynchronous collections (PyMongo async, Motor, mongomock-motor)."""
    try:
        if isinstance(step, NextBatch):
            batch = []
            while len(batch) < step.size:
                try:
                    batch.append(await anext(step.cursor))
                except StopAsyncIteration:
                    break
            return batch
        result = _invoke(collections, step)
        if inspect.isawaitable(result):
            result = await result
        if _is_cursor_call(step):
            return aiter(result) if step.stream else [doc async for doc in result]
        return result
    except InvalidOperation as exc:
        raise _closed(exc) from exc


def iterate(collections: Mapping[str, Any], operation: Operation) -> Iterator[Any]:
    """Run ``operation`` synchronously, yielding what it emits."""
    result: Any = None
    while True:
        try:
            step = operation.send(result)
        except StopIteration:
            return
        if isinstance(step, Emit):
            result = None
            yield step.item
        else:
            result = execute(collections, step)


async def aiterate(collections: Mapping[str, Any], operation: Operation) -> AsyncIterator[Any]:
    """Run ``operation`` asynchronously, yielding what it emits."""
    result: Any = None
    while True:
        try:
            step = operation.send(result)
        except StopIteration:
            return
        if isinstance(step, Emit):
            result = None
            yield step.item
        else:
            result = await aexecute(collections, step)


def _returning(operation: Operation, box: list[Any]) -> Operation:
    box.append((yield from operation))


def _emitted(item: Any) -> TypeError:
    return TypeError(f"a run operation emitted {item!r}; iterate emitting operations instead")


def run(collections: Mapping[str, Any], operation: Operation) -> Any:
    """Run a non-emitting ``operation`` synchronously and return its result."""
    box: list[Any] = []
    for item in iterate(collections, _returning(operation, box)):
        raise _emitted(item)
    return box[0]


async def arun(collections: Mapping[str, Any], operation: Operation) -> Any:
    """Run a non-emitting ``operation`` asynchronously and return its result."""
    box: list[Any] = []
    async for item in aiterate(collections, _returning(operation, box)):
        raise _emitted(item)
    return box[0]


def run_on_loop(
    coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop | None, owner: str
) -> Any:
    """Run ``coro`` on ``loop`` (the async object's own) from another thread and wait.

    This is how the sync methods of the async saver and store work; calling them
    from the loop's own thread would deadlock, so that is refused.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None and running is loop:
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
