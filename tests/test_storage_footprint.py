"""Stored bytes of a chat conversation: mongo-ckpt against langgraph-checkpoint-mongodb.

Both savers run the same deterministic graph on the same backend (``tests/perf/conversation``:
one ~1 KB human message and one ~1 KB AI reply per turn). Byte totals are compared with
margins; document counts are exact. The full 200-turn numbers are in docs/benchmarks.md.
"""

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver

pytest.importorskip(
    "langgraph.checkpoint.mongodb",
    reason="compares against langgraph-checkpoint-mongodb: pip install -e '.[test,bench]'",
)

from tests.perf.conversation import (  # noqa: E402
    DELTA,
    MESSAGE_BYTES,
    MONGO_CKPT,
    OFFICIAL,
    PLAIN,
    SNAPSHOT_FREQUENCY,
    Footprint,
    converse,
    make_saver,
    saver_collections,
    saver_footprint,
    total_bytes,
)

SHORT, LONG = 10, 20
# Each turn makes three checkpoints: the input (step -1), after START (0), after reply (1).
CHECKPOINTS_PER_TURN = 3
# Each turn updates ``messages`` twice: with the human message and with the reply.
UPDATES_PER_TURN = 2
# Pending writes per turn: START writes ``messages`` and ``branch:to:reply``; reply, ``messages``.
WRITES_PER_TURN = 3


# Stored bytes are computed on the client from the documents: the same on every backend.
pytestmark = pytest.mark.mock_by_default


@pytest.fixture
def savers(client: Any, db_name: str) -> Iterator[dict[str, BaseCheckpointSaver]]:
    """Both savers on the same client, each in its own database."""
    official_db = f"{db_name}_official"
    yield {
        MONGO_CKPT: make_saver(MONGO_CKPT, client, db_name),
        OFFICIAL: make_saver(OFFICIAL, client, official_db),
    }
    client.drop_database(db_name)
    client.drop_database(official_db)


def _two_threads(
    savers: dict[str, BaseCheckpointSaver], variant: str
) -> dict[tuple[str, int], dict[str, Footprint]]:
    """Footprint per (saver, turns) of a ``SHORT``- and a ``LONG``-turn thread."""
    out = {}
    for name, saver in savers.items():
        for turns in (SHORT, LONG):
            converse(saver, turns, variant, thread_id=f"t{turns}")
            out[name, turns] = saver_footprint(saver, f"t{turns}")
    return out


def _stored_versions(saver: BaseCheckpointSaver, thread_id: str) -> Counter:
    """Per channel, how many distinct versions have a value in some checkpoint of the thread."""
    pairs = {
        (channel, tup.checkpoint["channel_versions"][channel])
        for tup in saver.list({"configurable": {"thread_id": thread_id}})
        for channel in tup.checkpoint["channel_values"]
    }
    return Counter(channel for channel, _ in pairs)


def _blobs_per_channel(saver: BaseCheckpointSaver, thread_id: str) -> Counter:
    blobs = saver_collections(saver)["blobs"]
    return Counter(doc["channel"] for doc in blobs.find({"thread_id": thread_id}))


