"""``mongo-ckpt rekey`` re-encrypts a database's checkpoints, values, writes and store items
under the current key of the ring in ``MONGO_CKPT_KEYS`` (``LANGGRAPH_AES_KEY`` too, as the
key of values without a key id); ``--dry-run`` counts; a bad or missing ring is a usage
error, a missing key is named, and neither changes anything; the other commands read the
data with the ring."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import bson
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import MongoDBSaver, keyring_serializer
from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client
from tests.cli_support import invoke
from tests.graphs import chat_builder, thread

K1, K2 = b"1" * 32, b"2" * 16
MARKER = "cli-rekey-marker-7f3c"


def keys(**named: bytes) -> str:
    return ",".join(f"{key_id}:{base64.b64encode(key).decode()}" for key_id, key in named.items())


@pytest.fixture(params=["mock", "wire"])
def written(request: Any) -> Iterator[tuple[Any, str]]:
    """A conversation and three store items, all under key ``k1``."""
    client = sync_client(request.param)
    db = f"t_cli_{uuid.uuid4().hex[:8]}"
    serde = keyring_serializer({"k1": K1}, "k1")
    try:
        graph = chat_builder().compile(checkpointer=MongoDBSaver(client, db, serde=serde))
        for n in range(2):
            graph.invoke({"messages": [HumanMessage(f"{MARKER} {n}")]}, thread("t"))
        store = MongoDBStore(client, db, serde=serde)
        for n in range(3):
            store.put(("users",), str(n), {"text": MARKER})
        yield client, db
    finally:
        client.drop_database(db)
        client.close()


def stored(client: Any, db: str) -> bytes:
    names = sorted(client[db].list_collection_names())
    return b"".join(bson.encode(d) for name in names for d in client[db][name].find())


def rekey(client: Any, db: str, env: dict[str, str], *args: str) -> Any:
    return invoke(client, "rekey", "--db", db, "--store", "store", "--json", *args, env=env)


def test_rekey_re_encrypts_everything_and_the_old_key_can_go(written: tuple[Any, str]) -> None:
    client, db = written
    ring = {"MONGO_CKPT_KEYS": keys(k1=K1, k2=K2)}
    untouched = stored(client, db)
    dry = rekey(client, db, ring, "--dry-run")
    assert dry.exit_code == 1, dry.output  # values are under another key
    counted = json.loads(dry.output)
    assert counted["current_key"] == "k2" and counted["status"] == "error"
    assert counted["left"]["store.value_typed"] == 3 and counted["left"]["checkpoints.checkpoint"]
    assert stored(client, db) == untouched

    done = rekey(client, db, ring, "--batch-size", "2")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["rekeyed"] == {k: v for k, v in counted["left"].items() if v}
    assert not any(report["left"].values()) and not any(report["changed"].values())

    alone = {"MONGO_CKPT_KEYS": keys(k2=K2)}
    shown = invoke(client, "show", "t", "--db", db, env=alone)
    assert shown.exit_code == 0 and f"{MARKER} 1" in shown.output, shown.output
    items = MongoDBStore(client, db, serde=keyring_serializer({"k2": K2}, "k2")).search(("users",))
    assert [item.value for item in items] == [{"text": MARKER}] * 3
    again = rekey(client, db, ring)
    assert again.exit_code == 0 and not any(json.loads(again.output)["rekeyed"].values())
    bound = rekey(client, db, {**ring, "MONGO_CKPT_BIND": "true"})  # binds them at their place
    assert bound.exit_code == 0 and json.loads(bound.output)["rekeyed"] == report["rekeyed"]
    shown = invoke(client, "show", "t", "--db", db, env={**alone, "MONGO_CKPT_BIND": "strict"})
    assert shown.exit_code == 0 and f"{MARKER} 1" in shown.output, shown.output


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "rekey needs the key ring: set MONGO_CKPT_KEYS"),
        ({"MONGO_CKPT_KEYS": "k1=abc"}, "'k1=abc' is not <key id>:<base64 key>"),
        ({"MONGO_CKPT_KEYS": "k1:not base64!"}, "'k1:not base64!' is not <key id>:<base64 key>"),
        ({"MONGO_CKPT_KEYS": keys(k1=b"short")}, "key 'k1' must be 16, 24 or 32 bytes"),
        (
            {"MONGO_CKPT_KEYS": keys(k1=K1), "MONGO_CKPT_CURRENT_KEY": "k9"},
            "current='k9' is not one of the keys' ids",
        ),
        ({"MONGO_CKPT_KEYS": keys(k1=K1), "MONGO_CKPT_BIND": "yes"}, "true, false or strict"),
    ],
)
def test_a_bad_or_missing_ring_is_a_usage_error(
    written: tuple[Any, str], env: dict[str, str], message: str
) -> None:
    client, db = written
    untouched = stored(client, db)
    result = invoke(client, "rekey", "--db", db, env=env)
    assert result.exit_code == 2 and message in result.output, result.output
    assert stored(client, db) == untouched


def test_a_missing_key_is_named_and_nothing_changes(written: tuple[Any, str]) -> None:
    client, db = written
    untouched = stored(client, db)
    result = rekey(client, db, {"MONGO_CKPT_KEYS": keys(k2=K2)})
    assert result.exit_code == 1 and "key 'k1'" in result.output, result.output
    assert "Traceback" not in result.output
    assert stored(client, db) == untouched


def test_values_of_langgraph_aes_key_move_to_the_ring(written: tuple[Any, str]) -> None:
    client, db = written
    single = EncryptedSerializer.from_pycryptodome_aes(key=K1)
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, db, serde=single))
    graph.invoke({"messages": [HumanMessage(MARKER)]}, thread("legacy"))
    env = {"MONGO_CKPT_KEYS": keys(k1=K1, k2=K2), "LANGGRAPH_AES_KEY": K1.decode()}
    done = rekey(client, db, env)
    assert done.exit_code == 0, done.output
    shown = invoke(client, "show", "legacy", "--db", db, env={"MONGO_CKPT_KEYS": keys(k2=K2)})
    assert shown.exit_code == 0 and MARKER in shown.output, shown.output
