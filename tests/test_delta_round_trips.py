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

from tests.backends import count_calls, total
from tests.delta_graphs import (
    CHANNEL,
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
