"""Thread retention: with ``ttl``, whole threads idle for longer than ``ttl`` expire.

A thread's activity is its newest checkpoint. Checkpoints are aged by rewriting their
``created_at`` in the checkpoints collection; a thread with an old history and one recent
run must not lose a single document.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.base import MongoSaverBase
from tests.delta_graphs import CHANNEL, Shape, Step, builder, documents, play
from tests.graphs import thread
from tests.saver_support import Api

TTL = 3600.0
# Subgraph namespaces: a thread expires with all of them.
SHAPE = Shape(snapshot_frequency=3, writers=2, subgraph=True, durability="async")
RUN = [Step("invoke", 0), Step("invoke", 1)]
SMALL = Shape(snapshot_frequency=3, writers=1, subgraph=False, durability="async")


async def counts(saver: MongoSaverBase, thread_id: str) -> dict[str, int]:
    return {name: len(docs) for name, docs in (await documents(saver, thread_id)).items()}


async def test_sweep_expired(api: Api) -> None:
    # The first put sweeps (nothing has expired yet); the next ones, within
    # sweep_interval, do not.
    api = api.reopened(ttl=TTL, sweep_interval=TTL)
    graph = api.compile(builder(SHAPE, delta=True))
    for thread_id in ("idle", "active", "fresh"):
        await play(api, graph, SHAPE, RUN, thread_id)
    assert await api.join_sweep(timeout=60)  # the first put's sweep, done before the ageing
    await api.age("idle", 2 * TTL)
    await api.age("active", 2 * TTL)
    # One recent run on an old thread makes it active again.
    await play(api, graph, SHAPE, [Step("invoke", 2)], "active")
    kept = {t: await documents(api.saver, t) for t in ("active", "fresh")}
    assert all(n > 0 for n in (await counts(api.saver, "idle")).values())

    assert await api.sweep_expired() == ["idle"]

    assert await counts(api.saver, "idle") == {"checkpoints": 0, "blobs": 0, "writes": 0}
    for thread_id, docs in kept.items():
        assert await documents(api.saver, thread_id) == docs, thread_id
    state = await api.state(graph, thread("active"))
    assert [m.id for m in state.values[CHANNEL]][:2] == ["in0", "head-1"]
    assert await api.sweep_expired() == []


async def test_automatic_sweep(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=0.05)
    graph = api.compile(builder(SMALL, delta=True))
    for thread_id in ("idle", "fresh"):
        await play(api, graph, SMALL, RUN[:1], thread_id)
    # The sweeps these puts started, done before "idle" ages: not one that would find it.
    assert await api.join_sweep(timeout=60)
    fresh = await documents(api.saver, "fresh")
    await api.age("idle", 2 * TTL)
    idle = await documents(api.saver, "idle")
    await asyncio.sleep(0.1)

    # Reads never sweep: they cost what they cost without a ttl.
    await api.state(graph, thread("fresh"))
    assert await documents(api.saver, "idle") == idle

    # A put, here on another thread, starts a sweep of the expired threads in the background.
    await play(api, graph, SMALL, RUN[:1], "other")
    assert await api.join_sweep(timeout=60)

    assert await counts(api.saver, "idle") == {"checkpoints": 0, "blobs": 0, "writes": 0}
    assert await documents(api.saver, "fresh") == fresh


@pytest.mark.parametrize("ttl", [0, -5.0])
def test_ttl_must_be_positive(client: Any, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number of seconds"):
        MongoDBSaver(client, "unused", ttl=ttl)
