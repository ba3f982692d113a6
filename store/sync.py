"""``MongoDBStore``: the long-term memory store on a synchronous MongoDB client."""

from __future__ import annotations

import asyncio
from typing import Any

from mongo_ckpt.store.base import MongoStoreBase

from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import SyncClientOwner
from mongo_ckpt.drivers import run
from mongo_ckpt.saver import MongoDBSaver


class MongoDBStore(SyncClientOwner, MongoStoreBase):
    """LangGraph ``BaseStore`` on ``pymongo.MongoClient`` (or mongomock).

    The async methods run the I/O in a worker thread.

    Example:
        >>> store = MongoDBStore(MongoClient(uri), index={"dims": 1536, "embed": embed})
        >>> store.put(("users", "42"), "prefs", {"theme": "dark"})
        >>> store.search(("users",), query="colour scheme")
    """

    _saver_type = MongoDBSaver

    def _run_op(self, operation: Operation) -> Any:
        return run(self.collections, operation)

    async def _arun_op(self, operation: Operation) -> Any:
        return await asyncio.to_thread(self._run_op, operation)
