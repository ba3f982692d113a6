"""``MongoDBSaver``: the synchronous checkpointer on ``pymongo.MongoClient``."""

from __future__ import annotations

from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.connection import SyncClient, SyncClientOwner
from mongo_ckpt.drivers import SyncDriver


class MongoDBSaver(SyncClientOwner, SyncDriver, MongoSaverBase[SyncClient]):
    """LangGraph checkpointer on a synchronous MongoDB client (``MongoClient``, mongomock).

    The async methods run the sync ones in a worker thread.

    Example:
        >>> with MongoDBSaver.from_conn_string("mongodb://localhost:27017") as saver:
        ...     graph = builder.compile(checkpointer=saver)
    """
