"""``keyring_serializer(..., bind=True)`` binds each ciphertext to its place: a value,
write, checkpoint or store item reads back where it was written, a ciphertext moved to
another thread, version, checkpoint or key does not decrypt there (named as such),
``copy_thread`` encrypts the copy again at its new place (values in parts too), and
``rekey`` binds values written unbound and keeps bound ones bound."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from mongo_ckpt import keyring_serializer, payload
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.store import MongoDBStore
from tests.backends import maybe_await, sync_client
from tests.fault_harness import CHUNK
from tests.graphs import chat_builder, thread
from tests.saver_support import Api, assert_no_orphans

K1, K2 = b"1" * 32, b"2" * 16
MARKER = "binding-marker-c41e"
MOVED = "does not decrypt here"


def ring(current: str = "k1", bind: bool = True, **keys: bytes) -> Any:
    return keyring_serializer(keys or {"k1": K1}, current, bind=bind)


async def converse(api: Api, *threads: str) -> None:
    graph = api.compile(chat_builder())
    for thread_id in threads:
        for n in range(2):
            message = HumanMessage(f"{MARKER} {thread_id} {n}")
            await api.invoke(graph, {"messages": [message]}, thread(thread_id))


async def tuples(api: Api, thread_id: str) -> list[Any]:
    return [(t.checkpoint, t.metadata, t.pending_writes) for t in await api.list(thread(thread_id))]


async def tags(api: Api) -> set[str]:
    found = {d["type"] for d in await api.docs(BLOBS) if "type" in d}
    found |= {d["checkpoint"]["type"] for d in await api.docs(CHECKPOINTS)}
    return {tag.rpartition("+")[2] for tag in found}


async def test_a_bound_value_reads_back_where_it_was_written_only(api: Api) -> None:
    bound = api.reopened(serde=ring())
    await converse(bound, "t", "u")
    assert await tags(bound) == {"aesb:k1"}
    assert [m.content for m in (await tuples(bound, "t"))[0][0]["channel_values"]["messages"]]
    # Thread u's latest messages get thread t's ciphertext of its latest ones.
    t_doc = (await bound.docs(BLOBS, {"thread_id": "t", "channel": "messages"}))[-1]
    u_doc = (await bound.docs(BLOBS, {"thread_id": "u", "channel": "messages"}))[-1]
    moved = {"$set": {k: t_doc[k] for k in ("type", "data", "vid")}}
    await maybe_await(bound.raw(BLOBS).update_one({"_id": u_doc["_id"]}, moved))
    with pytest.raises(ValueError, match=MOVED):
        await bound.list(thread("u"))
    # A checkpoint's serialized fields moved to another checkpoint of the same thread.
    first, second = (await bound.docs(CHECKPOINTS, {"thread_id": "t"}))[:2]
    swapped = {"$set": {"checkpoint": first["checkpoint"]}}
    await maybe_await(bound.raw(CHECKPOINTS).update_one({"_id": second["_id"]}, swapped))
    with pytest.raises(ValueError, match=MOVED):
        await bound.list(thread("t"))


async def test_copy_thread_encrypts_the_copy_again_at_its_place(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)  # every value in several parts
    bound = api.reopened(serde=ring())
    await converse(bound, "t")
    values, versions = {"big": MARKER * 30}, {"big": "1"}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "sub"}}
    stored = await bound.put(config, checkpoint, {"tags": ("a",)}, {"big": "1"})
    await bound.put_writes(stored, [("w", MARKER * 20), ("__error__", MARKER * 20)], "task")
    await bound.copy_thread("t", "c")
    for ns in ("", "sub"):
        source = await bound.list(thread("t", checkpoint_ns=ns))
        copy = await bound.list(thread("c", checkpoint_ns=ns))
        assert source and [(t.checkpoint, t.metadata, t.pending_writes) for t in copy] == [
            (t.checkpoint, t.metadata, t.pending_writes) for t in source
        ]
    await assert_no_orphans(bound)
    unbound = api.reopened()  # a saver without the ring cannot copy bound values
    with pytest.raises(ValueError, match="bound to their place"):
        await unbound.copy_thread("t", "d")
    assert not await api.count(CHECKPOINTS, {"thread_id": "d"})


async def test_rekey_binds_unbound_values_and_keeps_bound_ones(api: Api) -> None:
    await converse(api.reopened(serde=ring(bind=False)), "t")
    before = await tuples(api.reopened(serde=ring(bind=False)), "t")
    binding = api.reopened(serde=ring("k2", k1=K1, k2=K2))
    assert (await binding.rekey()).done
    assert await tags(binding) == {"aesb:k2"}
    assert await tuples(api.reopened(serde=ring("k2", k2=K2)), "t") == before
    plain_ring = api.reopened(serde=ring("k2", bind=False, k2=K2))
    report = await plain_ring.rekey()
    assert report.done and not +report.rekeyed  # bound values stay bound
    assert await tags(plain_ring) == {"aesb:k2"}


@pytest.mark.parametrize("backend", ["mock", "wire"])
def test_a_store_item_moved_to_another_key_does_not_decrypt(backend: str) -> None:
    client = sync_client(backend)
    db = f"t_bind_{uuid.uuid4().hex[:8]}"
    try:
        store = MongoDBStore(client, db, serde=ring())
        store.put(("users",), "ada", {"text": MARKER})
        store.put(("users",), "bob", {"text": "other"})
        assert store.get(("users",), "ada").value == {"text": MARKER}
        items = client[db]["store"]
        ada = items.find_one({"key": "ada"})
        items.update_one({"key": "bob"}, {"$set": {"value_typed": ada["value_typed"]}})
        with pytest.raises(ValueError, match=MOVED):
            store.get(("users",), "bob")
    finally:
        client.drop_database(db)
        client.close()
