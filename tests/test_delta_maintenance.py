"""prune, delete_for_runs and copy_thread on DeltaChannel threads.

A DeltaChannel checkpoint stores no value for the channel: its state is rebuilt from the
writes of its ancestors back to the nearest snapshot. Whatever these operations delete
or copy, every checkpoint that remains must rebuild exactly the state it had before,
the thread's other checkpoints must really be deleted when no survivor needs them, and
other threads must not change at all.

What is needed is what LangGraph reads to rebuild a survivor: its ancestors back to the
nearest one that stores the DeltaChannel, when the survivor itself does not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from mongo_ckpt.base import MongoSaverBase
from tests.delta_graphs import (
    CHANNEL,
    Shape,
    Step,
    all_states,
    builder,
    checkpoint_id,
    documents,
    namespace,
    play,
    rebuilt,
    run_id,
)
from tests.graphs import thread
from tests.saver_support import Api

Key = tuple[str, str]

# Parallel writers, a subgraph, a fork by update_state and one by new input. Run 1 has
# checkpoints run 2 is rebuilt from (from its snapshot on) and checkpoints nothing needs.
# The last run snapshots midway and ends on a checkpoint that is not a snapshot.
SHAPE = Shape(snapshot_frequency=6, writers=2, subgraph=True, durability="async")
STEPS = [
    Step("invoke", 0),
    Step("invoke", 1),
    Step("invoke", 2),
    Step("update", 3, at=0.5, as_node="head"),
    Step("fork", 4, at=0.3),
]
# The same runs without the subgraph; snapshot_frequency 4 keeps the properties above.
FLAT_SHAPE = Shape(snapshot_frequency=4, writers=2, subgraph=False, durability="async")
# Each run ends on a snapshot (three updates per run, snapshot_frequency 3); one fork.
SNAPSHOT_SHAPE = Shape(snapshot_frequency=3, writers=2, subgraph=False, durability="async")
SNAPSHOT_STEPS = [Step("invoke", 0), Step("fork", 1, at=0.5), Step("invoke", 2)]
OTHER = [Step("invoke", 0), Step("invoke", 1)]


def key(t: CheckpointTuple) -> Key:
    return namespace(t.config), checkpoint_id(t.config)


async def tuples(api: Api, thread_id: str) -> dict[Key, CheckpointTuple]:
    return {key(t): t for t in await api.list(thread(thread_id))}


def replays(t: CheckpointTuple) -> bool:
    """Whether ``t``'s DeltaChannel is rebuilt from history (it has no stored value)."""
    checkpoint = t.checkpoint
    return CHANNEL in checkpoint["channel_versions"] and CHANNEL not in checkpoint["channel_values"]


def needed(by_key: dict[Key, CheckpointTuple], survivors: Iterable[CheckpointTuple]) -> set[Key]:
    """Ancestors the survivors' DeltaChannel states are rebuilt from: back to the nearest
    one that stores the channel (the ancestors kept for a survivor share its seed)."""
    out: set[Key] = set()
    for survivor in survivors:
        parent = survivor.parent_config if replays(survivor) else None
        while parent is not None:
            ancestor = by_key[namespace(parent), checkpoint_id(parent)]
            out.add(key(ancestor))
            parent = ancestor.parent_config if replays(ancestor) else None
    return out


def latest_per_namespace(by_key: dict[Key, CheckpointTuple]) -> list[CheckpointTuple]:
    latest: dict[str, CheckpointTuple] = {}
    for (ns, _), t in sorted(by_key.items()):
        latest[ns] = t
    return list(latest.values())


async def build(api: Api, shape: Shape, steps: list[Step]) -> Any:
    """Thread "t" from ``steps`` and an unrelated thread "other"; returns the graph."""
    graph = api.compile(builder(shape, delta=True))
    await play(api, graph, shape, steps, "t")
    await play(api, graph, shape, OTHER, "other")
    return graph


async def assert_rebuilds(
    api: Api, graph: Any, thread_id: str, before: dict[Key, tuple]
) -> dict[Key, CheckpointTuple]:
    """Every remaining checkpoint of ``thread_id`` rebuilds its state in ``before``."""
    after = await tuples(api, thread_id)
    assert set(after) <= set(before)
    for k, t in after.items():
        assert await rebuilt(api, graph, t.config) == before[k], k
    return after


