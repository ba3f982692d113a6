"""``AsyncMongoDBSaver``: the native-async checkpointer.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the saver's event loop from
another thread, as LangGraph's other async savers do.
"""

from __future__ import annotations

from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.connection import AsyncClient, AsyncClientOwner
from mongo_ckpt.drivers import AsyncDriver


class AsyncMongoDBSaver(AsyncClientOwner, AsyncDriver, MongoSaverBase[AsyncClient]):
    """LangGraph checkpointer on an asynchronous MongoDB client.

    Example:
        >>> client = AsyncMongoClient("mongodb://localhost:27017")
        >>> graph = builder.compile(checkpointer=AsyncMongoDBSaver(client))
        >>> await graph.ainvoke(inputs, {"configurable": {"thread_id": "1"}})
    """

    async def setup(self) -> None:  # type: ignore[override]
        """``MongoDBSaver.setup`` as a coroutine: ``await saver.setup()``, as on
        ``AsyncPostgresSaver``; ``asetup`` is the same coroutine."""
        await self.asetup()

    async def upgrade(self) -> None:  # type: ignore[override]
        """``MongoDBSaver.upgrade`` as a coroutine, like ``setup``; ``aupgrade`` is the
        same coroutine."""
        await self.aupgrade()
