"""Durability modes ``sync``, ``async`` and ``exit``: what is stored, and when."""

from __future__ import annotations

from collections import Counter

import pytest
from langchain_core.runnables import RunnableConfig

from tests.graphs import (
    SEED_FINAL,
    SEED_INPUT,
    seed_builder,
    thread,
)
from tests.saver_support import Api

DURABILITY = pytest.mark.parametrize("durability", ["sync", "async", "exit"])
# "exit" writes only the checkpoint the run ends on; the others write one per step.
CHECKPOINTS_WRITTEN = {"sync": 4, "async": 4, "exit": 1}


@DURABILITY
async def test_durability(api: Api, durability: str) -> None:
    seen_by_node_b: list[int | None] = []

    def observe(node: str, config: RunnableConfig) -> None:
        """Record the step of the newest stored checkpoint while node_b runs."""
        if node == "node_b":
            latest = api.saver.get_tuple(thread(config["configurable"]["thread_id"]))
            seen_by_node_b.append(None if latest is None else latest.metadata["step"])

    calls: Counter = Counter()
    graph = api.compile(seed_builder(calls, observe))
    config = thread("t1")
    assert await api.invoke(graph, SEED_INPUT, config, durability=durability) == SEED_FINAL
    assert calls == {"node_a": 1, "node_b": 1}

    if durability == "sync":
        # Each checkpoint is stored before the next step starts.
        assert seen_by_node_b == [1]
    elif durability == "exit":
        # Nothing is stored until the run ends.
        assert seen_by_node_b == [None]

    reopened = api.reopened()
    state = await reopened.state(reopened.compile(seed_builder(calls)), config)
    assert (state.values, state.next) == (SEED_FINAL, ())
    assert (state.metadata["source"], state.metadata["step"]) == ("loop", 2)
    stored = await reopened.list(config)
    assert len(stored) == CHECKPOINTS_WRITTEN[durability]
    assert stored[0].config == state.config
