"""``AsyncMongoDBStore``: the native-async long-term memory store.

Runs on PyMongo's ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient`` or
mongomock-motor; the sync methods submit to the store's event loop from
another thread (as sync graph nodes do when the graph runs async).
"""

from __future__ import annotations

import asyncio
import logging

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.connection import AsyncClient, AsyncClientOwner, AsyncCollection
from mongo_ckpt.drivers import AsyncDriver
from mongo_ckpt.store.base import MongoStoreBase

logger = logging.getLogger(__name__)


class AsyncMongoDBStore(
    AsyncClientOwner, AsyncDriver, MongoStoreBase[AsyncClient, AsyncCollection]
):
    """LangGraph ``BaseStore`` on an asynchronous MongoDB client.

    Example:
        >>> store = AsyncMongoDBStore.from_saver(saver)
        >>> graph = builder.compile(checkpointer=saver, store=store)
        >>> await store.aput(("users", "42"), "prefs", {"theme": "dark"})
    """

    _saver_type = AsyncMongoDBSaver
    _sweeper: asyncio.Task[None] | None = None
    _sweeper_stop: asyncio.Event

    async def setup(self) -> None:  # type: ignore[override]
        """Create the indexes (idempotent; also done on first use): ``await store.setup()``,
        as on LangGraph's other async stores; ``asetup`` is the same coroutine."""
        await self.asetup()

    async def upgrade(self) -> None:  # type: ignore[override]
        """``MongoDBStore.upgrade`` as a coroutine, like ``setup``; ``aupgrade`` is the same
        coroutine."""
        await self.aupgrade()

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the
        ``TTLConfig``'s ``sweep_interval_minutes``, else 5) in a task on the running loop,
        as ``AsyncPostgresStore`` does; returns the task (the running one if started)."""
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = self._sweep_interval_seconds(sweep_interval_minutes)
        stop = self._sweeper_stop = asyncio.Event()

        async def sweep_forever() -> None:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                    return
                except asyncio.TimeoutError:
                    pass
                try:
                    deleted = await self.asweep_ttl()
                    if deleted:
                        logger.info("TTL sweep deleted %d expired items", deleted)
                except Exception:
                    logger.exception("TTL sweep failed")

        self._sweeper = asyncio.create_task(sweep_forever())
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper task; ``True`` if it stopped within ``timeout`` seconds."""
        task, self._sweeper = self._sweeper, None
        if task is None or task.done():
            return True
        self._sweeper_stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            self._sweeper = task
            return False
        return True
