"""A DeltaChannel state whose history has lost an ancestor raises ``MissingHistoryError``
naming it, instead of a state rebuilt from the writes that are left."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from mongo_ckpt import MissingHistoryError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.reading import MissingValueError
from tests.backends import maybe_await
from tests.delta_graphs import CHANNEL, Shape, builder
from tests.graphs import thread
from tests.saver_support import Api

SHAPE = Shape(snapshot_frequency=100, writers=1, subgraph=False, durability="sync")


@pytest.mark.parametrize("lost", ["middle", "parent"])
async def test_a_lost_ancestor_is_named(api: Api, lost: str) -> None:
    graph = api.compile(builder(SHAPE, delta=True))
    config = thread("h")
    for n in range(3):
        await api.invoke(graph, {CHANNEL: [HumanMessage(f"q{n}", id=f"q{n}")]}, config)
    history = await api.history(graph, config)  # newest first, never snapshotted
    whole = (await api.state(graph, config)).values[CHANNEL]
    assert len(whole) == 9  # per run: the question, head, w0
    victim = history[1] if lost == "parent" else history[len(history) // 2]
    victim_id = victim.config["configurable"]["checkpoint_id"]
    raw = api.raw(CHECKPOINTS)
    await maybe_await(raw.delete_one({"thread_id": "h", "checkpoint_id": victim_id}))
    with pytest.raises(MissingHistoryError) as error:
        await api.state(graph, config)
    assert victim_id in str(error.value) and CHANNEL in str(error.value)
    assert error.value.ancestor == victim_id


async def test_a_lost_seed_value_is_named(api: Api) -> None:
    shape = Shape(snapshot_frequency=4, writers=1, subgraph=False, durability="sync")
    graph = api.compile(builder(shape, delta=True))
    config = thread("s")
    for n in range(3):
        await api.invoke(graph, {CHANNEL: [HumanMessage(f"q{n}", id=f"q{n}")]}, config)
    docs = await api.docs(CHECKPOINTS, {"thread_id": "s"})
    latest = max(docs, key=lambda d: d["checkpoint_id"])
    assert CHANNEL not in {v["channel"] for v in latest["values"]}  # rebuilt from history
    # The nearest ancestor storing the channel is the seed of the latest state.
    [seed] = [
        v
        for d in sorted(docs, key=lambda d: d["checkpoint_id"], reverse=True)
        for v in d["values"]
        if v["channel"] == CHANNEL and not v.get("base")
    ][:1]
    raw = api.raw(BLOBS)
    query = {"thread_id": "s", "channel": CHANNEL, "version": seed["version"]}
    await maybe_await(raw.delete_many(query))
    with pytest.raises(MissingValueError) as error:
        await api.state(graph, config)
    assert (error.value.channel, error.value.version) == (CHANNEL, seed["version"])
