"""Integrity invariants: a value is whole or absent (never stitched from two attempts),
maintenance deletes by exact keys (a concurrent put keeps its values), and a checkpoint
whose values are missing raises ``MissingValueError``."""

from __future__ import annotations

import random

import pytest
from bson import Binary
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo.errors import AutoReconnect

from mongo_ckpt import ConflictingValueError, MissingValueError, MongoDBSaver, payload
from mongo_ckpt.operations import BLOBS, CHECKPOINTS, WRITES
from tests.faults import Fault, Faults, Interleave
from tests.saver_support import Api

CHUNK = 64
A = random.Random(1).randbytes(5 * CHUNK)
B = random.Random(2).randbytes(5 * CHUNK)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)


def _checkpoint(saver: MongoDBSaver, thread_id: str = "t") -> dict:
    return saver.put(generate_config(thread_id), generate_checkpoint(), generate_metadata(), {})


def _writes_bulk_size(saver: MongoDBSaver, stored: dict, writes: list, task: str) -> int:
    faults = Faults(saver.collections)
    try:
        saver.put_writes(stored, writes, task)
    finally:
        faults.restore()
    return faults.calls[0][2]  # the bulk write (a find of part ids follows)


def _cut_then(saver: MongoDBSaver, fault: Fault, action) -> bool:
    """Run ``action`` with ``fault`` armed; True if the fault fired."""
    faults = Faults(saver.collections)
    faults.arm(fault)
    try:
        action()
    except AutoReconnect:
        pass
    finally:
        faults.restore()
    return faults.fired


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("channel", ["big", "__error__"])
def test_retried_write_with_another_value_never_mixes(saver: MongoDBSaver, channel: str) -> None:
    probe = _checkpoint(saver, "probe")
    size = _writes_bulk_size(saver, probe, [(channel, A)], "task")
    assert size >= 5  # several parts
    for k in range(size + 1):
        thread = f"t{k}"
        stored = _checkpoint(saver, thread)
        mode = "cut" if k < size else "after"
        assert _cut_then(
            saver,
            Fault(0, mode, k),
            lambda stored=stored: saver.put_writes(stored, [(channel, A)], "task"),
        )
        seen = saver.get_tuple(stored).pending_writes
        assert seen in ([], [("task", channel, A)]), f"stitched value after cut at {k}"
        complete = bool(seen)
        saver.put_writes(stored, [(channel, B)], "task")  # the retry, another value
        seen = saver.get_tuple(stored).pending_writes
        if channel == "big" and complete:
            assert seen == [("task", channel, A)]  # first whole value wins
        else:
            assert seen == [("task", channel, B)]


@pytest.mark.usefixtures("small_chunks")
def test_special_overwrite_swaps_atomically(saver: MongoDBSaver) -> None:
    probe = _checkpoint(saver, "probe")
    saver.put_writes(probe, [("__error__", A)], "task")
    size = _writes_bulk_size(saver, probe, [("__error__", B)], "task")
    for k in range(size + 1):
        stored = _checkpoint(saver, f"t{k}")
        saver.put_writes(stored, [("__error__", A)], "task")
        mode = "cut" if k < size else "after"
        _cut_then(
            saver,
            Fault(0, mode, k),
            lambda stored=stored: saver.put_writes(stored, [("__error__", B)], "task"),
        )
        seen = saver.get_tuple(stored).pending_writes
        assert seen in ([("task", "__error__", A)], [("task", "__error__", B)]), k
        saver.put_writes(stored, [("__error__", B)], "task")
        assert saver.get_tuple(stored).pending_writes == [("task", "__error__", B)]
        # Parts of the replaced value are gone: only B's parts remain.
        docs = list(saver.collections[WRITES].find({"thread_id": f"t{k}"}))
        assert {d["vid"] for d in docs} == {payload.digest(*saver.serde.dumps_typed(B))}


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("client_bulk_write", [None, False], ids=["detected", "per-collection"])
def test_retried_put_with_other_bytes_for_a_version_never_mixes(
    saver: MongoDBSaver, client_bulk_write: bool | None
) -> None:
    saver = MongoDBSaver(saver.client, saver.db.name, client_bulk_write=client_bulk_write)
    saver.setup()

    def put(thread: str, value: bytes) -> dict:
        checkpoint = generate_checkpoint(
            channel_values={"big": value}, channel_versions={"big": "00000001"}
        )
        return saver.put(
            generate_config(thread), checkpoint, generate_metadata(), {"big": "00000001"}
        )

    faults = Faults(saver.collections)
    put("probe", A)
    faults.restore()
    size = faults.calls[0][2]  # the values' bulk write, or the put's one client-level one
    values = size - 1 if saver.uses_client_bulk_write else size  # then the checkpoint's
    for k in range(size + 1):
        thread = f"t{k}"
        mode = "cut" if k < size else "after"
        _cut_then(saver, Fault(0, mode, k), lambda thread=thread: put(thread, A))
        if k > values:  # the checkpoint of A landed too: another put of the version keeps A
            put(thread, B)
        elif k == values:  # A is stored whole: a version names one value, B is refused
            with pytest.raises(ConflictingValueError):
                put(thread, B)
            assert saver.get_tuple(generate_config(thread)) is None
            put(thread, A)
        else:
            put(thread, B)
        value = saver.get_tuple(generate_config(thread)).checkpoint["channel_values"]["big"]
        assert value in (A, B), f"stitched value after cut at {k}"
        if k >= values:
            assert value == A  # the first whole value of a version stays


