"""Compressed values under faults and disagreeing instances (``payload.split(compress=True)``,
the type tag ``msgpack+zlib``, ``vid`` the digest of the stored bytes), and the late
confirmation's unmark (``maintenance.unmark_after_late_confirmation``).

What is tried: special-channel writes (``WRITES_IDX_MAP``), which overwrite their head
with ``$set``, written once compressed and once not (a smaller value, or another instance
that does not compress yet); two attempts of one value with and without compression (a
cut one and its retry, by instances that disagree on compressing), whose
parts are keyed by different ``vid``s and may differ in number; the retried put adopting a
compressed stored value (``_adopt_stored``/``same_value``) and list-delta chains continued
across such instances; and the unmark after a late confirmation racing ``delete_thread``
on the same thread, stepped one collection call at a time (``Stepper``).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pymongo.errors import AutoReconnect
from typing_extensions import TypedDict

from mongo_ckpt import MongoDBSaver, maintenance, payload
from mongo_ckpt.documents import write_requests
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, PENDING, WRITES
from mongo_ckpt.migration import Source, migrate_from_official, verify_migration
from mongo_ckpt.payload import COMPRESS_FROM, ZLIB
from tests.backends import maybe_await
from tests.chat_support import chat, human
from tests.faults import Fault, Faults
from tests.prose import prose
from tests.saver_support import Api, assert_no_orphans, stop_compressing
from tests.stepping import Stepper, step_until

# LangGraph's special channels (``WRITES_IDX_MAP``): written with ``$set``, they overwrite.
ERROR, INTERRUPT = "__error__", "__interrupt__"
COMPRESSED = {"type": {"$regex": "\\+zlib$"}}
CHUNK = 1024  # payload.CHUNK_SIZE in these tests: a value of a few KiB is in several parts


async def not_compressing(api: Api) -> Api:
    """Another saver on the same database that stores values uncompressed (as one under
    ``EncryptedSerializer`` does, during a rollout that turns encryption on)."""
    other = api.reopened()
    await other.setup()
    stop_compressing(other.saver)
    assert not other.saver.ops.compressing
    return other


async def a_checkpoint(api: Api, thread_id: str = "t") -> RunnableConfig:
    checkpoint = generate_checkpoint(channel_values={"a": "a"}, channel_versions={"a": "1"})
    stored: RunnableConfig = await api.put(generate_config(thread_id), checkpoint, {}, {"a": "1"})
    return stored


# -- 1. a special write overwritten: the old head's ``compression`` stays ------------------


# Found in review, fixed: documents.write_requests: a special channel's head is overwritten with
# $set of the new fields only, so a compressed head rewritten uncompressed keeps compression:
# 'zlib' and every read of the checkpoint raises zlib.error
async def test_a_special_write_rewritten_smaller_reads_back(api: Api) -> None:
    assert api.saver.ops.compressing
    config = await a_checkpoint(api)
    await api.put_writes(config, [(ERROR, prose(1, 4 * COMPRESS_FROM))], "task")
    assert await api.count(WRITES, COMPRESSED) == 1
    await api.put_writes(config, [(ERROR, "short")], "task")  # the same task fails again
    found = await api.get_tuple(config)
    assert found is not None and found.pending_writes == [("task", ERROR, "short")]


# Found in review, fixed: documents.write_requests: the same special write again by an instance
# that does not compress yet overwrites the compressed head's data but not its compression
# field: the checkpoint no longer reads (zlib.error)
async def test_the_same_special_write_again_by_an_instance_not_compressing(api: Api) -> None:
    config = await a_checkpoint(api)
    value = prose(2, 4 * COMPRESS_FROM)
    await api.put_writes(config, [(INTERRUPT, value)], "task")
    assert await api.count(WRITES, COMPRESSED) == 1
    other = await not_compressing(api)
    await other.put_writes(config, [(INTERRUPT, value)], "task")  # a lost reply, retried
    for reader in (api, other, api.reopened()):
        found = await reader.get_tuple(config)
        assert found is not None and found.pending_writes == [("task", INTERRUPT, value)]


async def test_regular_writes_again_by_an_instance_not_compressing_keep_the_first(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: regular writes are first-write-wins whatever the compression: the same
    ``put_writes`` again (in parts, uncompressed) by an instance that does not compress yet
    keeps the compressed head, drops its own parts, and reads back the same."""
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    config = await a_checkpoint(api)
    value = prose(9, 6 * CHUNK)
    await api.put_writes(config, [("w", value)], "task")
    other = await not_compressing(api)
    await other.put_writes(config, [("w", value)], "task")
    assert await api.count(WRITES, {**COMPRESSED, "part": 0}) == 1
    for reader in (api, other):
        found = await reader.get_tuple(config)
        assert found is not None and found.pending_writes == [("task", "w", value)]
    await assert_no_orphans(api)


