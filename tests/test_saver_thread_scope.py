"""Reads are thread-scoped: copied threads share checkpoint ids, yet one thread's read
transfers only its own documents (every join matches thread and namespace)."""

from __future__ import annotations

import random

from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.operations import BLOBS, WRITES
from tests.faults import ByteCounter

MB = 1024 * 1024
COPIES = 5
LARGE = [random.Random(i).randbytes(2 * MB) for i in range(5)]


def _seed(saver: MongoDBSaver) -> dict:
    checkpoint = generate_checkpoint(
        channel_values={"x": "source"}, channel_versions={"x": "00000001"}
    )
    stored = saver.put(generate_config("src"), checkpoint, generate_metadata(), {"x": "00000001"})
    saver.put_writes(stored, [(f"big{i}", value) for i, value in enumerate(LARGE)], "task")
    for i in range(COPIES):
        saver.copy_thread("src", f"copy{i}")
    # The victim holds a checkpoint with the same id and one small write.
    empty = {**checkpoint, "channel_values": {}, "channel_versions": {}}
    victim = saver.put(generate_config("victim"), empty, generate_metadata(), {})
    saver.put_writes(victim, [("small", "w")], "task")
    return victim


def test_victim_read_transfers_only_its_own_documents(saver: MongoDBSaver) -> None:
    victim = _seed(saver)
    counter = ByteCounter(saver.collections)
    found = saver.get_tuple(victim)
    assert found.pending_writes == [("task", "small", "w")]
    assert found.checkpoint["channel_values"] == {}
    print(f"victim get_tuple transferred {counter.bytes} bytes")
    assert counter.bytes < MB

    listed = list(saver.list({"configurable": {"thread_id": "victim"}}))
    assert [t.pending_writes for t in listed] == [[("task", "small", "w")]]
    assert counter.bytes < 2 * MB

    # The copies read their own large writes, and their join keys name their own thread.
    copy = saver.get_tuple({"configurable": {"thread_id": "copy3", "checkpoint_ns": ""}})
    assert [v for _, _, v in copy.pending_writes] == LARGE
    for doc in saver.collections[WRITES].find({"thread_id": "copy3"}):
        assert doc["join"].split("\x1f")[0] == "copy3"
    for doc in saver.collections[BLOBS].find({"thread_id": "copy3"}):
        assert doc["join"].split("\x1f")[0] == "copy3"


def test_delta_history_read_is_thread_scoped(saver: MongoDBSaver) -> None:
    victim = _seed(saver)
    counter = ByteCounter(saver.collections)
    child = saver.put(victim, generate_checkpoint(), generate_metadata(), {})
    history = saver.get_delta_channel_history(config=child, channels=["big0", "small"])
    # The parent's checkpoint id is shared with the copies: only the victim's write comes.
    assert history["big0"]["writes"] == []
    assert history["small"]["writes"] == [("task", "small", "w")]
    print(f"victim delta history transferred {counter.bytes} bytes")
    assert counter.bytes < MB
