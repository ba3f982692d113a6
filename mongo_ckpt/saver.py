"""``MongoDBSaver``: the synchronous checkpointer on ``pymongo.MongoClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import SyncClientOwner
from mongo_ckpt.drivers import iterate, run

_DONE = object()


class MongoDBSaver(SyncClientOwner, MongoSaverBase):
    """LangGraph checkpointer on a synchronous MongoDB client (``MongoClient``, mongomock).

    The async methods run the sync ones in a worker thread.

    Example:
        >>> with MongoDBSaver.from_conn_string("mongodb://localhost:27017") as saver:
        ...     graph = builder.compile(checkpointer=saver)
    """

    def _run(self, operation: Operation) -> Any:
        return run(self.collections, self._prepared(operation))

    def _iter(self, operation: Operation) -> Iterator[Any]:
        return iterate(self.collections, self._prepared(operation))

    async def _arun(self, operation: Operation) -> Any:
        return await asyncio.to_thread(self._run, operation)

    async def _aiter(self, operation: Operation) -> AsyncIterator[Any]:
        items = self._iter(operation)
        while (item := await asyncio.to_thread(next, items, _DONE)) is not _DONE:
            yield item