class Counted(TypedDict):
    x: int


# Found in review, fixed: the failing node's __error__ write is overwritten by the shorter error
# of its second attempt, keeping compression: 'zlib': get_state raises zlib.error and the thread
# cannot be resumed
async def test_a_node_that_fails_twice_leaves_a_readable_thread(api: Api) -> None:
    """A realistic path to the finding above: a node fails with a long message (a tool's
    output, a traceback), the run is resumed and the node fails again, shortly."""
    attempts: list[int] = []

    def flaky(state: Counted) -> Counted:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError(prose(3, 3 * COMPRESS_FROM))
        raise ValueError("short")

    builder = StateGraph(Counted)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "flaky")
    builder.add_edge("flaky", END)
    graph = api.compile(builder)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for given in ({"x": 1}, None):
        with pytest.raises(ValueError):
            await api.invoke(graph, given, config)
    assert len(attempts) == 2
    state = await api.state(graph, config)
    assert state.values == {"x": 1} and state.next == ("flaky",)


async def test_a_special_write_rewritten_larger_reads_back(api: Api) -> None:
    """The other direction holds: a small special write rewritten with a large one (a
    resume list that grows) gets the compression field with its new data."""
    config = await a_checkpoint(api)
    await api.put_writes(config, [(INTERRUPT, "short")], "task")
    value = prose(4, 4 * COMPRESS_FROM)
    await api.put_writes(config, [(INTERRUPT, value)], "task")
    assert await api.count(WRITES, COMPRESSED) == 1
    found = await api.get_tuple(config)
    assert found is not None and found.pending_writes == [("task", INTERRUPT, value)]
    await assert_no_orphans(api)


# -- 2. one value, two attempts: with and without compression ------------------------


def _big_checkpoint(value: str) -> tuple[Checkpoint, dict[str, Any]]:
    checkpoint = generate_checkpoint(channel_values={"big": value}, channel_versions={"big": "1"})
    return checkpoint, {"big": "1"}


async def _cut_then_retry(
    api: Api, first: Api, retry: Api, value: str, parts_applied: int
) -> RunnableConfig:
    """``first`` puts ``value`` and its bulk write is cut after ``parts_applied`` requests
    (parts, no head); ``retry`` makes the same put again. Returns the retry's config."""
    checkpoint, versions = _big_checkpoint(value)
    faults = Faults(first.saver.collections)
    faults.arm(Fault(0, "cut", parts_applied))
    try:
        with pytest.raises(AutoReconnect):
            await first.put(generate_config("t"), checkpoint, generate_metadata(), versions)
    finally:
        faults.restore()
    assert faults.fired and await api.count(BLOBS, {"part": 0}) == 0
    assert await api.count(BLOBS) == parts_applied
    stored: RunnableConfig = await retry.put(
        generate_config("t"), checkpoint, generate_metadata(), versions
    )
    return stored


