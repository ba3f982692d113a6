"""``AsyncMongoDBSaver``: the native-async checkpointer.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the saver's event loop from
another thread, as LangGraph's other async savers do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import AsyncClientOwner
from mongo_ckpt.drivers import aiterate, arun
from mongo_ckpt.schema import UPGRADE_LIMIT


class AsyncMongoDBSaver(AsyncClientOwner, MongoSaverBase):
    """LangGraph checkpointer on an asynchronous MongoDB client.

    Example:
        >>> client = AsyncMongoClient("mongodb://localhost:27017")
        >>> graph = builder.compile(checkpointer=AsyncMongoDBSaver(client))
        >>> await graph.ainvoke(inputs, {"configurable": {"thread_id": "1"}})
    """

    async def setup(self, *, upgrade_limit: int | None = UPGRADE_LIMIT) -> None:  # type: ignore[override]
        """``MongoDBSaver.setup`` as a coroutine: ``await saver.setup()``, as on
        ``AsyncPostgresSaver``; ``asetup`` is the same coroutine."""
        await self.asetup(upgrade_limit=upgrade_limit)

    async def _arun(self, operation: Operation) -> Any:
        self._bind_running_loop()
        return await arun(self.collections, self._prepared(operation))

    async def _aiter(self, operation: Operation) -> AsyncIterator[Any]:
        self._bind_running_loop()
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


async def _next(items: AsyncIterator[Any]) -> Any:
    return await anext(items)
