"""``AsyncMongoDBCache``: LangGraph's node cache, native async.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the cache's event loop from another thread.
"""

from __future__ import annotations

from langgraph.cache.base import ValueT

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.cache.base import MongoCacheBase
from mongo_ckpt.connection import AsyncClient, AsyncClientOwner
from mongo_ckpt.drivers import AsyncDriver
from mongo_ckpt.store.aio import AsyncMongoDBStore


class AsyncMongoDBCache(AsyncClientOwner, AsyncDriver, MongoCacheBase[ValueT, AsyncClient]):
    """LangGraph ``BaseCache`` on an asynchronous MongoDB client, for nodes with a
    ``CachePolicy``.

    Example:
        >>> cache = AsyncMongoDBCache.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, cache=cache)
        >>> await graph.ainvoke(inputs, config)
    """

    _saver_type = AsyncMongoDBSaver
    _store_type = AsyncMongoDBStore

    async def setup(self) -> None:  # type: ignore[override]
        """Create the indexes and read the server's clock (idempotent; also done on first
        use): ``await cache.setup()``; ``asetup`` is the same coroutine."""
        await self.asetup()
