"""``AsyncMongoDBStore``: the native-async long-term memory store.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the store's event loop from
another thread (as sync graph nodes do when the graph runs async).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pymongo import AsyncMongoClient

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.base import DEFAULT_DB_NAME
from mongo_ckpt.calls import Operation
from mongo_ckpt.client import arun, run_on_loop
from store.base import MongoStoreBase


class AsyncMongoDBStore(MongoStoreBase):
    """LangGraph ``BaseStore`` on an asynchronous MongoDB client.

    Example:
        >>> store = AsyncMongoDBStore.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, store=store)
        >>> await store.aput(("users", "42"), "prefs", {"theme": "dark"})
    """

    _saver_type = AsyncMongoDBSaver
    loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, client: Any, db_name: str = DEFAULT_DB_NAME, **kwargs: Any) -> None:
        super().__init__(client, db_name, **kwargs)
        try:  # built inside the application's loop: sync calls from other threads work at once
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str, db_name: str = DEFAULT_DB_NAME, **kwargs: Any
    ) -> AsyncIterator[AsyncMongoDBStore]:
        """A store on a new ``AsyncMongoClient`` that is closed when the context exits."""
        client: AsyncMongoClient = AsyncMongoClient(conn_string)
        try:
            yield cls(client, db_name, **kwargs)
        finally:
            await client.close()

    async def _arun_op(self, operation: Operation) -> Any:
        self.loop = asyncio.get_running_loop()
        return await arun(self.collections, operation)

    def _run_op(self, operation: Operation) -> Any:
        return run_on_loop(self._arun_op(operation), self.loop, type(self).__name__)
