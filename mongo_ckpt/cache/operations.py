"""The cache's operations, written once for the sync and the async cache.

Each public call is one command once the cache is set up: ``get`` one ``find``, ``set``
one unordered ``bulk_write`` of upserts, ``clear`` one ``delete_many``. Their arguments
are validated (and values serialized) before the operation is built, so a refused batch
sends nothing.

Expiry is judged by the server's clock. ``ServerClock`` reads it once (``server_now``,
one round trip, done by ``setup``) and then counts the time elapsed on the client's
monotonic clock, which a wrong or jumping wall clock does not affect; it reads the
server again every ``CLOCK_REFRESH_SECONDS``. ``set`` writes ``expires_at`` in that
time, ``get`` hides entries whose ``expires_at`` has passed in it, and the server's TTL
monitor deletes them later by the same clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from langgraph.cache.base import FullKey, Namespace

from mongo_ckpt.cache import documents
from mongo_ckpt.calls import Operation, bulk_write, create_indexes, delete_many, find
from mongo_ckpt.clock import server_now

CACHE = "cache"  # logical name of the entries collection in ``cache.collections``
# How long one reading of the server's clock is trusted (a monotonic clock drifts by tens
# of parts per million at worst: a few milliseconds over this time).
CLOCK_REFRESH_SECONDS = 300.0

monotonic = time.monotonic  # the elapsed-time source; tests replace it to move time on


class ServerClock:
    """The server's current time, from one reading plus the monotonic time since."""

    def __init__(self, refresh_seconds: float = CLOCK_REFRESH_SECONDS) -> None:
        self.refresh_seconds = refresh_seconds
        self._reading: tuple[datetime, float] | None = None

    def stale(self) -> bool:
        """No reading yet, or one older than ``refresh_seconds``."""
        return self._reading is None or monotonic() - self._reading[1] > self.refresh_seconds

    def read(self) -> Operation[None]:
        """Read the server's clock (one round trip).

        The reading is taken as of the moment it was sent: the server read its clock later
        than that, so the estimate is never behind the server's time (ahead by at most the
        round trip), and an entry is never served after its ``expires_at`` passed there.
        """
        sent = monotonic()
        now = yield from server_now()
        self._reading = (now, sent)

    def now(self) -> Operation[datetime]:
        """The server's time now; reads it first when the last reading is stale."""
        if self.stale():
            yield from self.read()
        assert self._reading is not None
        server, at = self._reading
        return server + timedelta(seconds=monotonic() - at)


class CacheOperations:
    """Builds each cache operation as a ``calls.Operation``."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def setup(self) -> Operation[None]:
        """The indexes (idempotent) and a first reading of the server's clock."""
        yield from create_indexes(CACHE, documents.index_models())
        yield from self.clock.read()

    def get(self, keys: Sequence[FullKey]) -> Operation[list[tuple[FullKey, tuple[str, bytes]]]]:
        """The live entries of ``keys`` (checked), serialized: one ``find``."""
        if not keys:
            return []
        by_id = {documents.entry_id(key): key for key in keys}
        now = yield from self.clock.now()
        docs = yield from find(
            CACHE, documents.live_entries(list(by_id), now), projection=documents.ENTRY_FIELDS
        )
        return [(by_id[doc["_id"]], documents.decoded(doc)) for doc in docs]

    def set(
        self, entries: Mapping[FullKey, tuple[str, bytes, float | None]]
    ) -> Operation[None]:
        """Upsert ``entries`` (checked and serialized: encoding, data, TTL) in one unordered
        ``bulk_write``; each replaces any earlier entry of its pair, expiry included."""
        if not entries:
            return
        now = yield from self.clock.now()
        requests = [
            documents.upsert(documents.entry(key, encoding, data, documents.expiry(now, ttl)))
            for key, (encoding, data, ttl) in entries.items()
        ]
        yield from bulk_write(CACHE, requests, ordered=False)

    def clear(self, namespaces: Sequence[Namespace] | None) -> Operation[None]:
        """Delete the entries of ``namespaces`` (checked; all for ``None``): one
        ``delete_many``, none for an empty list."""
        if namespaces is None or namespaces:
            yield from delete_many(CACHE, documents.in_namespaces(namespaces))
