"""Tampering with bound data is refused, by name: a ciphertext planted at another place
(unbound ones too where the ring is strict), a list delta's base or kept prefix changed, a
pending write renamed to another channel, a checkpoint pointed at another version of a
value; the command line says so without a traceback, and a copy the saver cannot
re-encrypt is refused before it writes anything."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

from mongo_ckpt import BoundValueError, MongoDBSaver, copying, keyring_serializer
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import maybe_await, sync_client
from tests.cli_support import invoke
from tests.graphs import chat_builder, thread
from tests.saver_support import Api

K1 = b"1" * 32
MARKER = "bind-tamper-marker-0b7"
MOVED = "does not decrypt here"


def ring(bind: bool | str = True) -> Any:
    return keyring_serializer({"k1": K1}, "k1", bind=bind)


async def converse(api: Api, thread_id: str, turns: int = 2) -> None:
    graph = api.compile(chat_builder())
    for n in range(turns):
        message = HumanMessage(f"{MARKER} {thread_id} {n}")
        await api.invoke(graph, {"messages": [message]}, thread(thread_id))


def contents(tuples: list[Any]) -> list[str]:
    return [m.content for m in tuples[0].checkpoint["channel_values"]["messages"]]


async def test_a_strict_ring_refuses_an_unbound_ciphertext_planted_at_a_place(api: Api) -> None:
    """A ring that binds still reads unbound values (written before it bound); one with
    ``bind="strict"`` refuses them, so an unbound ciphertext of another thread planted
    here does not read as this thread's data."""
    await converse(api.reopened(serde=ring(bind=False)), "u")
    bound = api.reopened(serde=ring())
    await converse(bound, "t")
    t_doc = (await bound.docs(BLOBS, {"thread_id": "t", "channel": "messages"}))[-1]
    u_doc = (await bound.docs(BLOBS, {"thread_id": "u", "channel": "messages"}))[-1]
    assert t_doc["type"].endswith("+aesb:k1") and u_doc["type"].endswith("+aes:k1")
    moved = {"$set": {k: u_doc[k] for k in ("type", "data", "vid")}}
    await maybe_await(bound.raw(BLOBS).update_one({"_id": t_doc["_id"]}, moved))
    planted = contents(await bound.list(thread("t")))  # the documented limit
    assert any(f"{MARKER} u 1" in message for message in planted)
    strict = api.reopened(serde=ring(bind="strict"))
    with pytest.raises(BoundValueError, match="reads only bound ones"):
        await strict.list(thread("t"))


async def test_a_list_deltas_kept_prefix_is_bound(api: Api) -> None:
    bound = api.reopened(serde=ring())
    await converse(bound, "t", turns=3)
    before = contents(await bound.list(thread("t")))
    heads = [d for d in await bound.docs(BLOBS, {"thread_id": "t", "channel": "messages"})
             if "keep" in d]
    assert heads, "messages are stored as list deltas"
    latest = max(heads, key=lambda d: d["keep"])
    assert len(before) == 6
    await maybe_await(bound.raw(BLOBS).update_one({"_id": latest["_id"]}, {"$set": {"keep": 0}}))
    with pytest.raises(BoundValueError, match=MOVED):
        await bound.list(thread("t"))


def _keys(**named: bytes) -> str:
    return ",".join(f"{k}:{base64.b64encode(v).decode()}" for k, v in named.items())


@pytest.fixture(params=["mock"])
def written(request: Any) -> Any:
    client = sync_client(request.param)
    db = f"t_bindcli_{uuid.uuid4().hex[:8]}"
    try:
        saver = MongoDBSaver(client, db, serde=ring())
        graph = chat_builder().compile(checkpointer=saver)
        for n in range(2):
            graph.invoke({"messages": [HumanMessage(f"{MARKER} {n}")]}, thread("t"))
        yield client, db
    finally:
        client.drop_database(db)
        client.close()