def test_stitched_parts_read_as_absent(saver: MongoDBSaver, monkeypatch) -> None:
    """Parts that do not match the head's digest are never joined."""
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    stored = _checkpoint(saver)
    saver.put_writes(stored, [("big", A)], "task")
    writes = saver.collections[WRITES]
    tail = writes.find_one({"thread_id": "t", "part": {"$ne": 0}})
    writes.update_one({"_id": tail["_id"]}, {"$set": {"data": Binary(B[:CHUNK])}})
    assert saver.get_tuple(stored).pending_writes == []


def test_missing_value_raises_a_clear_error(saver: MongoDBSaver) -> None:
    checkpoint = generate_checkpoint(
        channel_values={"a": "x", "b": "y"}, channel_versions={"a": "00000001", "b": "00000002"}
    )
    stored = saver.put(
        generate_config("t"), checkpoint, generate_metadata(), {"a": "00000001", "b": "00000002"}
    )
    saver.collections[BLOBS].delete_many({"channel": "b"})
    with pytest.raises(MissingValueError) as error:
        saver.get_tuple(stored)
    assert isinstance(error.value, LookupError)
    for part in ("'t'", "checkpoint_ns=''", "'b'", "'00000002'"):
        assert part in str(error.value)
    with pytest.raises(MissingValueError):
        list(saver.list(generate_config("t")))


# -- maintenance against a concurrent writer -----------------------------------------


class Writer:
    """Puts checkpoints on one thread, each with a new value of ``a`` and the first ``b``."""

    def __init__(self, saver: MongoDBSaver, thread_id: str, run_id: str = "writer") -> None:
        self.saver = type(saver)(saver.client, saver.db.name)  # unwrapped collections
        self.thread_id, self.run_id = thread_id, run_id
        self.expected: dict[str, dict] = {}
        self.last: dict | None = None
        self.step = 0

    def put(self, run_id: str | None = None) -> dict:
        self.step += 1
        values = {"a": f"a{self.step}", "b": "b"}
        versions = {"a": f"{self.step:08}", "b": f"{1:08}"}
        new = versions if self.last is None else {"a": versions["a"]}
        checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
        config = self.last or generate_config(self.thread_id)
        metadata = generate_metadata(run_id=run_id or self.run_id)
        self.last = self.saver.put(config, checkpoint, metadata, new)
        self.expected[checkpoint["id"]] = values
        return self.last

    def assert_readable(self) -> int:
        listed = list(self.saver.list({"configurable": {"thread_id": self.thread_id}}))
        for item in listed:
            found = self.saver.get_tuple(item.config)
            cid = item.config["configurable"]["checkpoint_id"]
            assert found.checkpoint["channel_values"] == self.expected[cid]
        return len(listed)


def _interleaved(saver: MongoDBSaver, writer: Writer, action) -> int:
    interleave = Interleave(saver.collections, writer.put)
    try:
        action()
    finally:
        interleave.restore()
    return interleave.count


def test_prune_keeps_values_of_a_concurrent_put(saver: MongoDBSaver) -> None:
    writer = Writer(saver, "t")
    for _ in range(4):
        writer.put()
    calls = _interleaved(saver, writer, lambda: saver.prune(["t"], strategy="keep_latest"))
    assert calls >= 3
    # The latest at the snapshot and every put made during the prune survive, readable.
    assert writer.assert_readable() == calls
    saver.prune(["t"], strategy="keep_latest")
    assert writer.assert_readable() == 1


def test_delete_for_runs_keeps_values_of_a_concurrent_put(saver: MongoDBSaver) -> None:
    writer = Writer(saver, "t")
    for _ in range(3):
        writer.put(run_id="doomed")
    writer.put(run_id="kept")
    calls = _interleaved(saver, writer, lambda: saver.delete_for_runs(["doomed"]))
    assert calls >= 3
    assert writer.assert_readable() == 1 + (calls - 1)
    assert saver.collections[CHECKPOINTS].count_documents({"run_id": "doomed"}) == 0


# -- real sizes: values over MongoDB's 16 MiB document limit -------------------------

MB = 1024 * 1024
BIG_A = random.Random(3).randbytes(20 * MB)
BIG_B = random.Random(4).randbytes(20 * MB)


async def test_big_write_cut_then_retried_with_another_value(api: Api) -> None:
    stored = await api.put(generate_config("big"), generate_checkpoint(), generate_metadata(), {})
    faults = Faults(api.saver.collections)
    faults.arm(Fault(0, "cut", 1))  # one tail part of A lands, then the connection drops
    with pytest.raises(AutoReconnect):
        await api.put_writes(stored, [("big", BIG_A)], "task")
    faults.restore()
    assert faults.fired
    assert (await api.get_tuple(stored)).pending_writes == []
    await api.put_writes(stored, [("big", BIG_B)], "task")
    assert (await api.get_tuple(stored)).pending_writes == [("task", "big", BIG_B)]
    await api.delete_thread("big")
