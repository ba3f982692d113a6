"""The persistence docs' example graph: its checkpoints, history, metadata and parents."""

from __future__ import annotations

from collections import Counter

from tests.graphs import (
    SEED_FINAL,
    SEED_INPUT,
    seed_builder,
    thread,
)
from tests.saver_support import Api


async def test_seed_history(api: Api) -> None:
    calls: Counter = Counter()
    graph = api.compile(seed_builder(calls))
    config = thread("t1")

    assert await api.invoke(graph, SEED_INPUT, config) == SEED_FINAL
    assert calls == {"node_a": 1, "node_b": 1}

    stored = await api.list(config)
    assert len(stored) == 4
    ids = [c.config["configurable"]["checkpoint_id"] for c in stored]
    assert ids == sorted(ids, reverse=True)

    history = await api.history(graph, config)
    assert [s.next for s in history] == [(), ("node_b",), ("node_a",), ("__start__",)]
    assert [(s.metadata["source"], s.metadata["step"]) for s in history] == [
        ("loop", 2),
        ("loop", 1),
        ("loop", 0),
        ("input", -1),
    ]
    assert [s.values for s in history] == [
        {"foo": "b", "bar": ["a", "b"]},
        {"foo": "a", "bar": ["a"]},
        {"foo": "", "bar": []},
        {"bar": []},
    ]
    assert [s.config["configurable"]["checkpoint_id"] for s in history] == ids
    for newer, older in zip(history, history[1:]):
        assert newer.parent_config == older.config
    assert history[-1].parent_config is None
    assert all(s.config["configurable"]["checkpoint_ns"] == "" for s in history)

    latest = await api.state(graph, config)
    assert latest.config == history[0].config
    assert latest.values == SEED_FINAL

    # The same history read back by a new saver comes from the database alone.
    reopened = api.reopened()
    assert await reopened.history(reopened.compile(seed_builder(calls)), config) == history
    assert calls == {"node_a": 1, "node_b": 1}


async def test_history_by_checkpoint(api: Api) -> None:
    """``get_state`` at each historical ``checkpoint_id`` returns that exact snapshot."""
    graph = api.compile(seed_builder(Counter()))
    await api.invoke(graph, SEED_INPUT, thread("t1"))
    await api.invoke(graph, {"foo": "again", "bar": ["x"]}, thread("t1"))

    history = await api.history(graph, thread("t1"))
    assert len(history) == 8
    assert history[0].values == {"foo": "b", "bar": ["a", "b", "x", "a", "b"]}
    assert [(s.metadata["source"], s.metadata["step"]) for s in history] == [
        ("loop", 6),
        ("loop", 5),
        ("loop", 4),
        ("input", 3),
        ("loop", 2),
        ("loop", 1),
        ("loop", 0),
        ("input", -1),
    ]
    for snapshot in history:
        at = await api.state(graph, snapshot.config)
        assert (at.config, at.values, at.next, at.metadata) == (
            snapshot.config,
            snapshot.values,
            snapshot.next,
            snapshot.metadata,
        )
