"""Round trips of a state load on a long DeltaChannel conversation, at several depths.

The conversation (``tests/perf/conversation``: ~1 KB per message, one human message and one
reply per turn) is run on LangGraph's in-memory saver, recording what it is asked to store,
and the same ``put``/``put_writes`` calls are replayed on the saver under test: its stored
thread is the one the graph would have written (running 200 turns directly costs the
in-process backend minutes, since every turn reloads the state). The in-memory saver's own
``get_state`` is the reference the rebuilt state is compared with.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

from tests.backends import count_calls, total
from tests.delta_graphs import (
    CHANNEL,
    DefaultWalk,
    Recorder,
    checkpoint_id,
    is_mock,
    message_summary,
)
from tests.graphs import thread
from tests.perf.conversation import DELTA, chat_graph, converse
from tests.saver_support import Api

THREAD = "conversation"
ONE_AGGREGATE = {("checkpoints", "aggregate"): 1}


def size(api: Api) -> tuple[int, int]:
    """``(turns, snapshot_frequency)`` of the conversation to build in ``saver``.

    The 200-turn conversation of issue 3 where it is affordable: the sync API on a server.
    The in-process backend's ``$graphLookup`` and ``$lookup`` scan the whole collection at
    every step, so a state load there costs seconds on 600 checkpoints. Elsewhere, a
    shorter conversation of the same shape (four snapshots).
    """
    if is_mock(api.saver) or api.is_async:
        return 20, 10
    return 200, 100


async def build(api: Api) -> tuple[Any, Any, dict[str, RunnableConfig], int]:
    """The conversation, stored in ``api``'s saver: its graph there, the reference graph on
    the in-memory saver, the checkpoints to load and the snapshot frequency."""
    turns, frequency = size(api)
    recorder = Recorder()
    reference = converse(recorder, turns, DELTA, THREAD, frequency)
    await recorder.replay(api)
    return chat_graph(api.saver, DELTA, frequency), reference, depths(recorder), frequency


def depths(recorder: Recorder) -> dict[str, RunnableConfig]:
    """Checkpoints at the interesting distances from their seed."""
    configs = [t.config for t in recorder.list(thread(THREAD))][::-1]
    position = {checkpoint_id(c): i for i, c in enumerate(configs)}
    snapshots = [position[i] for i in recorder.stored(CHANNEL)]
    assert len(snapshots) >= 3, "the conversation should snapshot its messages three times"
    first, second = snapshots[:2]
    return {
        "before any snapshot": configs[first - 1],
        "a snapshot": configs[first],
        "right after a snapshot": configs[first + 1],
        "just before the next snapshot": configs[second - 1],
        "latest": configs[-1],
    }


async def test_state_load_round_trips(api: Api) -> None:
    graph, reference, targets, frequency = await build(api)
    calls = count_calls(api.saver.collections)
    for where, config in targets.items():
        calls.clear()
        snapshot = await api.state(graph, config)
        assert total(calls) <= 3, f"{where}: {dict(calls)}"
        expected = reference.get_state(config)
        assert message_summary(snapshot.values[CHANNEL]) == message_summary(
            expected.values[CHANNEL]
        ), where

        calls.clear()
        history = await api.get_delta_channel_history(config=config, channels=[CHANNEL])
        assert calls == ONE_AGGREGATE, f"{where}: {dict(calls)}"
        writes = len(history[CHANNEL]["writes"])
        if where == "just before the next snapshot":
            assert ("seed" in history[CHANNEL], writes) == (True, frequency - 1)
        if where == "before any snapshot":
            assert ("seed" in history[CHANNEL], writes) == (False, frequency - 1)


# -- a forked thread: siblings inside the range of ids ---------------------------------

# c0 stores the channel; c1 <- c0; the first branch c2 <- c1, c3 <- c2, c4 <- c3; the fork
# c5 <- c1, c6 <- c5. Ids sort by creation, so the range below c6 holds c2..c4, which are
# not its ancestors. With ``snapshot_at_c3``, c3 stores the channel too (a nearer stored
# value in id order that c6 must not see).
PARENTS = {"c1": "c0", "c2": "c1", "c3": "c2", "c4": "c3", "c5": "c1", "c6": "c5"}


async def _put_fork(api: Api, snapshot_at_c3: bool) -> dict[str, RunnableConfig]:
    configs: dict[str, RunnableConfig] = {}
    stored = {"c0", "c3"} if snapshot_at_c3 else {"c0"}
    since: dict[str, int] = {}
    for n, cid in enumerate(["c0", *PARENTS]):
        parent = PARENTS.get(cid)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = cid
        checkpoint["channel_versions"] = {CHANNEL: str(n + 1)}
        if cid in stored:
            checkpoint["channel_values"] = {CHANNEL: [f"seed at {cid}"]}
            since[cid] = 0
        else:
            since[cid] = since[parent] + 1  # type: ignore[index]
        steps = since[cid]
        metadata = {"step": n, "counters_since_delta_snapshot": {CHANNEL: (steps, steps)}}
        config = configs[parent] if parent else thread(THREAD)
        configs[cid] = await api.put(config, checkpoint, metadata, {CHANNEL: str(n + 1)})
        await api.put_writes(configs[cid], [(CHANNEL, f"after {cid}")], "t")
    return configs


async def _history(api: Api, config: RunnableConfig) -> tuple[Any, int]:
    """The saver's history at ``config`` and its round trips; it must be the base class's."""
    calls = count_calls(api.saver.collections)
    history = await api.get_delta_channel_history(config=config, channels=[CHANNEL])
    trips = total(calls)
    base: Any = BaseCheckpointSaver
    walk = DefaultWalk(api.saver)
    if api.is_async:
        default = await base.aget_delta_channel_history(walk, config=config, channels=[CHANNEL])
    else:
        default = base.get_delta_channel_history(walk, config=config, channels=[CHANNEL])
    assert history == default
    return history, trips


def _expected(*ancestors: str) -> dict[str, Any]:
    """c6's history: the seed at c0 and the writes of ``ancestors`` (oldest first)."""
    writes = [("t", CHANNEL, f"after {c}") for c in ancestors]
    return {CHANNEL: {"seed": ["seed at c0"], "writes": writes}}