def _clean(result: Any) -> None:
    """A failed command ends with a message (SystemExit), not an uncaught exception."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)


def test_cli_copy_without_the_ring_fails_cleanly(written: Any) -> None:
    client, db = written
    _clean(invoke(client, "copy", "t", "d", "--db", db, "--yes", env={}))


def test_cli_copy_with_aes_key_only_fails_cleanly(written: Any) -> None:
    client, db = written
    env = {"LANGGRAPH_AES_KEY": K1.decode()}
    _clean(invoke(client, "copy", "t", "d", "--db", db, "--yes", env=env))


def test_cli_show_with_aes_key_on_bound_values_fails_cleanly(written: Any) -> None:
    client, db = written
    _clean(invoke(client, "show", "t", "--db", db, env={"LANGGRAPH_AES_KEY": K1.decode()}))


def test_cli_show_of_a_moved_value_fails_cleanly(written: Any) -> None:
    client, db = written
    first, second = list(client[db][CHECKPOINTS].find({"thread_id": "t"}))[:2]
    client[db][CHECKPOINTS].update_one(
        {"_id": second["_id"]}, {"$set": {"checkpoint": first["checkpoint"]}}
    )
    env = {"MONGO_CKPT_KEYS": _keys(k1=K1)}
    _clean(invoke(client, "history", "t", "--db", db, env=env))


async def test_a_refused_copy_leaves_nothing_on_the_target(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread written unbound, then bound, copied by a saver without the ring."""
    monkeypatch.setattr(copying, "COPY_BATCH", 1)
    await converse(api.reopened(serde=ring(bind=False)), "t")
    await converse(api.reopened(serde=ring()), "t")
    unbound = api.reopened()
    with pytest.raises(BoundValueError, match="bound to their place"):
        await unbound.copy_thread("t", "d")
    for logical in (BLOBS, WRITES, CHECKPOINTS):
        assert not await api.docs(logical, {"thread_id": "d"})


async def test_a_pending_writes_channel_is_bound(api: Api) -> None:
    bound = api.reopened(serde=ring())
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = await bound.put(config, generate_checkpoint(), {}, {})
    await bound.put_writes(stored, [("approved", False)], "task")
    (doc,) = await bound.docs(WRITES, {"thread_id": "t"})
    relabel = {"$set": {"channel": "rejected"}}
    await maybe_await(bound.raw(WRITES).update_one({"_id": doc["_id"]}, relabel))
    with pytest.raises(BoundValueError, match=MOVED):
        await bound.list(thread("t"))


async def test_a_checkpoint_pointed_at_another_version_is_refused(api: Api) -> None:
    bound = api.reopened(serde=ring())
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for n, version in ((1, "1"), (2, "2")):
        cp = generate_checkpoint(channel_values={"x": f"value {n}"},
                                 channel_versions={"x": version})
        config = await bound.put(config, cp, {}, {"x": version})
    latest = (await bound.docs(CHECKPOINTS, {"thread_id": "t"}))[-1]
    entries = [{**e, "version": "1"} if e["channel"] == "x" else e for e in latest["values"]]
    await maybe_await(bound.raw(CHECKPOINTS).update_one(
        {"_id": latest["_id"]}, {"$set": {"values": entries}}))
    with pytest.raises(BoundValueError, match="its references were altered"):
        await bound.list(thread("t"))



async def test_a_strict_rings_rekey_binds_what_was_written_unbound(api: Api) -> None:
    await converse(api.reopened(serde=ring(bind=False)), "t")
    before = contents(await api.reopened(serde=ring()).list(thread("t")))
    strict = api.reopened(serde=ring(bind="strict"))
    assert (await strict.rekey()).done
    assert contents(await strict.list(thread("t"))) == before


async def test_a_copy_without_the_ring_is_refused_before_a_bound_write_too(api: Api) -> None:
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = generate_checkpoint(channel_values={"x": "secret"}, channel_versions={"x": "1"})
    stored = await api.reopened(serde=ring(bind=False)).put(config, checkpoint, {}, {"x": "1"})
    await api.reopened(serde=ring()).put_writes(stored, [("x", "bound write")], "task")
    with pytest.raises(BoundValueError, match="bound to their place"):
        await api.reopened().copy_thread("t", "d")
    for logical in (BLOBS, WRITES, CHECKPOINTS):
        assert not await api.docs(logical, {"thread_id": "d"})


def test_rekey_of_a_moved_bound_value_ends_without_a_traceback(written: Any) -> None:
    client, db = written
    first, second = list(client[db][CHECKPOINTS].find({"thread_id": "t"}))[:2]
    moved = {"$set": {"checkpoint": first["checkpoint"]}}
    client[db][CHECKPOINTS].update_one({"_id": second["_id"]}, moved)
    env = {"MONGO_CKPT_KEYS": _keys(k1=K1, k2=b"2" * 16), "MONGO_CKPT_BIND": "true"}
    result = invoke(client, "rekey", "--db", db, env=env)
    _clean(result)
    assert MOVED in result.output
