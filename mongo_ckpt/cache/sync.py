"""``MongoDBCache``: LangGraph's node cache on a synchronous MongoDB client."""

from __future__ import annotations

from langgraph.cache.base import ValueT

from mongo_ckpt.cache.base import MongoCacheBase
from mongo_ckpt.connection import SyncClient, SyncClientOwner
from mongo_ckpt.drivers import SyncDriver
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.store.sync import MongoDBStore


class MongoDBCache(SyncClientOwner, SyncDriver, MongoCacheBase[ValueT, SyncClient]):
    """LangGraph ``BaseCache`` on ``pymongo.MongoClient`` (or mongomock), for nodes with a
    ``CachePolicy``. The async methods run the I/O in a worker thread.

    Example:
        >>> cache = MongoDBCache.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, cache=cache)
    """

    _saver_type = MongoDBSaver
    _store_type = MongoDBStore
