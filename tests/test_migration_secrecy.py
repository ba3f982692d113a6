"""A migration of encrypted official data stores nothing a reader without the key can
test a guess against: no plaintext, and no unkeyed digest of a plaintext value, in any
byte of any document it writes (the progress marker included)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

import bson
import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.migration import Source, migrate_from_official, verify_migration
from mongo_ckpt.payload import digest
from tests.graphs import thread

OfficialSaver = pytest.importorskip(
    "langgraph.checkpoint.mongodb",
    reason="migrates data of langgraph-checkpoint-mongodb: pip install -e '.[test,bench]'",
).MongoDBSaver

KEY = b"0123456789abcdef" * 2
PINS = {"account-1": "4821", "account-2": "0397", "account-3": "7750"}
MARKER = "plaintext-marker-91d3"
PLAIN = JsonPlusSerializer(pickle_fallback=True)


class Vault(TypedDict, total=False):
    pin: str
    approved: bool
    note: str


def vault_builder() -> StateGraph:
    """START -> check -> END; ``check`` approves PINs that do not start with 0."""
    builder = StateGraph(Vault)
    builder.add_node("check", lambda s: {"approved": not s["pin"].startswith("0")})
    builder.add_edge(START, "check")
    builder.add_edge("check", END)
    return builder


def as_text(secret: str) -> re.Pattern[bytes]:
    """``secret`` as stored text: not part of a longer word, id or digest (a 4-digit PIN
    turns up by chance inside the hex of a checkpoint id)."""
    return re.compile(rb"(?<![0-9A-Za-z-])" + re.escape(secret.encode()) + rb"(?![0-9A-Za-z-])")


def unkeyed_digests(value: Any) -> set[str]:
    """Hex digests anyone can compute from ``value``: the 10-digit version tail of earlier
    releases, and common hashes of its serialization (whole and 10-digit prefixes)."""
    type_, data = PLAIN.dumps_typed(value)
    found = {digest(type_, data)}
    for name in ("sha256", "sha1", "md5", "blake2b"):
        found.add(hashlib.new(name, data).hexdigest())
        found.add(hashlib.new(name, type_.encode() + b"\0" + data).hexdigest())
    return found | {d[:10] for d in found}


@pytest.fixture
def migrated(client: Any, db_name: str) -> Iterator[tuple[Any, OfficialSaver, MongoDBSaver]]:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    official = OfficialSaver(client, f"{db_name}_src", serde=serde)
    graph = vault_builder().compile(checkpointer=official)
    for account, pin in PINS.items():
        graph.invoke({"pin": pin, "note": f"{MARKER} {account}"}, thread(account))
    dest = MongoDBSaver(client, db_name, serde=serde)
    migrate_from_official(dest, Source(f"{db_name}_src"))
    yield client[db_name], official, dest
    client.drop_database(f"{db_name}_src")
    client.drop_database(db_name)


def test_no_plaintext_and_no_unkeyed_digest_in_any_migrated_byte(
    migrated: tuple[Any, OfficialSaver, MongoDBSaver],
) -> None:
    db, official, dest = migrated
    docs = [doc for name in db.list_collection_names() for doc in db[name].find()]
    stored = b"".join(bson.encode(doc) for doc in docs)
    assert len(docs) > len(PINS) * 4  # checkpoints, values, writes and the marker
    values = [
        value
        for account in PINS
        for t in official.list(thread(account))
        for value in t.checkpoint["channel_values"].values()
    ]
    assert all(v in values for v in (*PINS.values(), True, False))
    digests = set().union(*map(unkeyed_digests, values))
    for secret in (MARKER, *PINS.values()):
        assert PLAIN.dumps_typed(secret)[1] not in stored, secret
        assert not as_text(secret).search(stored), secret
    leaked = sorted(d for d in digests if d.encode() in stored)
    assert leaked == [], leaked
    assert verify_migration(dest, Source(official.db.name)).mismatches == []


def test_a_pin_cannot_be_recovered_by_hashing_candidates(
    migrated: tuple[Any, OfficialSaver, MongoDBSaver],
) -> None:
    """The attack: hash every 4-digit PIN and both flags as earlier releases made version
    tails, and look for the tails among the stored version strings."""
    db, _, _ = migrated
    stored = b"".join(bson.encode(doc) for name in db.list_collection_names()
                      for doc in db[name].find())
    versions = {m.group(1).decode() for m in re.finditer(rb"\d{12}\.([0-9a-f]{10})", stored)}
    assert versions  # the channels with a value have tails
    candidates = [f"{n:04}" for n in range(10_000)] + [True, False]
    recovered = [c for c in candidates if digest(*PLAIN.dumps_typed(c))[:10] in versions]
    assert recovered == []


def test_reruns_keep_the_version_strings_of_the_first_run(
    migrated: tuple[Any, OfficialSaver, MongoDBSaver],
) -> None:
    """The run's key is kept (encrypted) in the progress marker: a rerun from the start
    writes the same versions, so no value is left behind under a version nothing names."""
    db, official, dest = migrated

    def keys() -> list[tuple[Any, ...]]:
        fields = ("thread_id", "checkpoint_ns", "channel", "version")
        return sorted(tuple(d.get(f) for f in fields) for d in db["checkpoint_blobs"].find())

    before = keys()
    marker = db["mongo_ckpt_schema"].find_one({"_id": Source(official.db.name).marker})
    assert marker["version_key"]["type"].endswith("+aes")
    migrate_from_official(dest, Source(official.db.name), restart=True)
    assert keys() == before