# Found in review, fixed: writing._drop_stray_parts runs only for keys whose own attempt is
# in several parts (ValueWrites.multipart): a cut uncompressed attempt in parts retried by a
# compressing instance in one part leaves the cut attempt's parts until a maintenance of the
# thread after STRAY_AGE
async def test_a_cut_attempt_in_parts_retried_compressed_in_one_leaves_no_parts(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    value = "ab" * (3 * CHUNK)  # compresses to well under one part
    plain = await not_compressing(api)
    config = await _cut_then_retry(api, plain, api, value, parts_applied=4)
    found = await api.get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"] == {"big": value}
    assert await api.count(BLOBS, {**COMPRESSED, "part": 0}) == 1
    await assert_no_orphans(api)


async def test_a_cut_compressed_attempt_retried_uncompressed_leaves_no_parts(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: the retry in several parts reads its key's part ids and drops the cut
    attempt's (another ``vid``)."""
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    value = prose(5, 6 * CHUNK)  # compressed still in several parts
    assert len(list(payload.split("json", value.encode(), compress=True))) > 1
    plain = await not_compressing(api)
    config = await _cut_then_retry(api, api, plain, value, parts_applied=2)
    for reader in (api, plain, api.reopened()):
        found = await reader.get_tuple(config)
        assert found is not None and found.checkpoint["channel_values"] == {"big": value}
    assert await api.count(BLOBS, COMPRESSED) == 0
    await assert_no_orphans(api)


async def test_a_put_again_by_an_instance_not_compressing_adopts_the_stored_value(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: the first attempt stored the value compressed (in parts) and its reply was
    lost; the same put by an instance that does not compress finds the head stored, adopts
    the stored value (the same value, read back decompressed: no ``ConflictingValueError``)
    and drops its own parts."""
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    value = prose(6, 6 * CHUNK)
    checkpoint, versions = _big_checkpoint(value)
    faults = Faults(api.saver.collections)
    faults.arm(Fault(0, "after"))
    try:
        with pytest.raises(AutoReconnect):
            await api.put(generate_config("t"), checkpoint, generate_metadata(), versions)
    finally:
        faults.restore()
    plain = await not_compressing(api)
    config = await plain.put(generate_config("t"), checkpoint, generate_metadata(), versions)
    for reader in (api, plain):
        found = await reader.get_tuple(config)
        assert found is not None and found.checkpoint["channel_values"] == {"big": value}
    assert await api.count(BLOBS, {**COMPRESSED, "part": 0}) == 1
    await assert_no_orphans(api)


async def test_a_list_chain_continued_by_instances_that_disagree_on_compression(
    api: Api,
) -> None:
    """Held: turns alternate between a compressing instance and one that does not compress
    yet (each reads the latest checkpoint first, so each continues the other's list-delta
    chain from what it read, decompressed); every state and the history equal
    ``InMemorySaver``'s."""
    plain = await not_compressing(api)
    builder = chat()
    graphs = [api.compile(builder), plain.compile(builder)]
    reference = builder.compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    for turn in range(5):
        await [api, plain][turn % 2].invoke(graphs[turn % 2], human(turn), config)
        reference.invoke(human(turn), config)
    assert await api.count(BLOBS, COMPRESSED) > 0
    assert await api.count(BLOBS, {"base": {"$exists": True}}) > 0  # deltas were written
    expected = reference.get_state(config).values
    for reader, graph in ((api, graphs[0]), (plain, graphs[1])):
        assert (await reader.state(graph, config)).values == expected
        history = [s.values for s in await reader.history(graph, config)]
        assert history == [s.values for s in reference.get_state_history(config)]
    await api.copy_thread("t", "copy")
    copied = await api.state(graphs[0], {"configurable": {"thread_id": "copy"}})
    assert copied.values == expected
    await api.prune(["t", "copy"], strategy="keep_latest")
    assert (await api.state(graphs[0], config)).values == expected
    await assert_no_orphans(api)


# -- 3. the late confirmation's unmark racing delete_thread -----------------------------


def _put_on_a_parent_never_stored(api: Api) -> tuple[Any, dict[str, Any]]:
    """A put whose parent was never stored (``update_state`` at an id not in the thread):
    its probe misses, ``judge_parent`` accepts, the confirmation goes in a call of its own
    and ``unmark_after_late_confirmation`` finds the parent absent, so it unmarks."""
    checkpoint = generate_checkpoint(
        channel_values={"a": "a", "b": "b"}, channel_versions={"a": "1", "b": "1"}
    )
    config = generate_config("t")
    config["configurable"]["checkpoint_id"] = "ghost"
    op = api.saver.ops.put(config, checkpoint, generate_metadata(), {"a": "1", "b": "1"})
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint["id"]}
    return op, {"configurable": key}


async def _confirmed_late(api: Api) -> tuple[dict[str, Any], Stepper]:
    """A put on a parent never stored, stepped until its separate confirmation landed."""
    op, config = _put_on_a_parent_never_stored(api)
    writer = Stepper(api, op)

    async def confirmed() -> bool:
        docs = await api.docs(CHECKPOINTS, {"thread_id": "t"})
        return bool(docs) and not docs[0].get(PENDING)

    await step_until(writer, confirmed)
    return config, writer


# Found in review, fixed: maintenance.unmark_after_late_confirmation unmarks after its one read:
# delete_thread tombstoning the checkpoint and marking its values between that read and the
# update_many has its marks lifted, and the thread's young, unnamed values survive the delete
# (and the next delete_thread)
async def test_the_unmark_racing_delete_thread_leaves_nothing_of_the_thread(api: Api) -> None:
    """The put's read after its confirmation finds its checkpoint visible and the parent
    absent; ``delete_thread`` then tombstones the checkpoint and marks its values; the
    put's ``update_many`` lifts those marks; ``delete_thread`` deletes the checkpoint and
    leaves the values, unmarked, unnamed and younger than ``STRAY_AGE``."""
    config, writer = await _confirmed_late(api)
    assert await writer.step()  # the unmark's read: the checkpoint visible, the parent absent
    deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, "t"))

    async def values_marked() -> bool:
        return await api.count(BLOBS, {"thread_id": "t", maintenance.DOOMED: True}) == 2

    await step_until(deleting, values_marked)
    await writer.finish()  # its update_many
    assert writer.raised is None
    await deleting.finish()
    assert deleting.raised is None
    assert await api.get_tuple(config) is None
    await api.delete_thread("t")  # and once more, as an operator would
    for collection in (CHECKPOINTS, BLOBS, WRITES):
        assert await api.count(collection, {"thread_id": "t"}) == 0, collection


