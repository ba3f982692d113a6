"""The persistence docs' example graph: its checkpoints, history, metadata and parents."""

from __future__ import annotations

from collections import Counter

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from tests.graphs import (
    SEED_FINAL,
    SEED_INPUT,
    AsyncRunner,
    Runner,
    SyncRunner,
    seed_builder,
    thread,
)


async def check_seed_history(run: Runner) -> None:
    calls: Counter = Counter()
    graph = run.compile(seed_builder(calls))
    config = thread("t1")

    assert await run.invoke(graph, SEED_INPUT, config) == SEED_FINAL
    assert calls == {"node_a": 1, "node_b": 1}

    stored = await run.checkpoints(config)
    assert len(stored) == 4
    ids = [c.config["configurable"]["checkpoint_id"] for c in stored]
    assert ids == sorted(ids, reverse=True)

    history = await run.history(graph, config)
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

    latest = await run.state(graph, config)
    assert latest.config == history[0].config
    assert latest.values == SEED_FINAL

    # The same history read back by a new saver comes from the database alone.
    reopened = run.reopened()
    assert await reopened.history(reopened.compile(seed_builder(calls)), config) == history
    assert calls == {"node_a": 1, "node_b": 1}


async def check_history_by_checkpoint(run: Runner) -> None:
    """``get_state`` at each historical ``checkpoint_id`` returns that exact snapshot."""
    graph = run.compile(seed_builder(Counter()))
    await run.invoke(graph, SEED_INPUT, thread("t1"))
    await run.invoke(graph, {"foo": "again", "bar": ["x"]}, thread("t1"))

    history = await run.history(graph, thread("t1"))
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
        at = await run.state(graph, snapshot.config)
        assert (at.config, at.values, at.next, at.metadata) == (
            snapshot.config,
            snapshot.values,
            snapshot.next,
            snapshot.metadata,
        )


async def test_seed_history_sync(saver: MongoDBSaver) -> None:
    await check_seed_history(SyncRunner(saver))


async def test_seed_history_async(asaver: AsyncMongoDBSaver) -> None:
    await check_seed_history(AsyncRunner(asaver))


async def test_history_by_checkpoint_sync(saver: MongoDBSaver) -> None:
    await check_history_by_checkpoint(SyncRunner(saver))


async def test_history_by_checkpoint_async(asaver: AsyncMongoDBSaver) -> None:
    await check_history_by_checkpoint(AsyncRunner(asaver))
