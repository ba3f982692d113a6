"""Differential test: random get/set/clear sequences with TTLs, with time moved on between
calls, give the same results from the MongoDB cache as from LangGraph's ``InMemoryCache``.

Both caches run on one controlled clock: ``InMemoryCache`` reads
``langgraph.cache.memory.datetime``, replaced here; the MongoDB cache counts elapsed time on
``mongo_ckpt.cache.operations.monotonic`` (the ``clock`` fixture) from one reading of the
server's clock. Time is frozen between moves, so boundaries are exact: an entry set with TTL
``t`` is served until exactly ``t`` seconds have passed, by both. TTLs of 30 s and more keep
the wire server's TTL monitor (real time) from deleting an entry still live on the clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.cache.memory import InMemoryCache

from tests.backends import TARGETS, Target, aclose, maybe_await, target_params
from tests.cache.support import CacheApi, Clock, cache_class

NAMESPACES = [("n", "a"), ("n", "b"), ("n",), ("n,a",), ("n-",), ("m", "a")]
FULL_KEYS = [(ns, k) for ns in NAMESPACES for k in ("k0", "k1")]
TTLS = [None, 0, 30, 31, 60, 300]
MOVES = [0, 1, 29, 30, 31, 59, 60, 61, 299, 300]

full_keys = st.sampled_from(FULL_KEYS)
steps = st.one_of(
    st.tuples(
        st.just("set"),
        st.dictionaries(
            full_keys, st.tuples(st.integers(0, 99), st.sampled_from(TTLS)), min_size=1,
            max_size=4,
        ),
    ),
    st.tuples(st.just("get"), st.lists(full_keys, min_size=1, max_size=6)),
    st.tuples(
        st.just("clear"),
        st.one_of(st.none(), st.lists(st.sampled_from(NAMESPACES), max_size=2)),
    ),
    st.tuples(st.just("move"), st.sampled_from(MOVES)),
)
sequences = st.lists(steps, min_size=1, max_size=30)
EXAMPLES = {"mock": 150, "wire": 40, "mongodb": 40}


class FrozenUtc:
    """``datetime.datetime`` as ``InMemoryCache`` uses it: ``now(tz)``, on a moved clock."""

    start = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    offset = 0.0

    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:
        return cls.start + dt.timedelta(seconds=cls.offset)


async def run(make_client: Callable[[], Any], target: Target, db_name: str, seq: list[Any],
              clock: Clock) -> None:
    client = make_client()
    try:
        cache = CacheApi(cache_class(target)(client, db_name))
        memory: InMemoryCache[Any] = InMemoryCache()
        clock.offset = FrozenUtc.offset = 0.0
        clock.freeze()
        await cache.clear()  # the previous example's entries; sets up and reads the clock
        cache.cache.ops.clock.refresh_seconds = math.inf  # time is frozen: one reading holds
        for kind, arg in seq:
            if kind == "move":
                clock.advance(arg)
                FrozenUtc.offset += arg
            elif kind == "set":
                await cache.set(arg)
                memory.set(arg)
            elif kind == "clear":
                await cache.clear(arg)
                memory.clear(arg)
            else:
                assert await cache.get(arg) == memory.get(arg), (kind, arg)
        assert await cache.get(FULL_KEYS) == memory.get(FULL_KEYS)
    finally:
        if target.is_async:
            await aclose(client)


@pytest.mark.parametrize("target", target_params(TARGETS))
def test_same_results_as_in_memory_cache(
    target: Target, db_name: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "langgraph.cache.memory.datetime",
        types.SimpleNamespace(datetime=FrozenUtc, timedelta=dt.timedelta, timezone=dt.timezone),
    )
    # Async clients belong to the loop of one example; a sync client serves them all.
    shared = None if target.is_async else target.client()

    @settings(
        max_examples=EXAMPLES[target.backend], deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(seq=sequences)
    def check(seq: list[Any]) -> None:
        asyncio.run(run(lambda: shared or target.client(), target, db_name, seq, clock))

    try:
        check()
    finally:
        cleanup = shared or target.client()
        asyncio.run(_drop(cleanup, db_name))


async def _drop(client: Any, db_name: str) -> None:
    await maybe_await(client.drop_database(db_name))
    await aclose(client)
