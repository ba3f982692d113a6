"""``rekey`` re-encrypts stored checkpoints, values, pending writes and store items under a
``KeyRing``'s current key: everything reads back as before with the old key gone, a value
in parts too; a run cut anywhere is resumed by running it again; a writer replacing a
value meanwhile wins and the run counts it; a missing key is named and nothing changes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from pymongo.errors import AutoReconnect

from mongo_ckpt import MissingKeyError, keyring_serializer, payload
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.rekeying import SAVER_PLACES, Place
from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client
from tests.fault_harness import CHUNK, fault_plan
from tests.faults import Faults, Interleave
from tests.graphs import chat_builder, thread
from tests.saver_support import Api, assert_no_orphans

K1, K2 = b"1" * 32, b"2" * 16
OLD = {"k1": K1}
BOTH = {"k1": K1, "k2": K2}
NEW = {"k2": K2}
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
    stored = await old.put(config, checkpoint, {"tags": ("a", "b")}, versions)
    await old.put_writes(stored, [("w", MARKER * 30), ("v", MARKER)], "task")
    return old


async def everything(api: Api) -> list[Any]:
    """Every checkpoint tuple of every thread, as the saver reads them."""
    return [t for thread_id in ("t", "u") for t in await api.list(thread(thread_id))]


async def tags(api: Api) -> set[str]:
    found = set()
    for place in SAVER_PLACES:
        for doc in await api.docs(place.collection):
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

    after = api.reopened(serde=ring(NEW, "k2"))
    assert await everything(after) == before
    assert await tags(after) == {"aes:k2"}
    assert report.done and not +report.changed
    assert set(report.rekeyed) == {place.label for place in SAVER_PLACES}
    assert sum(report.rekeyed.values()) == sum(
        [await after.count(p.collection, {p.type_field: {"$exists": True}}) for p in SAVER_PLACES]
    )
    await assert_no_orphans(after)
    assert MARKER.encode() not in await after.raw_bytes()
    again = await api.reopened(serde=ring(BOTH, "k2")).rekey()
    assert not +again.rekeyed and again.done


async def test_a_missing_key_is_named_and_nothing_changes(api: Api) -> None:
    old = await seed(api, turns=1)
    stored = await old.raw_bytes()
    with pytest.raises(MissingKeyError, match="key 'k1'"):
        await api.reopened(serde=ring(NEW, "k2")).rekey()
    assert await old.raw_bytes() == stored


async def test_a_saver_without_a_key_ring_is_refused(api: Api) -> None:
    await seed(api, turns=1)
    with pytest.raises(TypeError, match=r"serde=mongo_ckpt.keyring_serializer\(keys, current\)"):
        await api.rekey()
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        await api.reopened(serde=ring(BOTH, "k2")).rekey(batch_size=0)


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
        after = api.reopened(serde=ring(NEW, "k2"))
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
    interleave = Interleave(rotated.saver.collections, hook)
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
    assert await everything(api.reopened(serde=ring(NEW, "k2"))) == kept
    await assert_no_orphans(rotated)


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
        assert report.rekeyed == {Place("store", "value_typed.type", "").label: 7}
        assert report.done
        new = MongoDBStore(client, db, serde=ring(NEW, "k2"))
        after = sorted((i.namespace, i.key, i.value) for i in new.search(("users",), limit=20))
        assert after == before
        types = {d["value_typed"]["type"] for d in client[db]["store"].find()}
        assert types == {"msgpack+aes:k2"}
    finally:
        client.drop_database(db)
        client.close()