async def assert_no_orphans(
    saver: MongoSaverBase, thread_id: str, after: dict[Key, CheckpointTuple]
) -> None:
    """No write or value of the thread is left that no remaining checkpoint refers to."""
    docs = await documents(saver, thread_id)
    assert {(d["checkpoint_ns"], d["checkpoint_id"]) for d in docs["writes"]} <= set(after)
    referenced = {
        (ns, channel, t.checkpoint["channel_versions"][channel])
        for (ns, _), t in after.items()
        for channel in t.checkpoint["channel_values"]
    }
    assert {(d["checkpoint_ns"], d["channel"], d["version"]) for d in docs["blobs"]} <= referenced


async def prune_and_check(
    api: Api, graph: Any, thread_id: str, states: dict[Key, tuple], latest_is_snapshot: bool
) -> dict[Key, CheckpointTuple]:
    """``prune(keep_latest)`` one thread; check what remains. Returns the survivors."""
    before = await tuples(api, thread_id)
    latest = latest_per_namespace(before)
    root = next(t for t in latest if namespace(t.config) == "")
    assert (CHANNEL in root.checkpoint["channel_values"]) == latest_is_snapshot
    allowed = {key(t) for t in latest} | needed(before, latest)
    # Other branches and finished subgraph namespaces are never needed.
    assert allowed < set(before)

    await api.prune([thread_id], strategy="keep_latest")

    after = await assert_rebuilds(api, graph, thread_id, states)
    assert {key(t) for t in latest} <= set(after) <= allowed
    await assert_no_orphans(api.saver, thread_id, after)
    return after


async def test_copy_prune_delete_for_runs(api: Api) -> None:
    """copy_thread, prune of the copy, delete_for_runs of an early run, prune of "t"."""
    # The async saver runs the same operations without the subgraph, for time.
    shape = FLAT_SHAPE if api.is_async else SHAPE
    graph = await build(api, shape, STEPS)
    before = await tuples(api, "t")
    states = await all_states(api, graph, "t")
    source = await documents(api.saver, "t")
    other = await documents(api.saver, "other")

    await api.copy_thread("t", "copy")
    assert await all_states(api, graph, "copy") == states
    assert await documents(api.saver, "t") == source

    # The copy shares checkpoint ids with its source: pruning it must leave the source whole.
    pruned_copy = await prune_and_check(api, graph, "copy", states, latest_is_snapshot=False)
    assert await documents(api.saver, "t") == source

    runs = list(dict.fromkeys(t.metadata["run_id"] for _, t in sorted(before.items())))
    assert runs == [run_id("t", s.number) for s in STEPS]
    early = runs[1]
    in_run = {k for k, t in before.items() if t.metadata["run_id"] == early}
    survivors = [t for k, t in before.items() if k not in in_run]
    removable = in_run - needed(before, survivors)
    assert removable and removable != in_run, "the run should have needed and unneeded checkpoints"

    # Runs are global: the copy holds checkpoints of the same runs and loses them too.
    await api.delete_for_runs([early])

    after = await assert_rebuilds(api, graph, "t", states)
    assert removable <= set(before) - set(after) <= in_run
    await assert_no_orphans(api.saver, "t", after)
    after_copy = await assert_rebuilds(api, graph, "copy", states)
    assert set(pruned_copy) - set(after_copy) <= in_run
    await assert_no_orphans(api.saver, "copy", after_copy)

    await prune_and_check(api, graph, "t", states, latest_is_snapshot=False)
    assert await documents(api.saver, "other") == other


async def test_prune_when_latest_is_snapshot(api: Api) -> None:
    """The latest checkpoint needs no ancestor, but the ones prune keeps must rebuild."""
    graph = await build(api, SNAPSHOT_SHAPE, SNAPSHOT_STEPS)
    states = await all_states(api, graph, "t")
    other = await documents(api.saver, "other")
    await prune_and_check(api, graph, "t", states, latest_is_snapshot=True)
    assert await documents(api.saver, "other") == other
