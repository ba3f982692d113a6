"""Fixtures of the cache tests: ``cache_api`` on every target, and ``clock``.

The cache measures elapsed time with ``mongo_ckpt.cache.operations.monotonic`` (added to one
reading of the server's clock); the ``clock`` fixture replaces it, and shifts the readings
by as much, so that a test moves time on without waiting, or freezes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta

import pytest

from mongo_ckpt.calls import Operation
from mongo_ckpt.clock import server_now
from tests.backends import Target, aclose, maybe_await
from tests.cache.support import CacheApi, Clock, cache_class


@pytest.fixture
async def cache_api(target: Target, db_name: str) -> AsyncIterator[CacheApi]:
    """A set-up cache of ``target``'s kind in a fresh database, behind ``CacheApi``."""
    client = target.client()
    api = CacheApi(cache_class(target)(client, db_name))
    await api.setup()
    yield api
    await maybe_await(client.drop_database(db_name))
    await aclose(client)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The cache's time, moved on by ``clock.advance``: its elapsed time, and the readings
    of the server's clock (so a fresh reading agrees with the time counted since the last)."""
    clock = Clock()

    def shifted_server_now() -> Operation[datetime]:
        now = yield from server_now()
        return now + timedelta(seconds=clock.offset)

    monkeypatch.setattr("mongo_ckpt.cache.operations.monotonic", clock)
    monkeypatch.setattr("mongo_ckpt.cache.operations.server_now", shifted_server_now)
    yield clock
