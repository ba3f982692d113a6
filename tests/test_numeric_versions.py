"""Channel versions may be ``int`` or ``float`` (``BaseCheckpointSaver.get_next_version``
makes ints; langgraph-checkpoint-mongodb writes them), not only strings: values, pending
writes and DeltaChannel history read back the same on every backend."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from mongo_ckpt.layout import CHECKPOINTS
from tests import test_delta_equivalence as equivalence
from tests.delta_graphs import CHANNEL, Shape, Step, builder, message_summary, play
from tests.graphs import thread
from tests.saver_support import Api


class IntVersions:
    """LangGraph's default versions: 1, 2, 3..."""

    def get_next_version(self, current: Any, channel: None) -> int:
        return int(current or 0) + 1


class FloatVersions:
    """Versions 1.0, 2.0... (``str(1.0)`` is ``"1.0"``, MongoDB's ``$toString`` gives ``"1"``)."""

    def get_next_version(self, current: Any, channel: None) -> float:
        return float(current or 0) + 1.0


KINDS = {"int": (IntVersions, int), "float": (FloatVersions, float)}


def numeric(api: Api, kind: str) -> Api:
    """A saver of ``api``'s kind, on its client and database, making ``kind`` versions."""
    mixin, _ = KINDS[kind]
    name = f"{type(api.saver).__name__}With{kind.title()}Versions"
    cls = type(name, (mixin, type(api.saver)), {})
    return Api(cls(api.saver.client, api.saver.db.name))


async def stored_version_types(api: Api, thread_id: str) -> set[type]:
    docs = await api.docs(CHECKPOINTS, {"thread_id": thread_id})
    return {type(v["version"]) for d in docs for v in d.get("values", ())}


# Snapshots midway, parallel writers and an update: seeded and unseeded walks. No fork:
# counted versions repeat on two branches, and a value is stored once per version.
SHAPE = Shape(snapshot_frequency=4, writers=2, subgraph=False, durability="sync")
STEPS = [
    Step("invoke", 0),
    Step("invoke", 1),
    Step("update", 2, as_node="head"),
    Step("invoke", 3),
]


@pytest.mark.parametrize("kind", KINDS)
async def test_delta_history_with_numeric_versions(api: Api, kind: str) -> None:
    numbered = numeric(api, kind)
    graph = numbered.compile(builder(SHAPE, delta=True))
    await play(numbered, graph, SHAPE, STEPS, "n")
    assert await stored_version_types(numbered, "n") == {KINDS[kind][1]}
    tuples = await numbered.list(thread("n"))
    seen: Counter = Counter()
    # The saver's one-aggregation history equals the base class's walk at every checkpoint.
    await equivalence.check_histories(numbered.saver, tuples, seen)
    assert seen["seeded"] and seen["unseeded"] and seen["with writes"]
    # And the states equal those of the same steps on InMemorySaver with the same versions.
    memory = Api(type("InMemoryWithVersions", (KINDS[kind][0], InMemorySaver), {})())
    twin = memory.compile(builder(SHAPE, delta=True))
    await play(memory, twin, SHAPE, STEPS, "n")
    states = [await equivalence.rebuilt(numbered, graph, t.config) for t in tuples]
    expected = [
        await equivalence.rebuilt(memory, twin, t.config) for t in await memory.list(thread("n"))
    ]
    assert states == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_exit_durability_prune_with_numeric_versions(api: Api, kind: str) -> None:
    numbered = numeric(api, kind)
    shape = Shape(snapshot_frequency=5, writers=2, subgraph=False, durability="exit")
    graph = numbered.compile(builder(shape, delta=True))
    reference = builder(shape, delta=True).compile(checkpointer=InMemorySaver())
    for n in range(4):
        message = {CHANNEL: [HumanMessage(f"q{n}", id=f"q{n}")]}
        await numbered.invoke(graph, message, thread("n"), durability="exit")
        reference.invoke(message, thread("n"), durability="exit")
    await numbered.prune(["n"], strategy="keep_latest")
    state = await numbered.state(graph, thread("n"))
    expected = reference.get_state(thread("n"))
    assert message_summary(state.values[CHANNEL]) == message_summary(expected.values[CHANNEL])


@pytest.mark.parametrize("kind", KINDS)
async def test_values_and_writes_with_numeric_versions(api: Api, kind: str) -> None:
    numbered = numeric(api, kind)
    memory = InMemorySaver()
    number = KINDS[kind][1]
    config: Any = thread("p", checkpoint_ns="")
    for step in range(3):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"a": f"a{step}", "b": [step] * step}
        checkpoint["channel_versions"] = {"a": number(step + 1), "b": number(1 + step // 2)}
        new = {"a": number(step + 1)} if step % 2 else dict(checkpoint["channel_versions"])
        metadata: Any = {"step": step}
        config = await numbered.put(config, checkpoint, metadata, new)
        memory.put(config if step else thread("p", checkpoint_ns=""), checkpoint, metadata, new)
        await numbered.put_writes(config, [("a", f"w{step}"), ("b", [step])], "task", "")
        memory.put_writes(config, [("a", f"w{step}"), ("b", [step])], "task", "")
    got, want = await numbered.get_tuple(thread("p")), memory.get_tuple(thread("p"))
    assert got is not None and want is not None
    assert got.checkpoint["channel_values"] == want.checkpoint["channel_values"]
    assert got.checkpoint["channel_versions"] == want.checkpoint["channel_versions"]
    assert got.pending_writes == want.pending_writes
    listed = [
        (t.checkpoint["channel_values"], t.pending_writes) for t in await numbered.list(config)
    ]
    expected = [(t.checkpoint["channel_values"], t.pending_writes) for t in memory.list(config)]
    assert listed == expected
    assert await stored_version_types(numbered, "p") == {number}
