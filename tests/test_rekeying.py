"""``rekey`` re-encrypts stored checkpoints, values, pending writes and store items under a
``KeyRing``'s current key: everything reads back as before with the old key gone, a value
in parts too; a run cut anywhere is resumed by running it again; a writer replacing a
value meanwhile wins and the run counts it; a missing key is named and nothing changes."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from pymongo.errors import AutoReconnect

from mongo_ckpt import MissingKeyError, keyring_serializer, payload
from mongo_ckpt.documents import typed, write_requests
from mongo_ckpt.layout import BLOBS, CHECKPOINT_KEY, CHECKPOINTS, WRITE_KEY, WRITES
from mongo_ckpt.rekeying import SAVER_PLACES, Place
from mongo_ckpt.schema import SCHEMA
from mongo_ckpt.store import MongoDBStore
from tests.backends import maybe_await, sync_client
from tests.fault_harness import CHUNK, fault_plan
from tests.faults import Faults, Interleave
from tests.graphs import chat_builder, thread
from tests.saver_support import Api, assert_no_orphans, put_chain

K1, K2 = b"1" * 32, b"2" * 16
OLD = {"k1": K1}
BOTH = {"k1": K1, "k2": K2}
NEW_KEYS = {"k2": K2}
MARKER = "rekey-marker-5be0"


def ring(keys: dict[str, bytes], current: str) -> Any:
    return keyring_serializer(keys, current)


async def seed(api: Api, turns: int = 2) -> Api:
    """A conversation under ``k1`` (checkpoints, values, writes), a checkpoint whose
    metadata is stored serialized, and a value in several parts."""
    old = api.reopened(serde=ring(OLD, "k1"))
    graph = old.compile(chat_builder())
    for n in range(turns):  # no turns: the calls of a rekey are the same in every run
        await old.invoke(graph, {"messages": [HumanMessage(f"{MARKER} {n}")]}, thread("t"))
    checkpoint = generate_checkpoint()
    checkpoint["channel_values"] = {"big": MARKER * 40, "small": MARKER}
    checkpoint["channel_versions"] = {"big": "1", "small": "1"}
    config = {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}
    versions = {"big": "1", "small": "1"}
    first = await old.put(config, checkpoint, {"tags": ("a", "b")}, versions)
    await old.put_writes(first, [("w", MARKER * 30), ("v", MARKER)], "task")
    key = {"$set": {"version_key": typed(old.saver.serde, b"a migration's key")}}
    marker = old.saver.collections[SCHEMA].update_one({"_id": "migration:x"}, key, upsert=True)
    await maybe_await(marker)
    return old


async def everything(api: Api) -> list[Any]:
    """Every checkpoint tuple of every thread, as the saver reads them."""
    return [t for thread_id in ("t", "u") for t in await api.list(thread(thread_id))]


async def stored(api: Api, logical: str) -> list[dict[str, Any]]:
    """The documents of the saver's collection ``logical`` (the schema collection too)."""
    cursor = api.saver.collections[logical].find({})
    return [doc async for doc in cursor] if api.is_async else list(cursor)


async def tags(api: Api) -> set[str]:
    found = set()
    for place in SAVER_PLACES:
        for doc in await stored(api, place.collection):
            value: Any = doc
            for name in place.type_field.split("."):
                value = value.get(name) if isinstance(value, dict) else None
            if value is not None:
                found.add(value.rpartition("+")[2])
    return found


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)


async def test_everything_reads_back_under_the_new_key_alone(api: Api) -> None:
    old = await seed(api)
    before = await everything(old)
    assert await tags(old) == {"aes:k1"}
    assert await old.count(CHECKPOINTS, {"metadata_typed": {"$exists": True}})
    assert await old.count(BLOBS, {"parts": {"$gt": 1}})
    assert await old.count(WRITES, {"parts": {"$gt": 1}})

    report = await api.reopened(serde=ring(BOTH, "k2")).rekey(batch_size=3)

    after = api.reopened(serde=ring(NEW_KEYS, "k2"))
    assert await everything(after) == before
    assert await tags(after) == {"aes:k2"}
    assert report.done and not +report.changed
    assert set(report.rekeyed) == {place.label for place in SAVER_PLACES}
    held = [
        [d for d in await stored(after, p.collection) if p.type_field.split(".")[0] in d]
        for p in SAVER_PLACES
    ]
    assert sum(report.rekeyed.values()) == sum(map(len, held))
    (marker,) = [d for d in await stored(after, SCHEMA) if "version_key" in d]
    migration_key = (marker["version_key"]["type"], marker["version_key"]["data"])
    assert ring(NEW_KEYS, "k2").loads_typed(migration_key) == b"a migration's key"
    await assert_no_orphans(after)
    assert MARKER.encode() not in await after.raw_bytes()
    again = await api.reopened(serde=ring(BOTH, "k2")).rekey()
    assert not +again.rekeyed and again.done


