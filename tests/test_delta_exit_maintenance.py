"""Under ``durability="exit"`` a run stores only its last checkpoint, so LangGraph's
snapshot counters overstate how many checkpoints lie above a DeltaChannel's seed. After
``prune`` or ``delete_for_runs`` the seed's own (unneeded) parent is gone: the history
walk ends at the seed, and that history is complete, not missing."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from tests.delta_graphs import CHANNEL, Shape, builder, message_summary, run_id
from tests.graphs import thread
from tests.saver_support import Api

SHAPE = Shape(snapshot_frequency=5, writers=2, subgraph=False, durability="exit")
TURNS = 5


async def _turns(api: Api, graph: CompiledStateGraph, thread_id: str) -> None:
    for n in range(TURNS):
        config = {**thread(thread_id), "metadata": {"run_id": run_id(thread_id, n)}}
        message = HumanMessage(f"q{n}", id=f"q{n}")
        await api.invoke(graph, {CHANNEL: [message]}, config, durability="exit")


def _reference() -> tuple[Any, list[Any]]:
    """The latest state and the history of the same turns on ``InMemorySaver``."""
    graph = builder(SHAPE, delta=True).compile(checkpointer=InMemorySaver())
    for n in range(TURNS):
        message = HumanMessage(f"q{n}", id=f"q{n}")
        graph.invoke({CHANNEL: [message]}, thread("t"), durability="exit")
    history = list(graph.get_state_history(thread("t")))
    return _summary(graph.get_state(thread("t"))), [_summary(s) for s in history]


def _summary(snapshot: Any) -> tuple[Any, ...]:
    return message_summary(snapshot.values.get(CHANNEL, [])), snapshot.next


@pytest.mark.parametrize("maintenance", ["prune", "delete_for_runs"])
async def test_exit_durability_history_after_maintenance(api: Api, maintenance: str) -> None:
    graph = api.compile(builder(SHAPE, delta=True))
    await _turns(api, graph, "t")
    latest, history = _reference()
    assert _summary(await api.state(graph, thread("t"))) == latest
    if maintenance == "prune":
        await api.prune(["t"], strategy="keep_latest")
    else:
        await api.delete_for_runs([run_id("t", n) for n in range(TURNS - 2)])
    assert _summary(await api.state(graph, thread("t"))) == latest
    left = [_summary(s) for s in await api.history(graph, thread("t"))]
    assert left and left == history[: len(left)]
    # The thread goes on from the state that was kept.
    await api.invoke(graph, {CHANNEL: [HumanMessage("more", id="more")]}, thread("t"))
    assert (await api.state(graph, thread("t"))).values[CHANNEL][-1].id is not None