def test_plain_conversation_stores_fewer_bytes_than_official(
    savers: dict[str, BaseCheckpointSaver],
) -> None:
    sizes = _two_threads(savers, PLAIN)
    ours, theirs = savers[MONGO_CKPT], savers[OFFICIAL]

    for turns in (SHORT, LONG):
        assert total_bytes(sizes[MONGO_CKPT, turns]) < total_bytes(sizes[OFFICIAL, turns])
        for name in (MONGO_CKPT, OFFICIAL):
            assert sizes[name, turns]["checkpoints"].docs == CHECKPOINTS_PER_TURN * turns
            # One document per pending write (no payload here needs chunking).
            assert sizes[name, turns]["writes"].docs == WRITES_PER_TURN * turns

        # One blob per channel version written with a value, never a rewrite of an
        # unchanged channel: the official saver's full checkpoints show which versions exist.
        blobs = _blobs_per_channel(ours, f"t{turns}")
        assert blobs == _stored_versions(theirs, f"t{turns}")
        assert blobs["messages"] == UPDATES_PER_TURN * turns
        assert sizes[MONGO_CKPT, turns]["blobs"].docs == sum(blobs.values())

    # Checkpoint documents hold no channel values, so that collection grows linearly with
    # the thread, while the official saver's (the full state in every checkpoint) grows
    # quadratically.
    checkpoints = {key: sizes[key]["checkpoints"].bytes for key in sizes}
    assert checkpoints[MONGO_CKPT, LONG] / checkpoints[MONGO_CKPT, SHORT] < 2.3
    assert checkpoints[OFFICIAL, LONG] / checkpoints[OFFICIAL, SHORT] > 3.5
    assert sizes[MONGO_CKPT, LONG]["checkpoints"].largest < 2 * MESSAGE_BYTES


def test_delta_conversation_grows_linearly_and_stays_small(
    savers: dict[str, BaseCheckpointSaver],
) -> None:
    ours, theirs = savers[MONGO_CKPT], savers[OFFICIAL]
    sizes = {}
    for turns in (SHORT, LONG):
        graph = converse(ours, turns, DELTA, thread_id=f"t{turns}")
        state = graph.get_state({"configurable": {"thread_id": f"t{turns}"}})
        assert len(state.values["messages"]) == UPDATES_PER_TURN * turns
        sizes[turns] = saver_footprint(ours, f"t{turns}")
    converse(theirs, LONG, PLAIN, thread_id="plain")

    # Fewer than ``snapshot_frequency`` updates: every message lives only in the writes.
    assert UPDATES_PER_TURN * LONG < SNAPSHOT_FREQUENCY
    assert _blobs_per_channel(ours, f"t{LONG}")["messages"] == 0
    assert sizes[LONG]["checkpoints"].docs == CHECKPOINTS_PER_TURN * LONG
    assert sizes[LONG]["writes"].docs == WRITES_PER_TURN * LONG

    assert total_bytes(sizes[LONG]) / total_bytes(sizes[SHORT]) < 2.3
    # Linear against the official saver's quadratic plain storage: the gap widens with
    # every turn (200 turns: docs/benchmarks.md).
    assert total_bytes(sizes[LONG]) * 6 < total_bytes(saver_footprint(theirs, "plain"))


def test_delta_snapshots_are_the_only_message_blobs(
    savers: dict[str, BaseCheckpointSaver],
) -> None:
    turns, frequency = 10, 4
    for saver in savers.values():
        converse(saver, turns, DELTA, thread_id="snap", snapshot_frequency=frequency)
    # LangGraph snapshots every ``frequency``-th update of the channel; the official saver
    # keeps every checkpoint's full values, so it shows which versions hold a snapshot.
    stored = _stored_versions(savers[OFFICIAL], "snap")
    assert stored["messages"] == UPDATES_PER_TURN * turns // frequency
    assert _blobs_per_channel(savers[MONGO_CKPT], "snap") == stored


def test_delta_conversation_stores_fewer_bytes_than_official_delta(
    savers: dict[str, BaseCheckpointSaver],
) -> None:
    """The same ``DeltaChannel`` thread on both savers, snapshots included: the snapshots
    are stored compressed, which outweighs the per-document overhead of
    the separate value and write documents (200 turns: docs/benchmarks.md)."""
    turns, frequency = 20, 10
    for saver in savers.values():
        converse(saver, turns, DELTA, thread_id="d", snapshot_frequency=frequency)
    ours, theirs = (total_bytes(saver_footprint(savers[name], "d")) for name in savers)
    assert _blobs_per_channel(savers[MONGO_CKPT], "d")["messages"] == 2 * turns // frequency
    assert ours < 0.95 * theirs, (ours, theirs)
