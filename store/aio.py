"""``AsyncMongoDBStore``: the native-async long-term memory store.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the store's event loop from
another thread (as sync graph nodes do when the graph runs async).
"""

from __future__ import annotations

from typing import Any

from mongo_ckpt.store.base import MongoStoreBase

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import AsyncClientOwner
from mongo_ckpt.drivers import arun


class AsyncMongoDBStore(AsyncClientOwner, MongoStoreBase):
    """LangGraph ``BaseStore`` on an asynchronous MongoDB client.

    Example:
        >>> store = AsyncMongoDBStore.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, store=store)
        >>> await store.aput(("users", "42"), "prefs", {"theme": "dark"})
    """

    _saver_type = AsyncMongoDBSaver

    async def _arun_op(self, operation: Operation) -> Any:
        self._bind_running_loop()
        return await arun(self.collections, operation)

    def _run_op(self, operation: Operation) -> Any:
        return self._on_loop(self._arun_op(operation))
