"""``MongoDBStore``: the long-term memory store on a synchronous MongoDB client."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, TimeoutError

from mongo_ckpt.connection import SyncClient, SyncClientOwner, SyncCollection
from mongo_ckpt.drivers import SyncDriver
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.store.base import MongoStoreBase

logger = logging.getLogger(__name__)


class MongoDBStore(SyncClientOwner, SyncDriver, MongoStoreBase[SyncClient, SyncCollection]):
    """LangGraph ``BaseStore`` on ``pymongo.MongoClient`` (or mongomock).

    The async methods run the I/O in a worker thread.

    Example:
        >>> store = MongoDBStore(MongoClient(uri), index={"dims": 1536, "embed": embed})
        >>> store.put(("users", "42"), "prefs", {"theme": "dark"})
        >>> store.search(("users",), query="colour scheme")
    """

    _saver_type = MongoDBSaver
    _sweeper: Future[None] | None = None
    _sweeper_stop: threading.Event

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: the
        ``TTLConfig``'s ``sweep_interval_minutes``, else 5) in a daemon thread, as
        ``PostgresStore`` does; the future completes when the sweeper stops."""
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = self._sweep_interval_seconds(sweep_interval_minutes)
        stop = self._sweeper_stop = threading.Event()
        future: Future[None] = Future()

        def sweep_forever() -> None:
            try:
                while not stop.wait(interval):
                    try:
                        deleted = self.sweep_ttl()
                        if deleted:
                            logger.info("TTL sweep deleted %d expired items", deleted)
                    except Exception:
                        logger.exception("TTL sweep failed")
            finally:
                future.set_result(None)

        threading.Thread(target=sweep_forever, name="mongo-ckpt-ttl-sweeper", daemon=True).start()
        self._sweeper = future
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; ``True`` if it stopped within ``timeout`` seconds."""
        future = self._sweeper
        if future is None or future.done():
            self._sweeper = None
            return True
        self._sweeper_stop.set()
        try:
            future.result(timeout)
        except TimeoutError:
            return False
        self._sweeper = None
        return True
