"""``AsyncMongoDBCache``: LangGraph's node cache, native async.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the cache's event loop from another thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.cache.base import ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol
from typing_extensions import Self

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.cache.base import DEFAULT_COLLECTION, MongoCacheBase
from mongo_ckpt.connection import DEFAULT_DB_NAME, AsyncClientOwner
from mongo_ckpt.drivers import AsyncDriver
from mongo_ckpt.store.aio import AsyncMongoDBStore
from mongo_ckpt.telemetry import Tracing


class AsyncMongoDBCache(AsyncClientOwner, AsyncDriver, MongoCacheBase[ValueT]):
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

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls,
        conn_string: str,
        db_name: str = DEFAULT_DB_NAME,
        *,
        collection_name: str = DEFAULT_COLLECTION,
        serde: SerializerProtocol | None = None,
        tracing: Tracing | None = None,
        client_kwargs: dict[str, Any] | None = None,
        timeoutMS: int | None = None,  # noqa: N803 (PyMongo's spelling)
    ) -> AsyncIterator[Self]:
        """A cache on a new ``AsyncMongoClient`` that is closed when the context exits
        (its ``timeoutMS`` is 10 s unless the URI, ``timeoutMS`` or ``client_kwargs`` say)."""
        async with super().from_conn_string(
            conn_string,
            db_name,
            client_kwargs=client_kwargs,
            timeoutMS=timeoutMS,
            collection_name=collection_name,
            serde=serde,
            tracing=tracing,
        ) as cache:
            yield cache
