"""Pending writes: returned in ``(task_path, task_id, idx)`` order; special channels
overwrite, regular writes are never overwritten, so a retried ``put_writes`` is idempotent."""

from __future__ import annotations

from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.conformance.test_utils import generate_config

from mongo_ckpt.layout import WRITES
from tests.saver_support import Api, put_chain


async def test_order(api: Api) -> None:
    [config] = await put_chain(api, "t", 1)
    # Stored in an order that is neither insertion order nor task-id order.
    await api.put_writes(config, [("x", "z0"), ("y", "z1")], "task-a", "~__pregel_push, 2")
    await api.put_writes(
        config, [("x", "b0"), ("y", "b1"), ("x", "b2")], "task-c", "~__pregel_pull, n"
    )
    await api.put_writes(config, [("x", "a0")], "task-d", "~__pregel_pull, m")
    await api.put_writes(config, [("x", "c0")], "task-b", "~__pregel_pull, n")
    expected = [
        ("task-d", "x", "a0"),
        ("task-b", "x", "c0"),
        ("task-c", "x", "b0"),
        ("task-c", "y", "b1"),
        ("task-c", "x", "b2"),
        ("task-a", "x", "z0"),
        ("task-a", "y", "z1"),
    ]
    assert (await api.get_tuple(config)).pending_writes == expected
    [listed] = await api.list(generate_config("t"))
    assert listed.pending_writes == expected


async def test_regular_writes_never_overwritten(api: Api) -> None:
    first, second = await put_chain(api, "t", 2)
    await api.put_writes(first, [("a", 1), ("b", 2)], "task")
    count = await api.count(WRITES)
    # A retry (e.g. after a network error) with other values, and a shorter one.
    await api.put_writes(first, [("a", 10), ("b", 20)], "task")
    await api.put_writes(first, [("a", 100)], "task")
    assert await api.count(WRITES) == count
    assert (await api.get_tuple(first)).pending_writes == [("task", "a", 1), ("task", "b", 2)]
    # Writes belong to their checkpoint only.
    assert (await api.get_tuple(second)).pending_writes == []


async def test_special_channels_overwrite(api: Api) -> None:
    [config] = await put_chain(api, "t", 1)
    specials = sorted(WRITES_IDX_MAP)
    assert {"__error__", "__interrupt__"} <= set(specials)
    for channel in specials:
        await api.put_writes(config, [(channel, f"{channel}-first")], "task")
    await api.put_writes(config, [("regular", "kept")], "task")
    count = await api.count(WRITES)
    for channel in specials:
        await api.put_writes(config, [(channel, f"{channel}-second")], "task")
    assert await api.count(WRITES) == count
    writes = (await api.get_tuple(config)).pending_writes
    assert sorted(writes) == sorted(
        [("task", channel, f"{channel}-second") for channel in specials]
        + [("task", "regular", "kept")]
    )
    # Another task's special write is a separate row.
    await api.put_writes(config, [("__error__", "other")], "task-2")
    writes = (await api.get_tuple(config)).pending_writes
    assert ("task", "__error__", "__error__-second") in writes
    assert ("task-2", "__error__", "other") in writes
