"""``AsyncMongoDBSaver``: the native-async checkpointer.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the saver's event loop from
another thread, as LangGraph's other async savers do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo import AsyncMongoClient

from mongo_ckpt.base import DEFAULT_DB_NAME, MongoSaverBase
from mongo_ckpt.calls import Operation
from mongo_ckpt.client import aiterate, arun, run_on_loop


class AsyncMongoDBSaver(MongoSaverBase):
    """LangGraph checkpointer on an asynchronous MongoDB client.

    Example:
        >>> client = AsyncMongoClient("mongodb://localhost:27017")
        >>> graph = builder.compile(checkpointer=AsyncMongoDBSaver(client))
        >>> await graph.ainvoke(inputs, {"configurable": {"thread_id": "1"}})
    """

    loop: asyncio.AbstractEventLoop | None = None

    def __init__(
        self, client: Any, db_name: str = DEFAULT_DB_NAME, *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(client, db_name, *args, **kwargs)
        try:  # built inside the application's loop: sync calls from other threads work at once
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

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
        return run_on_loop(self._arun(operation), self.loop, type(self).__name__)

    def _iter(self, operation: Operation) -> Iterator[Any]:
        items = self._aiter(operation)
        while True:
            try:
                yield run_on_loop(_next(items), self.loop, type(self).__name__)
            except StopAsyncIteration:
                return


async def _next(items: AsyncIterator[Any]) -> Any:
    return await anext(items)
