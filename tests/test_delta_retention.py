"""Thread retention: with ``ttl``, whole threads idle for longer than ``ttl`` expire.

A thread's activity is its newest checkpoint. Checkpoints are aged by rewriting their
``created_at`` in the checkpoints collection; a thread with an old history and one recent
run must not lose a single document.
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.base import MongoSaverBase
from tests.delta_graphs import CHANNEL, Shape, Step, builder, call, documents, play
from tests.graphs import AsyncRunner, Runner, SyncRunner, thread

TTL = 3600.0
# Subgraph namespaces: a thread expires with all of them.
SHAPE = Shape(snapshot_frequency=3, writers=2, subgraph=True, durability="async")
RUN = [Step("invoke", 0), Step("invoke", 1)]
SMALL = Shape(snapshot_frequency=3, writers=1, subgraph=False, durability="async")


def with_ttl(run: Runner, **kwargs: Any) -> Runner:
    """A runner on a new saver, with ``kwargs`` (``ttl``...), over the same database."""
    saver = run.saver
    return type(run)(type(saver)(saver.client, saver.db.name, **kwargs))


async def age(saver: MongoSaverBase, thread_id: str) -> None:
    """Make every checkpoint of the thread twice ``TTL`` old."""
    old = datetime.now(timezone.utc) - timedelta(seconds=2 * TTL)
    result = saver.collections["checkpoints"].update_many(
        {"thread_id": thread_id}, {"$set": {"created_at": old}}
    )
    if inspect.isawaitable(result):
        await result


async def counts(saver: MongoSaverBase, thread_id: str) -> dict[str, int]:
    return {name: len(docs) for name, docs in (await documents(saver, thread_id)).items()}


async def check_sweep(run: Runner) -> None:
    # The first operation sweeps (nothing has expired yet); the next ones, within
    # sweep_interval, do not.
    run = with_ttl(run, ttl=TTL, sweep_interval=TTL)
    graph = run.compile(builder(SHAPE, delta=True))
    for thread_id in ("idle", "active", "fresh"):
        await play(run, graph, SHAPE, RUN, thread_id)
    await age(run.saver, "idle")
    await age(run.saver, "active")
    # One recent run on an old thread makes it active again.
    await play(run, graph, SHAPE, [Step("invoke", 2)], "active")
    kept = {t: await documents(run.saver, t) for t in ("active", "fresh")}
    assert all(n > 0 for n in (await counts(run.saver, "idle")).values())

    assert await call(run.saver, "sweep_expired") == ["idle"]

    assert await counts(run.saver, "idle") == {"checkpoints": 0, "blobs": 0, "writes": 0}
    for thread_id, docs in kept.items():
        assert await documents(run.saver, thread_id) == docs, thread_id
    state = await run.state(graph, thread("active"))
    assert [m.id for m in state.values[CHANNEL]][:2] == ["in0", "head-1"]
    assert await call(run.saver, "sweep_expired") == []


async def check_automatic_sweep(run: Runner) -> None:
    run = with_ttl(run, ttl=TTL, sweep_interval=0.05)
    graph = run.compile(builder(SMALL, delta=True))
    for thread_id in ("idle", "fresh"):
        await play(run, graph, SMALL, RUN[:1], thread_id)
    fresh = await documents(run.saver, "fresh")
    await age(run.saver, "idle")
    await asyncio.sleep(0.1)

    # Any operation, here a read of another thread, first sweeps the expired threads.
    await run.state(graph, thread("fresh"))

    assert await counts(run.saver, "idle") == {"checkpoints": 0, "blobs": 0, "writes": 0}
    assert await documents(run.saver, "fresh") == fresh


async def check_without_ttl(run: Runner) -> None:
    graph = run.compile(builder(SMALL, delta=True))
    await play(run, graph, SMALL, RUN[:1], "idle")
    await age(run.saver, "idle")
    before = await documents(run.saver, "idle")
    with pytest.raises(ValueError, match="ttl=<seconds"):
        await call(run.saver, "sweep_expired")
    assert await documents(run.saver, "idle") == before


async def test_sweep_expired_sync(saver: MongoDBSaver) -> None:
    await check_sweep(SyncRunner(saver))


async def test_sweep_expired_async(asaver: AsyncMongoDBSaver) -> None:
    await check_sweep(AsyncRunner(asaver))


async def test_automatic_sweep_sync(saver: MongoDBSaver) -> None:
    await check_automatic_sweep(SyncRunner(saver))


async def test_automatic_sweep_async(asaver: AsyncMongoDBSaver) -> None:
    await check_automatic_sweep(AsyncRunner(asaver))


async def test_sweep_needs_ttl_sync(saver: MongoDBSaver) -> None:
    await check_without_ttl(SyncRunner(saver))


async def test_sweep_needs_ttl_async(asaver: AsyncMongoDBSaver) -> None:
    await check_without_ttl(AsyncRunner(asaver))


@pytest.mark.parametrize("ttl", [0, -5.0])
def test_ttl_must_be_positive(client: Any, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number of seconds"):
        MongoDBSaver(client, "unused", ttl=ttl)