async def _load(api: Api, config: RunnableConfig) -> tuple[Any, int]:
    """What LangGraph does to load the state at ``config``: ``get_tuple``, then the history
    (which the ``get_tuple`` may have read along); the history and the load's round trips."""
    calls = count_calls(api.saver.collections)
    assert await api.get_tuple(config) is not None
    read = total(calls)
    history, trips = await _history(api, config)
    return history, read + trips


async def test_fork_siblings_inside_the_range_are_not_history(api: Api) -> None:
    configs = await _put_fork(api, snapshot_at_c3=False)
    # c6's counters (noted by its put): its seed is 3 steps up. The range they allow (c6 and
    # 3 checkpoints below), read by the get_tuple, holds siblings c3 and c4: it does not
    # reach the seed, and the history walks.
    history, trips = await _load(api, configs["c6"])
    assert (history, trips) == (_expected("c0", "c1", "c5"), 2)
    # Now the seed's id is known: the range down to it holds every sibling, skipped; the
    # get_tuple reads it, and the load is one round trip.
    history, trips = await _load(api, configs["c6"])
    assert (history, trips) == (_expected("c0", "c1", "c5"), 1)
    # The history alone, the same range.
    history, trips = await _history(api, configs["c6"])
    assert (history, trips) == (_expected("c0", "c1", "c5"), 1)


async def test_a_sibling_storing_the_channel_is_not_the_seed(api: Api) -> None:
    configs = await _put_fork(api, snapshot_at_c3=True)
    # A seed remembered from the other branch (c3, the seed at c4) is too high for c6:
    # the range from c3 does not reach c6's seed, and the walk follows.
    history, trips = await _history(api, configs["c4"])
    assert history == {CHANNEL: {"seed": ["seed at c3"], "writes": [("t", CHANNEL, "after c3")]}}
    assert trips == 1
    history, trips = await _history(api, configs["c6"])
    assert (history, trips) == (_expected("c0", "c1", "c5"), 2)
    # c6's seed (c0) is known now, but c3, nearer in id order, stores the channel: refused.
    history, trips = await _history(api, configs["c6"])
    assert (history, trips) == (_expected("c0", "c1", "c5"), 2)


async def test_linear_history_reads_are_one_round_trip(api: Api) -> None:
    configs = await _put_fork(api, snapshot_at_c3=False)
    for cid, ancestors in [("c4", ("c0", "c1", "c2", "c3")), ("c2", ("c0", "c1"))]:
        # LangGraph's counters bound the range: the get_tuple reads it, the load is one read.
        history, trips = await _load(api, configs[cid])
        writes = [("t", CHANNEL, f"after {c}") for c in ancestors]
        assert (history, trips) == ({CHANNEL: {"seed": ["seed at c0"], "writes": writes}}, 1)
        history, trips = await _history(api, configs[cid])
        assert (history, trips) == ({CHANNEL: {"seed": ["seed at c0"], "writes": writes}}, 1)
    # The first checkpoint: nothing above it, in one read.
    history, trips = await _history(api, configs["c0"])
    assert (history, trips) == ({CHANNEL: {"writes": []}}, 1)
