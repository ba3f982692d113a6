"""Time travel: replay from an earlier checkpoint and fork with ``update_state``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from tests.graphs import (
    SEED_FINAL,
    SEED_INPUT,
    seed_builder,
    thread,
)
from tests.saver_support import Api


def checkpoint_id(snapshot: StateSnapshot) -> str:
    return snapshot.config["configurable"]["checkpoint_id"]


def lineage(history: list[StateSnapshot], newest: StateSnapshot) -> list[str]:
    """Checkpoint ids from ``newest`` back to the first, following ``parent_config``."""
    by_id = {checkpoint_id(s): s for s in history}
    ids, current = [], newest
    while True:
        ids.append(checkpoint_id(current))
        if current.parent_config is None:
            return ids
        current = by_id[current.parent_config["configurable"]["checkpoint_id"]]


def summary(history: list[StateSnapshot]) -> dict[str, tuple]:
    return {checkpoint_id(s): (s.values, s.next, s.metadata) for s in history}


async def seeded(api: Api) -> tuple[Counter, Any, RunnableConfig, list, Any]:
    """The seed graph run once on thread "t1": its call counter, builder, config,
    history and the snapshot just before node_b."""
    calls: Counter = Counter()
    builder = seed_builder(calls)
    graph = api.compile(builder)
    config = thread("t1")
    await api.invoke(graph, SEED_INPUT, config)
    original = await api.history(graph, config)
    return calls, builder, config, original, next(s for s in original if s.next == ("node_b",))


async def test_replay(api: Api) -> None:
    calls, builder, config, original, before_b = await seeded(api)

    api = api.reopened()
    graph = api.compile(builder)
    assert await api.invoke(graph, None, before_b.config) == SEED_FINAL
    # node_a ran before the replayed checkpoint: it is not executed again.
    assert calls == {"node_a": 1, "node_b": 2}

    # The replay starts a new branch: a "fork" copy of the replayed checkpoint, then node_b.
    history = await api.history(graph, config)
    assert len(history) == len(original) + 2
    latest, fork = history[:2]
    assert (latest.values, latest.next, latest.metadata["step"]) == (SEED_FINAL, (), 3)
    assert (fork.values, fork.next) == (before_b.values, ("node_b",))
    assert (fork.metadata["source"], fork.metadata["step"]) == ("fork", 2)
    assert latest.parent_config == fork.config
    assert fork.parent_config == before_b.config
    assert lineage(history, latest)[2:] == lineage(original, before_b)
    # The replaced branch is still there, unchanged.
    assert summary(original).items() <= summary(history).items()


async def test_fork(api: Api) -> None:
    calls, builder, config, original, before_b = await seeded(api)

    # Rewrite what node_a produced, then let the graph continue on the new branch.
    api = api.reopened()
    graph = api.compile(builder)
    fork_config = await api.update(graph, before_b.config, {"foo": "x", "bar": ["x"]}, "node_a")
    assert fork_config["configurable"]["checkpoint_id"] != checkpoint_id(before_b)
    forked = await api.state(graph, fork_config)
    assert forked.values == {"foo": "x", "bar": ["a", "x"]}
    assert forked.next == ("node_b",)
    assert forked.metadata["source"] == "update"
    assert forked.parent_config == before_b.config
    assert calls == {"node_a": 1, "node_b": 1}

    assert await api.invoke(graph, None, fork_config) == {"foo": "b", "bar": ["a", "x", "b"]}
    assert calls == {"node_a": 1, "node_b": 2}

    history = await api.history(graph, config)
    assert len(history) == len(original) + 2
    assert history[0].values == {"foo": "b", "bar": ["a", "x", "b"]}
    assert lineage(history, history[0])[1:] == [checkpoint_id(forked), *lineage(original, before_b)]
    # The original branch is intact and still readable at its own checkpoint.
    assert summary(original).items() <= summary(history).items()
    assert (await api.state(graph, original[0].config)).values == SEED_FINAL
    assert (await api.state(graph, config)).values == {"foo": "b", "bar": ["a", "x", "b"]}
