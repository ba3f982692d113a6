"""``MongoDBCache``: LangGraph's node cache on a synchronous MongoDB client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.cache.base import ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol
from typing_extensions import Self

from mongo_ckpt.cache.base import DEFAULT_COLLECTION, MongoCacheBase
from mongo_ckpt.connection import DEFAULT_DB_NAME, SyncClientOwner
from mongo_ckpt.drivers import SyncDriver
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.store.sync import MongoDBStore
from mongo_ckpt.telemetry import Tracing


class MongoDBCache(SyncClientOwner, SyncDriver, MongoCacheBase[ValueT]):
    """LangGraph ``BaseCache`` on ``pymongo.MongoClient`` (or mongomock), for nodes with a
    ``CachePolicy``. The async methods run the I/O in a worker thread.

    Example:
        >>> cache = MongoDBCache.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, cache=cache)
    """

    _saver_type = MongoDBSaver
    _store_type = MongoDBStore

    @classmethod
    @contextmanager
    def from_conn_string(  # type: ignore[override]
        cls,
        conn_string: str,
        db_name: str = DEFAULT_DB_NAME,
        *,
        collection_name: str = DEFAULT_COLLECTION,
        serde: SerializerProtocol | None = None,
        tracing: Tracing | None = None,
        client_kwargs: dict[str, Any] | None = None,
        timeoutMS: int | None = None,  # noqa: N803 (PyMongo's spelling)
    ) -> Iterator[Self]:
        """A cache on a new ``MongoClient`` that is closed when the context exits (its
        ``timeoutMS`` is 10 s unless the URI, ``timeoutMS`` or ``client_kwargs`` say)."""
        with super().from_conn_string(
            conn_string,
            db_name,
            client_kwargs=client_kwargs,
            timeoutMS=timeoutMS,
            collection_name=collection_name,
            serde=serde,
            tracing=tracing,
        ) as cache:
            yield cache
