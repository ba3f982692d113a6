"""With ``EncryptedSerializer`` nothing the graph holds is stored in plaintext, and
``list(filter=...)`` still works on the metadata kept in plain form."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import count_calls, total
from tests.saver_support import Api

MARKER = "plaintext-marker-5f0c"
ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef" * 2)


async def store_secrets(api: Api) -> list[dict]:
    """Two checkpoints (steps 1 and 2) and a write, each carrying ``MARKER``; their configs."""
    stored = []
    for step in (1, 2):
        checkpoint = generate_checkpoint(
            channel_values={"secret": f"{MARKER}-{step}", "nested": {"k": [MARKER]}},
            channel_versions={"secret": str(step), "nested": str(step)},
        )
        parent = generate_config("t")
        if stored:
            parent["configurable"]["checkpoint_id"] = stored[-1]["configurable"]["checkpoint_id"]
        metadata = generate_metadata(step=step, note=MARKER, user="alice")
        stored.append(
            await api.put(parent, checkpoint, metadata, {"secret": str(step), "nested": str(step)})
        )
    await api.put_writes(stored[-1], [("secret", f"write-{MARKER}")], "task-1")
    return stored


async def test_nothing_in_plaintext(api: Api) -> None:
    plain = api.reopened(db_name=f"{api.saver.db.name}_plain")
    try:
        await store_secrets(plain)
        # The search finds the marker when the serializer does not encrypt.
        assert MARKER.encode() in await plain.raw_bytes()
    finally:
        await plain.drop_database()

    encrypted = api.reopened(serde=ENCRYPTED)
    stored = await store_secrets(encrypted)
    assert MARKER.encode() not in await encrypted.raw_bytes()
    for doc in await encrypted.docs(CHECKPOINTS):
        assert doc["checkpoint"]["type"].endswith("+aes")
        assert doc["metadata_typed"]["type"].endswith("+aes")
        # The serialized checkpoint holds its own id and timestamp: encrypted, they are gone.
        assert doc["checkpoint_id"].encode() not in bytes(doc["checkpoint"]["data"])
        assert set(doc["metadata"]) <= {"source", "step", "run_id", "parents"}
    for logical in (BLOBS, WRITES):
        assert {d["type"].split("+")[-1] for d in await encrypted.docs(logical)} == {"aes"}

    latest = await encrypted.get_tuple(stored[-1])
    assert latest.checkpoint["channel_values"] == {
        "secret": f"{MARKER}-2",
        "nested": {"k": [MARKER]},
    }
    assert latest.metadata["note"] == MARKER
    assert latest.pending_writes == [("task-1", "secret", f"write-{MARKER}")]


async def test_filter_on_structural_metadata(api: Api) -> None:
    encrypted = api.reopened(serde=ENCRYPTED)
    stored = await store_secrets(encrypted)
    found = await encrypted.list(None, filter={"source": "loop", "step": 1})
    assert [t.config for t in found] == [stored[0]]
    assert found[0].metadata["note"] == MARKER
    assert len(await encrypted.list(None, filter={"source": "loop"})) == 2
    assert await encrypted.list(None, filter={"source": "input"}) == []


async def test_filter_on_other_keys_needs_opt_in(api: Api) -> None:
    encrypted = api.reopened(serde=ENCRYPTED)
    await store_secrets(encrypted)
    counter = count_calls(encrypted.saver.collections)
    with pytest.raises(ValueError, match="filterable_metadata_keys"):
        await encrypted.list(None, filter={"user": "alice"})
    assert total(counter) == 0

    opted_in = api.reopened(
        serde=ENCRYPTED,
        checkpoint_collection_name="opted_checkpoints",
        writes_collection_name="opted_writes",
        blobs_collection_name="opted_blobs",
        filterable_metadata_keys={"source", "step", "user"},
    )
    stored = await store_secrets(opted_in)
    found = await opted_in.list(None, filter={"user": "alice", "step": 2})
    assert [t.config for t in found] == [stored[1]]
    assert await opted_in.list(None, filter={"user": "bob"}) == []
    # Only the opted-in keys are in plain form; the other metadata stays encrypted.
    assert MARKER.encode() not in await opted_in.raw_bytes()
