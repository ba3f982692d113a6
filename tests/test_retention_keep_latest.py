"""Retention with ``ttl_strategy="keep_latest"``: a thread idle for longer than ``ttl`` is
pruned to each namespace's latest checkpoint (and the ancestors its DeltaChannels replay)
instead of deleted, so its conversation goes on where it stopped; threads active since
the cutoff keep every document, and the same sweep again changes nothing.

Checkpoints are aged by rewriting their ``created_at``, as in ``test_delta_retention``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.clock import server_now
from mongo_ckpt.layout import CHECKPOINTS
from tests.delta_graphs import (
    Shape,
    Step,
    all_states,
    builder,
    by_namespace,
    checkpoint_id,
    documents,
    play,
)
from tests.graphs import thread
from tests.saver_support import Api, assert_no_orphans

SHAPE = Shape(snapshot_frequency=3, writers=2, subgraph=True, durability="async")
TTL = 3600.0
RUN = [Step("invoke", 0), Step("invoke", 1), Step("invoke", 2)]


async def latest_per_namespace(api: Api, thread_id: str) -> list[str]:
    return sorted(
        checkpoint_id(group[-1].config) for group in by_namespace(await api.list(thread(thread_id)))
    )


async def test_expired_threads_keep_their_latest_state(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=TTL, ttl_strategy="keep_latest")
    graph = api.compile(builder(SHAPE, delta=True))
    for thread_id in ("idle", "active", "fresh", "reference"):
        await play(api, graph, SHAPE, RUN, thread_id)
    assert await api.join_sweep(timeout=60)  # the first put's sweep, before the ageing
    await api.age("idle", 2 * TTL)
    await api.age("active", 2 * TTL)
    await play(api, graph, SHAPE, [Step("invoke", 3)], "active")  # active again
    kept = {t: await documents(api.saver, t) for t in ("active", "fresh")}
    latest = await latest_per_namespace(api, "idle")
    states = await all_states(api, graph, "idle")
    before = await api.count(CHECKPOINTS, {"thread_id": "idle"})

    assert await api.sweep_expired() == ["idle"]

    after = await all_states(api, graph, "idle")
    assert (
        len(after) < len(states)
        and len(after) == await api.count(CHECKPOINTS, {"thread_id": "idle"}) < before
    )
    # Every checkpoint left reads back as it did, the latest of each namespace among them.
    assert {key: states[key] for key in after} == after
    assert await latest_per_namespace(api, "idle") == latest
    for thread_id, docs in kept.items():
        assert await documents(api.saver, thread_id) == docs, thread_id
    await assert_no_orphans(api)
    assert await api.sweep_expired() == []  # nothing left to prune

    # The conversation goes on where it stopped: as on a thread that was never pruned.
    for thread_id in ("idle", "reference"):
        await play(api, graph, SHAPE, [Step("invoke", 3)], thread_id)
    idle, reference = [await api.state(graph, thread(t)) for t in ("idle", "reference")]
    assert idle.values == reference.values and idle.next == reference.next


async def test_the_automatic_sweep_keeps_the_latest(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=0.0, ttl_strategy="keep_latest")
    graph = api.compile(builder(SHAPE, delta=True))
    await play(api, graph, SHAPE, RUN, "idle")
    assert await api.join_sweep(timeout=60)
    await api.age("idle", 2 * TTL)
    state = await api.state(graph, thread("idle"))
    latest = await latest_per_namespace(api, "idle")

    await play(api, graph, SHAPE, RUN[:1], "other")  # a put starts the sweep
    assert await api.join_sweep(timeout=60)

    assert await latest_per_namespace(api, "idle") == latest
    assert len(await api.list(thread("idle"))) < len(RUN) * 4
    assert (await api.state(graph, thread("idle"))).values == state.values


@pytest.mark.parametrize("strategy", ["keep", "delete_all", None])
def test_an_unknown_strategy_is_refused(client: Any, strategy: Any) -> None:
    with pytest.raises(ValueError, match="ttl_strategy must be one of"):
        MongoDBSaver(client, "unused", ttl=TTL, ttl_strategy=strategy)


async def test_a_thread_active_since_the_selection_is_spared_whole(api: Api) -> None:
    """Threads chosen idle earlier (``prune --idle-days`` after its prompt) are judged again:
    one with a checkpoint stored since the cutoff keeps every document."""
    config = generate_config("t")
    for step in range(1, 4):
        values = {"a": f"a{step}"}
        versions = {"a": f"{step:08}"}
        checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
        config = await api.put(config, checkpoint, generate_metadata(), versions)
        if step == 2:
            await asyncio.sleep(0.01)  # dates are stored to the millisecond
            cutoff = await api.run(server_now())
            await asyncio.sleep(0.01)
    before = await documents(api.saver, "t")

    deleted = await api.run(api.saver.ops.delete_idle(["t"], cutoff, "keep_latest"))

    assert deleted.threads == [] and await documents(api.saver, "t") == before
    await api.age("t", 2 * TTL)
    deleted = await api.run(api.saver.ops.delete_idle(["t"], cutoff, "keep_latest"))
    assert deleted.threads == ["t"] and len(await api.list(generate_config("t"))) == 1
