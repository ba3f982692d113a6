"""A DeltaChannel state whose history has lost an ancestor raises ``MissingHistoryError``
naming it, instead of a state rebuilt from the writes that are left."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from mongo_ckpt import MissingHistoryError
from mongo_ckpt.layout import CHECKPOINTS
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