async def test_a_missing_key_is_named_and_nothing_changes(api: Api) -> None:
    old = await seed(api, turns=1)
    stored = await old.raw_bytes()
    with pytest.raises(MissingKeyError, match="key 'k1'"):
        await api.reopened(serde=ring(NEW_KEYS, "k2")).rekey()
    assert await old.raw_bytes() == stored


async def test_a_saver_without_a_key_ring_is_refused(api: Api) -> None:
    await seed(api, turns=1)
    with pytest.raises(TypeError, match=r"serde=mongo_ckpt.keyring_serializer\(keys, current\)"):
        await api.rekey()
    rotated = api.reopened(serde=ring(BOTH, "k2"))
    for bad in (0, 2.5, True, "3", None):
        with pytest.raises(ValueError, match="batch_size must be an int of at least 1"):
            await rotated.rekey(batch_size=bad)


async def test_a_run_cut_anywhere_is_resumed_by_running_it_again(api: Api) -> None:
    await seed(api, turns=0)
    rotated = api.reopened(serde=ring(BOTH, "k2"))
    await rotated.setup()
    faults = Faults(rotated.saver.collections)
    try:
        await rotated.rekey(batch_size=2)  # a clean run, to learn the calls
    finally:
        faults.restore()
    plan = fault_plan(faults)
    for fault in plan:
        await api.drop_database()
        await api.setup()
        old = await seed(api, turns=0)
        before = await everything(old)
        faults = Faults(rotated.saver.collections)
        faults.arm(fault)
        try:
            await rotated.rekey(batch_size=2)
        except AutoReconnect:
            pass
        finally:
            faults.restore()
        assert faults.fired, fault
        assert await everything(rotated) == before, fault  # every value whole, either key
        report = await rotated.rekey(batch_size=2)
        assert report.done, fault
        after = api.reopened(serde=ring(NEW_KEYS, "k2"))
        assert await everything(after) == before, fault
        await assert_no_orphans(after)
    assert len(plan) > 20


@pytest.mark.parametrize("writer", ["put again under k1", "delete the thread"])
async def test_a_writer_between_the_read_and_the_write_wins(saver: Any, writer: str) -> None:
    api = Api(saver)
    old = await seed(api, turns=1)
    rotated = api.reopened(serde=ring(BOTH, "k2"))
    await rotated.setup()
    before = await everything(old)
    first = {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}
    latest = await old.get_tuple(first)
    assert latest is not None

    def hook() -> None:
        if hook.done:  # type: ignore[attr-defined]
            return
        hook.done = True  # type: ignore[attr-defined]
        if writer == "delete the thread":
            old.saver.delete_thread("u")
        else:  # the same put again, by an instance whose current key is still k1
            old.saver.put(first, latest.checkpoint, latest.metadata, {"big": "1", "small": "1"})

    hook.done = False  # type: ignore[attr-defined]
    interleave = Interleave(rotated.saver.collections, hook, (CHECKPOINTS, "bulk_write"))
    try:
        report = rotated.saver.rekey(batch_size=1000)
    finally:
        interleave.restore()
    assert report.changed[f"{CHECKPOINTS}.checkpoint"] == 1, report
    if writer == "delete the thread":
        assert report.done and not await api.count(BLOBS, {"thread_id": "u"})
    else:
        assert report.left[f"{CHECKPOINTS}.checkpoint"] == 1
        assert (await rotated.rekey()).done
    gone = "u" if writer == "delete the thread" else None
    kept = [t for t in before if t.config["configurable"]["thread_id"] != gone]
    assert await everything(api.reopened(serde=ring(NEW_KEYS, "k2"))) == kept
    await assert_no_orphans(rotated)


def rekey_beside(saver: Any, only: tuple[str, str], hook: Any) -> Any:
    """A sync ``rekey`` to ``k2`` with ``hook()`` run once, before its first ``only`` call."""
    rotated = Api(type(saver)(saver.client, saver.db.name, serde=ring(BOTH, "k2")))
    rotated.saver.setup()
    fired: list[bool] = []

    def once() -> None:
        if not fired:
            fired.append(True)
            hook()

    interleave = Interleave(rotated.saver.collections, once, only)
    try:
        return rotated.saver.rekey(batch_size=1000)
    finally:
        interleave.restore()
        assert fired