async def test_the_unmark_after_delete_thread_tombstoned_keeps_its_marks(api: Api) -> None:
    """Held: ``delete_thread``'s tombstone lands before the unmark's read, so the put
    sees its checkpoint doomed and leaves the marks; the thread is deleted whole."""
    config, writer = await _confirmed_late(api)
    deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, "t"))

    async def values_marked() -> bool:
        return await api.count(BLOBS, {"thread_id": "t", maintenance.DOOMED: True}) == 2

    await step_until(deleting, values_marked)
    await writer.finish()
    assert writer.raised is None
    await deleting.finish()
    assert deleting.raised is None
    assert await api.get_tuple(config) is None
    for collection in (CHECKPOINTS, BLOBS, WRITES):
        assert await api.count(collection, {"thread_id": "t"}) == 0, collection


class Reviewed(TypedDict):
    answer: str


def two_questions() -> StateGraph[Reviewed]:
    """A node asking a long question (a draft to review), then a short one."""

    def review(state: Reviewed) -> Reviewed:
        first = interrupt({"review": prose(8, 3 * COMPRESS_FROM)})
        second = interrupt("ship it?")
        return {"answer": f"{first}/{second}"}

    builder = StateGraph(Reviewed)
    builder.add_node("review", review)
    builder.add_edge(START, "review")
    builder.add_edge("review", END)
    return builder


# Found in review, fixed: the node's second interrupt rewrites the task's __interrupt__ write
# with a short value, keeping compression: 'zlib' of the first: the resume raises zlib.error
async def test_a_node_interrupting_twice_is_resumed_to_its_end(api: Api) -> None:
    """Another LangGraph path to the finding: human in the loop with two questions in one
    node, the first long."""
    graph = api.compile(two_questions())
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    await api.invoke(graph, {"answer": ""}, config)
    await api.invoke(graph, Command(resume="fine"), config)
    result = await api.invoke(graph, Command(resume="yes"), config)
    assert result == {"answer": "fine/yes"}


# -- 4. migrated from langgraph-checkpoint-mongodb into a compressing database ---------


def test_official_threads_migrated_compressed_read_back_and_go_on(
    client: Any, db_name: str
) -> None:
    """Held: threads of the official saver with large messages and a long interrupt,
    migrated into a new database (values and writes stored compressed), verify,
    read as the official saver reads them, and go on."""
    official_saver = pytest.importorskip("langgraph.checkpoint.mongodb").MongoDBSaver
    official = official_saver(client, f"{db_name}_src")
    dest = MongoDBSaver(client, db_name)
    try:
        chats = chat().compile(checkpointer=official)
        for turn in range(2):
            chats.invoke(human(turn), {"configurable": {"thread_id": "chat"}})
        asks = two_questions().compile(checkpointer=official)
        asks.invoke({"answer": ""}, {"configurable": {"thread_id": "ask"}})
        source = Source(f"{db_name}_src")
        done = migrate_from_official(dest, source)
        assert done.threads == 2 and dest.ops.compressing
        assert verify_migration(dest, source).mismatches == []
        names = dest.layout.by_logical()
        for logical in (BLOBS, WRITES):
            assert dest.db[names[logical]].count_documents(COMPRESSED) > 0, logical
        for thread_id in ("chat", "ask"):
            config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
            expected = [
                (t.checkpoint["channel_values"], t.pending_writes) for t in official.list(config)
            ]
            assert [
                (t.checkpoint["channel_values"], t.pending_writes) for t in dest.list(config)
            ] == expected
        config = {"configurable": {"thread_id": "chat"}}
        mine = chat().compile(checkpointer=dest).invoke(human(2), config)
        assert mine == chats.invoke(human(2), config)
    finally:
        client.drop_database(f"{db_name}_src")
        client.drop_database(db_name)


# -- 5. every fault of the write paths, with values that compress ----------------------


