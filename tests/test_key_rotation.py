"""Encryption keys rotate: a ``KeyRing`` encrypts new values with its current key, reads
values of every key it holds, names the key each value was written with in its type tag,
and refuses, naming the key, a value whose key it lacks; a single-key reader refuses the
new tags instead of misreading them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import KeyRing, MissingKeyError, MongoDBSaver, keyring_serializer
from mongo_ckpt.cache import MongoDBCache
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client
from tests.cli_support import invoke
from tests.graphs import chat_builder, contents, thread
from tests.saver_support import Api

K1, K2 = b"1" * 32, b"2" * 16
MARKER = "rotation-marker-93a1"


async def say(api: Api, graph: Any, text: str) -> None:
    await api.invoke(graph, {"messages": [HumanMessage(f"{MARKER} {text}")]}, thread("t"))


async def tags(api: Api) -> set[str]:
    docs = [*await api.docs(BLOBS), *await api.docs(CHECKPOINTS)]
    found = {d["type"] for d in docs if "type" in d}
    return found | {d["checkpoint"]["type"] for d in docs if "checkpoint" in d}


async def test_a_conversation_goes_on_under_a_new_key(api: Api) -> None:
    first = api.reopened(serde=keyring_serializer({"k1": K1}, "k1"))
    await say(first, first.compile(chat_builder()), "one")
    assert {tag.split("+")[-1] for tag in await tags(first)} == {"aes:k1"}

    rotated = api.reopened(serde=keyring_serializer({"k1": K1, "k2": K2}, "k2"))
    graph = rotated.compile(chat_builder())
    await say(rotated, graph, "two")

    state = await rotated.state(graph, thread("t"))
    assert [text for kind, text in contents(state.values["messages"]) if kind == "human"] == [
        f"{MARKER} one",
        f"{MARKER} two",
    ]
    assert {tag.split("+")[-1] for tag in await tags(rotated)} == {"aes:k1", "aes:k2"}
    assert MARKER.encode() not in await rotated.raw_bytes()


async def test_a_value_whose_key_is_missing_names_the_key(api: Api) -> None:
    first = api.reopened(serde=keyring_serializer({"k1": K1}, "k1"))
    await say(first, first.compile(chat_builder()), "one")
    without = api.reopened(serde=keyring_serializer({"k2": K2}, "k2"))
    with pytest.raises(MissingKeyError, match="key 'k1'") as raised:
        await without.get_tuple(thread("t"))
    assert raised.value.key_id == "k1"


async def test_a_single_key_reader_refuses_a_key_ids_values(api: Api) -> None:
    first = api.reopened(serde=keyring_serializer({"k1": K1}, "k1"))
    await say(first, first.compile(chat_builder()), "one")
    single = api.reopened(serde=EncryptedSerializer.from_pycryptodome_aes(key=K1))
    with pytest.raises(AssertionError, match="Unsupported cipher: aes:k1"):
        await single.get_tuple(thread("t"))


async def test_values_of_a_key_without_an_id_read_as_legacy(api: Api) -> None:
    old = api.reopened(serde=EncryptedSerializer.from_pycryptodome_aes(key=K1))
    await say(old, old.compile(chat_builder()), "one")
    unnamed = api.reopened(serde=keyring_serializer({"old": K1, "new": K2}, "new"))
    with pytest.raises(MissingKeyError, match="legacy="):
        await unnamed.get_tuple(thread("t"))
    legacy = api.reopened(serde=keyring_serializer({"old": K1, "new": K2}, "new", legacy="old"))
    graph = legacy.compile(chat_builder())
    await say(legacy, graph, "two")
    assert len((await legacy.state(graph, thread("t"))).values["messages"]) == 4


@pytest.mark.parametrize(
    ("keys", "current", "legacy", "message"),
    [
        ({"k 1": K1}, "k 1", None, "key id 'k 1'"),
        ({"": K1}, "", None, "key id ''"),
        ({"k1": b"short"}, "k1", None, "key 'k1' must be 16, 24 or 32 bytes"),
        ({"k1": "0" * 32}, "k1", None, "key 'k1' must be bytes, got str"),
        ({"k1": K1}, "k2", None, "current='k2' is not one of the keys' ids"),
        ({"k1": K1}, "k1", "k0", "legacy='k0' is not one of the keys' ids"),
    ],
)
def test_a_bad_key_ring_is_refused(keys: Any, current: str, legacy: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KeyRing(keys, current, legacy=legacy)


@pytest.mark.parametrize("backend", ["mock", "wire"])
def test_the_store_reads_old_values_and_writes_new_ones_under_the_current_key(
    backend: str,
) -> None:
    client = sync_client(backend)
    db = f"t_keys_{uuid.uuid4().hex[:8]}"
    try:
        first = MongoDBStore(client, db, serde=keyring_serializer({"k1": K1}, "k1"))
        first.put(("users", "ada"), "old", {"text": MARKER})
        rotated = MongoDBStore(client, db, serde=keyring_serializer({"k1": K1, "k2": K2}, "k2"))
        rotated.put(("users", "ada"), "new", {"text": MARKER})
        found = {item.key: item.value for item in rotated.search(("users",))}
        assert found == {"old": {"text": MARKER}, "new": {"text": MARKER}}
        types = {d["key"]: d["value_typed"]["type"] for d in client[db]["store"].find()}
        assert types == {"old": "msgpack+aes:k1", "new": "msgpack+aes:k2"}
        with pytest.raises(MissingKeyError, match="key 'k1'"):
            MongoDBStore(client, db, serde=keyring_serializer({"k2": K2}, "k2")).get(
                ("users", "ada"), "old"
            )
    finally:
        client.drop_database(db)
        client.close()


@pytest.mark.parametrize("env", [{}, {"LANGGRAPH_AES_KEY": K1.decode()}], ids=["no key", "a key"])
def test_the_command_line_says_the_data_needs_the_ring(env: dict[str, str]) -> None:
    client = sync_client("mock")
    db = f"t_keys_{uuid.uuid4().hex[:8]}"
    saver = MongoDBSaver(client, db, serde=keyring_serializer({"k1": K1}, "k1"))
    chat_builder().compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage(MARKER)]}, thread("t")
    )
    result = invoke(client, "show", "t", "--db", db, env=env)
    assert result.exit_code == 1 and "set MONGO_CKPT_KEYS" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_key_may_be_any_bytes_like() -> None:
    ring = KeyRing({"a": bytearray(K1), "b": memoryview(K2)}, "a")
    assert ring.decrypt(*ring.encrypt(b"x")) == b"x"


def test_a_cache_entry_of_a_dropped_key_is_a_miss() -> None:
    """The node runs again, as after the entry expired, instead of the graph failing."""
    client = sync_client("mock")
    db = f"t_keys_{uuid.uuid4().hex[:8]}"
    pairs = {(("node",), "a"): ({"n": 1}, 600)}
    MongoDBCache(client, db, serde=keyring_serializer({"k1": K1}, "k1")).set(pairs)
    rotated = MongoDBCache(client, db, serde=keyring_serializer({"k1": K1, "k2": K2}, "k2"))
    assert rotated.get(list(pairs)) == {(("node",), "a"): {"n": 1}}
    dropped = MongoDBCache(client, db, serde=keyring_serializer({"k2": K2}, "k2"))
    assert dropped.get(list(pairs)) == {}
    dropped.set(pairs)
    assert dropped.get(list(pairs)) == {(("node",), "a"): {"n": 1}}