async def test_a_retried_write_between_the_new_parts_and_the_swap_leaves_them(
    saver: Any,
) -> None:
    old = await seed(Api(saver), turns=0)
    before = await everything(old)
    stored = next(old.saver.list(thread("u"))).config
    retry = lambda: old.saver.put_writes(stored, [("w", MARKER * 30)], "task")  # noqa: E731
    report = rekey_beside(saver, (WRITES, "update_one"), retry)
    assert report.done and report.rekeyed["writes.value"] == 2
    after = Api(type(saver)(saver.client, saver.db.name, serde=ring(NEW_KEYS, "k2")))
    assert await everything(after) == before
    await assert_no_orphans(after)


async def test_a_special_writes_clean_up_between_the_new_parts_and_the_swap_leaves_them(
    saver: Any,
) -> None:
    """A special channel's overwrite removes the parts its new head does not name, in the
    statement after that head: here with ``rekey`` having read that head."""
    old = Api(saver).reopened(serde=ring(OLD, "k1"))
    (config,) = await put_chain(old, "s", 1)
    old.saver.put_writes(config, [("__error__", ValueError(MARKER * 30))], "task")
    before = await everything_of(old, "s")
    writes = saver.collections[WRITES]

    def clean_up() -> None:  # that overwrite's last statement, for the head rekey read
        ((_, value),) = payload.join(writes.find({"thread_id": "s"}), WRITE_KEY).values()
        key = {k: config["configurable"][k] for k in CHECKPOINT_KEY}
        error = ValueError(MARKER * 30)
        overwrite = write_requests(key, [("__error__", error)], "task", "", _Fixed(*value))
        writes.bulk_write(overwrite.requests[-1:])

    report = rekey_beside(saver, (WRITES, "update_one"), clean_up)
    assert report.done and report.rekeyed["writes.value"] == 1
    after = Api(type(saver)(saver.client, saver.db.name, serde=ring(NEW_KEYS, "k2")))
    assert await everything_of(after, "s") == before
    await assert_no_orphans(after)


async def test_two_runs_at_once_leave_every_value_whole(saver: Any) -> None:
    old = await seed(Api(saver), turns=0)
    before = await everything(old)
    other = type(saver)(saver.client, saver.db.name, serde=ring(BOTH, "k2"))
    report = rekey_beside(saver, (BLOBS, "update_one"), other.rekey)
    assert report.done
    after = Api(type(saver)(saver.client, saver.db.name, serde=ring(NEW_KEYS, "k2")))
    assert await everything(after) == before
    await assert_no_orphans(after)


async def test_a_value_that_does_not_decrypt_is_named(api: Api) -> None:
    old = await seed(api, turns=0)
    (doc,) = await stored(old, CHECKPOINTS)
    altered = bytes(doc["checkpoint"]["data"])[:-1] + b"?"
    update = {"$set": {"checkpoint.data": altered}}
    await maybe_await(api.saver.collections[CHECKPOINTS].update_one({"_id": doc["_id"]}, update))
    named = re.escape(f"checkpoints.checkpoint document {doc['_id']!r} does not decrypt")
    with pytest.raises(ValueError, match=named):
        await api.reopened(serde=ring(BOTH, "k2")).rekey()


class _Fixed:
    """A serializer that gives one stored ``(type, data)`` whatever it is given."""

    def __init__(self, type_: str, data: bytes) -> None:
        self.typed = (type_, data)

    def dumps_typed(self, value: Any) -> tuple[str, bytes]:
        return self.typed


async def everything_of(api: Api, thread_id: str) -> list[Any]:
    return await api.list(thread(thread_id))


@pytest.mark.parametrize("backend", ["mock", "wire"])
def test_store_items_read_back_under_the_new_key_alone(backend: str) -> None:
    client = sync_client(backend)
    db = f"t_rekey_{uuid.uuid4().hex[:8]}"
    try:
        old = MongoDBStore(client, db, serde=ring(OLD, "k1"))
        for n in range(7):
            old.put(("users", str(n % 3)), f"k{n}", {"text": MARKER, "n": n})
        before = sorted((i.namespace, i.key, i.value) for i in old.search(("users",), limit=20))
        report = MongoDBStore(client, db, serde=ring(BOTH, "k2")).rekey(batch_size=2)
        assert report.rekeyed == {Place("store", "value_typed.type", "", "item").label: 7}
        assert report.done
        new = MongoDBStore(client, db, serde=ring(NEW_KEYS, "k2"))
        after = sorted((i.namespace, i.key, i.value) for i in new.search(("users",), limit=20))
        assert after == before
        types = {d["value_typed"]["type"] for d in client[db]["store"].find()}
        assert types == {"msgpack+aes:k2"}
    finally:
        client.drop_database(db)
        client.close()
