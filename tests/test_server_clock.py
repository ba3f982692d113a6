"""The server's clock, read through every driver: what decides deletions (clock.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from mongo_ckpt.clock import server_now
from tests.saver_support import Api


async def test_server_now_is_the_servers_aware_utc_time(api: Api) -> None:
    before = datetime.now(timezone.utc)
    first = await api.run(server_now())
    second = await api.run(server_now())
    after = datetime.now(timezone.utc)
    assert first.tzinfo is not None and first.utcoffset() == timedelta(0)
    # Same machine here: the server's clock is this one (to the millisecond it stores).
    assert before - timedelta(seconds=1) <= first <= second <= after + timedelta(seconds=1)