def compressible(seed: int) -> bytes:
    """A value the fault harness stores: ``COMPRESS_FROM`` bytes and more of words (its
    own ``big`` is too small to be compressed), several parts both compressed and not at
    ``FAULT_CHUNK``."""
    return prose(seed, COMPRESS_FROM + 952).encode()


FAULT_CHUNK = 1024


@pytest.mark.parametrize("name", ["put", "put_writes"])
async def test_every_fault_with_compressed_values_in_parts(
    api: Api, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: ``tests.fault_harness`` (every call failed before, after, or cut after each
    request, then retried with the same and with another value) with values stored
    compressed in several parts, special writes included."""
    from tests import fault_harness

    monkeypatch.setattr(payload, "CHUNK_SIZE", FAULT_CHUNK)
    monkeypatch.setattr(fault_harness, "big", compressible)
    parts = list(payload.split("bytes", compressible(1), compress=True))
    assert len(parts) > 1 and parts[-1]["type"].endswith(ZLIB)
    cases = await fault_harness.check_every_fault(api.saver, name)
    assert cases > 0
    # The harness's clean first run is left in place: it stored compressed documents.
    assert await api.count(BLOBS if name == "put" else WRITES, COMPRESSED) > 0


async def test_a_lost_list_delta_put_retried_by_a_cold_instance_not_compressing(
    api: Api,
) -> None:
    """Held: a compressing instance stores a list value as a delta on its previous version
    (the tail compressed) and the reply is lost; a new instance that does not compress yet
    makes the same put: it plans the list whole, finds the head stored, reads the delta and
    its base back (decompressed), finds the same value and names the stored chain."""
    items = [prose(10 + n, COMPRESS_FROM + 500) for n in range(3)]

    def checkpoint_of(n: int) -> Checkpoint:
        return generate_checkpoint(
            channel_values={"items": items[:n]}, channel_versions={"items": f"{n:08}"}
        )

    first = checkpoint_of(2)
    config = await api.put(
        generate_config("t"), first, generate_metadata(step=0), {"items": f"{2:08}"}
    )
    second = checkpoint_of(3)
    faults = Faults(api.saver.collections)
    faults.arm(Fault(0, "after"))
    try:
        with pytest.raises(AutoReconnect):
            await api.put(config, second, generate_metadata(step=1), {"items": f"{3:08}"})
    finally:
        faults.restore()
    (delta,) = await api.docs(BLOBS, {"version": f"{3:08}"})
    assert delta.get("base") == f"{2:08}" and delta["type"].endswith(ZLIB)
    cold = await not_compressing(api)
    stored = await cold.put(config, second, generate_metadata(step=1), {"items": f"{3:08}"})
    for reader in (api, cold, api.reopened()):
        found = await reader.get_tuple(stored)
        assert found is not None and found.checkpoint["channel_values"] == {"items": items}
    (doc,) = await api.docs(CHECKPOINTS, {"checkpoint_id": second["id"]})
    assert [v["version"] for v in doc["values"]] == [f"{2:08}", f"{3:08}"]
    await api.prune(["t"], strategy="keep_latest")
    found = await api.get_tuple(stored)
    assert found is not None and found.checkpoint["channel_values"] == {"items": items}
    await assert_no_orphans(api)


# Found in review, fixed: documents.write_requests: each special write's DeleteMany drops the
# parts whose vid is not its own; the same value written concurrently with and without
# compression has two vids, so the two deletes remove both attempts' parts and the write is left
# out of the checkpoint's pending writes, silently
async def test_the_same_special_write_twice_at_once_with_and_without_compression(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two instances make the same special write at once (a retry sent while the first
    attempt is still on its way), one compressing and one not, the value in parts. Their
    ordered bulk writes interleave request by request on the server: the parts of both,
    the head of each, the delete of each (applied here one request at a time, as a server
    interleaves two connections' batches)."""
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    config = await a_checkpoint(api)
    value = prose(11, 6 * CHUNK)
    key = config["configurable"]
    attempts = [
        write_requests(key, [(INTERRUPT, value)], "task", "", api.saver.serde, compress=c)
        for c in (True, False)
    ]
    packed, plain = (a.requests for a in attempts)
    assert len(packed) > 2 and len(plain) > 2  # parts, head, delete
    raw = api.raw(WRITES)
    order = [*packed[:-2], *plain[:-2], packed[-2], plain[-2], packed[-1], plain[-1]]
    for request in order:
        await maybe_await(raw.bulk_write([request], ordered=True))
    found = await api.get_tuple(config)
    assert found is not None and found.pending_writes == [("task", INTERRUPT, value)]
