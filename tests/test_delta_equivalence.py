"""DeltaChannel history: the one-aggregation override equals the base class's default walk.

Threads are generated from seeds (``tests/delta_graphs.generate``): parallel writers to
one channel, forks by ``update_state`` (with and without ``as_node``) and by new input at an
old checkpoint, subgraphs under their own namespace, ``snapshot_frequency`` 1 to 10 and the
three durability modes. On every checkpoint of every namespace the saver's
``get_delta_channel_history`` must return exactly what ``BaseCheckpointSaver``'s walk over
``get_tuple`` returns, and every checkpoint must rebuild the same state as a twin graph
whose ``messages`` channel is a plain ``add_messages`` reducer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from langgraph.checkpoint.base import CheckpointTuple

from mongo_ckpt import AsyncMongoDBSaver
from mongo_ckpt.base import MongoSaverBase
from tests.delta_graphs import (
    CHANNEL,
    NO_SUCH_CHANNEL,
    DefaultWalk,
    HistoryWalks,
    Shape,
    Step,
    builder,
    by_namespace,
    checkpoint_id,
    generate,
    is_mock,
    namespace,
    play,
    rebuilt,
)
from tests.graphs import thread
from tests.saver_support import Api

# 26 generated threads on the in-process backend, split between the sync and async APIs;
# on a server, a few seeds chosen so that together they still cover every feature.
SYNC_SEEDS, ASYNC_SEEDS = range(0, 13), range(13, 26)
SERVER_SEEDS = (0, 20, 25)


def _source_step(t: CheckpointTuple) -> tuple[str | None, int | None]:
    return t.metadata.get("source"), t.metadata.get("step")


def _parent_id(t: CheckpointTuple) -> str | None:
    return checkpoint_id(t.parent_config) if t.parent_config else None


async def check_thread(api: Api, seed: int, seen: Counter) -> None:
    """Generate thread ``seed`` on a DeltaChannel graph and on its plain twin; compare."""
    shape, steps = generate(seed)
    delta = await read_thread(api, shape, steps, f"delta-{seed}", seen)
    plain = await read_thread(api, shape, steps, f"plain-{seed}", None)
    assert [len(ns) for ns in delta] == [len(ns) for ns in plain], f"seed {seed}"
    for n, (delta_ns, plain_ns) in enumerate(zip(delta, plain)):
        for i, (d, p) in enumerate(zip(delta_ns, plain_ns)):
            assert d == p, f"seed {seed}, namespace #{n}, checkpoint #{i}"


async def read_thread(
    api: Api, shape: Shape, steps: list[Step], thread_id: str, seen: Counter | None
) -> list[list[tuple]]:
    """Play the scenario on a DeltaChannel graph (``seen`` given: also check the history of
    every checkpoint) or a plain one; return, per namespace in order of creation, each
    checkpoint's (source, step) and rebuilt state. The thread is deleted once read, so the
    in-process backend, which scans whole collections, stays fast."""
    graph = api.compile(builder(shape, delta=seen is not None))
    await play(api, graph, shape, steps, thread_id)
    # Histories the run's get_tuple calls read along that LangGraph did not ask for (a
    # get_tuple before update_state) are dropped: each read counted below is the override's.
    api.saver.memory.forget([thread_id])
    tuples = await api.list(thread(thread_id))
    if seen is not None:
        await check_histories(api.saver, tuples, seen)
        seen[shape.durability] += 1
    states = [
        [(_source_step(t), await rebuilt(api, graph, t.config)) for t in ns]
        for ns in by_namespace(tuples)
    ]
    await api.delete_thread(thread_id)
    return states


async def check_histories(
    saver: MongoSaverBase, tuples: list[CheckpointTuple], seen: Counter
) -> None:
    """The override equals the base class's walk at every checkpoint: for no channel, for
    the DeltaChannel, and for it with every other channel of the checkpoint and one that
    does not exist."""
    walk = DefaultWalk(saver)
    walks = HistoryWalks(saver)
    for t in tuples:
        others = sorted(set(t.checkpoint["channel_versions"]) - {CHANNEL})
        for channels in ([], [CHANNEL], [*others, NO_SUCH_CHANNEL, CHANNEL]):
            walks.clear()
            override, default = await walk.histories(t.config, channels)
            assert override == default, f"{t.config}, channels {channels}"
            assert list(override) == channels
            # One read (LangGraph's counters never understate the distance to a seed): a
            # range read, or a walk when nothing bounds the range; a range read that cannot
            # stand for the walk (a fork's sibling stores the channel, or takes the places
            # the counters allow) is followed by one walk.
            reads = (len(walks.ranges), len(walks.max_depths))
            assert reads in ({(0, 0)} if not channels else {(1, 0), (0, 1), (1, 1)}), (
                f"{t.config}, {reads}"
            )
            seen["range reads"] += reads == (1, 0)
        if (
            CHANNEL in t.checkpoint["channel_versions"]
            and CHANNEL not in t.checkpoint["channel_values"]
        ):
            await check_prefetched(saver, walk, walks, t, seen)
        seen["seeded" if "seed" in override[CHANNEL] else "unseeded"] += 1
        seen["with writes"] += bool(override[CHANNEL]["writes"])
        writers = {task for task, channel, _ in t.pending_writes if channel == CHANNEL}
        seen["parallel writes"] += len(writers) > 1
    walks.restore()
    seen["namespaces"] += len({namespace(t.config) for t in tuples}) > 1
    parents = Counter((namespace(t.config), _parent_id(t)) for t in tuples)
    seen["forks"] += any(n > 1 for (_, parent), n in parents.items() if parent)


async def check_prefetched(
    saver: MongoSaverBase,
    walk: DefaultWalk,
    walks: HistoryWalks,
    t: CheckpointTuple,
    seen: Counter,
) -> None:
    """What LangGraph does to load a checkpoint that replays the channel: ``get_tuple``,
    then the history. The history the ``get_tuple`` read along, when it could
    (``delta.range_history_pipeline(whole=True)``), equals the base class's walk, and
    costs no read."""
    if isinstance(saver, AsyncMongoDBSaver):
        loaded = await saver.aget_tuple(t.config)
    else:
        loaded = saver.get_tuple(t.config)
    assert loaded is not None and loaded.checkpoint == t.checkpoint
    walks.clear()
    history, default = await walk.histories(t.config, [CHANNEL])
    assert history == default, f"{t.config}, after get_tuple"
    reads = (len(walks.ranges), len(walks.max_depths))
    assert reads in {(0, 0), (1, 0), (0, 1), (1, 1)}, f"{t.config}, {reads}"
    seen["histories read with the tuple"] += reads == (0, 0)


async def test_generated_threads(api: Api) -> None:
    if is_mock(api.saver):
        seeds: Sequence[int] = ASYNC_SEEDS if api.is_async else SYNC_SEEDS
    else:
        seeds = SERVER_SEEDS
    seen: Counter = Counter()
    for seed in seeds:
        await check_thread(api, seed, seen)
    # The generated threads really exercised what the equivalence is about.
    for feature in (
        "seeded",
        "unseeded",
        "with writes",
        "parallel writes",
        "namespaces",
        "forks",
        "range reads",
        "histories read with the tuple",
        "exit",
        "async",
        "sync",
    ):
        assert seen[feature] > 0, f"no generated thread had {feature}: {seen}"
