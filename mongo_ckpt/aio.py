"""``AsyncMongoDBSaver``: the native-async checkpointer.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the saver's event loop from
another thread, as LangGraph's other async savers do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo import AsyncMongoClient

from mongo_ckpt.base import DEFAULT_DB_NAME, MongoSaverBase
from mongo_ckpt.calls import Operation
from mongo_ckpt.client import aiterate, arun


class AsyncMongoDBSaver(MongoSaverBase):
    """LangGraph checkpointer on an asynchronous MongoDB client.

    Example:
        >>> client = AsyncMongoClient("mongodb://localhost:27017")
        >>> graph = builder.compile(checkpointer=AsyncMongoDBSaver(client))
        >>> await graph.ainvoke(inputs, {"configurable": {"thread_id": "1"}})
    """

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, db_name: str = DEFAULT_DB_NAME, **kwargs: Any
    ) -> AsyncIterator[AsyncMongoDBSaver]:
        """A saver on a new ``AsyncMongoClient`` that is closed when the context exits."""
        client: AsyncMongoClient = AsyncMongoClient(conn_string)
        try:
            yield cls(client, db_name, **kwargs)
        finally:
            await client.close()

    async def _arun(self, operation: Operation) -> Any:
        self.loop = asyncio.get_running_loop()
        return await arun(self.collections, self._prepared(operation))

    async def _aiter(self, operation: Operation) -> AsyncIterator[Any]:
        self.loop = asyncio.get_running_loop()
        async for item in aiterate(self.collections, self._prepared(operation)):
            yield item

    def _run(self, operation: Operation) -> Any:
        return self._on_loop(self._arun(operation))

    def _iter(self, operation: Operation) -> Iterator[Any]:
        items = self._aiter(operation)
        while True:
            try:
                yield self._on_loop(_next(items))
            except StopAsyncIteration:
                return

    def _on_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self.loop:
            coro.close()
            raise asyncio.InvalidStateError(
                "Synchronous calls to AsyncMongoDBSaver are only allowed from a different "
                "thread. From the event loop's thread use the async interface, e.g. "
                "`await saver.aget_tuple(...)` or `await graph.ainvoke(...)`."
            )
        if self.loop is None or not self.loop.is_running():
            coro.close()
            raise RuntimeError(
                "AsyncMongoDBSaver's sync methods need the event loop it runs on to be "
                "running in another thread; use the async methods, or MongoDBSaver"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


async def _next(items: AsyncIterator[Any]) -> Any:
    return await anext(items)
