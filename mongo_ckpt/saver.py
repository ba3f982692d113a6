"""``MongoDBSaver``: the synchronous checkpointer on ``pymongo.MongoClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from pymongo import MongoClient

from mongo_ckpt.base import DEFAULT_DB_NAME, MongoSaverBase
from mongo_ckpt.calls import Operation
from mongo_ckpt.client import iterate, run

_DONE = object()


class MongoDBSaver(MongoSaverBase):
    """LangGraph checkpointer on a synchronous MongoDB client (``MongoClient``, mongomock).

    The async methods run the sync ones in a worker thread.

    Example:
        >>> with MongoDBSaver.from_conn_string("mongodb://localhost:27017") as saver:
        ...     graph = builder.compile(checkpointer=saver)
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, db_name: str = DEFAULT_DB_NAME, **kwargs: Any
    ) -> Iterator[MongoDBSaver]:
        """A saver on a new client that is closed when the context exits."""
        client: MongoClient = MongoClient(conn_string)
        try:
            yield cls(client, db_name, **kwargs)
        finally:
            client.close()

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
