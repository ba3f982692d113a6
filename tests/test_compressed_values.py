"""Compressed values: a value or pending write of at least
``payload.COMPRESS_FROM`` serialized bytes is stored zlib-compressed where that is smaller,
its head saying so, and reads back as it was given, through every reader (``get_tuple``,
``list``, the DeltaChannel history, ``copy_thread``); never under ``EncryptedSerializer``.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import pytest
from bson import Binary
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import StateGraph
from langgraph.graph.message import _messages_delta_reducer
from typing_extensions import TypedDict

from mongo_ckpt import MissingValueError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.payload import COMPRESS_FROM, ZLIB, digest, join, split
from tests.backends import maybe_await
from tests.chat_support import chat, human
from tests.prose import prose
from tests.saver_support import Api, stop_compressing

SERDE = JsonPlusSerializer()
COMPRESSED = {"type": {"$regex": "\\+zlib$"}}


async def _converse(api: Api, builder: StateGraph, turns: int, thread_id: str = "t") -> Any:
    graph = api.compile(builder)
    reference = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(turns):
        await api.invoke(graph, human(turn), config)
        reference.invoke(human(turn), config)
    return graph, reference, config


async def _stored_bytes(api: Api) -> int:
    docs = [*(await api.docs(BLOBS)), *(await api.docs(WRITES))]
    return sum(len(bytes(d["data"])) for d in docs)


async def test_large_values_are_stored_compressed_and_read_back(api: Api) -> None:
    graph, reference, config = await _converse(api, chat(), 4)
    state = await api.state(graph, config)
    assert state.values == reference.get_state(config).values
    history = [s.values for s in await api.history(graph, config)]
    assert history == [s.values for s in reference.get_state_history(config)]
    for collection in (BLOBS, WRITES):
        heads = await api.docs(collection, COMPRESSED)
        assert heads, collection
        for head in heads:
            # The digest is of the stored bytes; what they hold is the serialized value.
            assert head["vid"] == digest(head["type"], bytes(head["data"]))
    small = await api.docs(BLOBS, {"channel": "branch:to:reply"})
    assert small and not any(d["type"].endswith(ZLIB) for d in small)


async def test_compression_stores_fewer_bytes_than_uncompressed_values(api: Api) -> None:
    await _converse(api, chat(), 4)
    compressed = await _stored_bytes(api)
    other = api.reopened(f"{api.saver.db.name}_plain")
    try:
        stop_compressing(other.saver)
        graph, reference, config = await _converse(other, chat(), 4)
        assert await other.count(BLOBS, COMPRESSED) == await other.count(WRITES, COMPRESSED) == 0
        assert (await other.state(graph, config)).values == reference.get_state(config).values
        plain = await _stored_bytes(other)
    finally:
        await other.drop_database()
    print(f"\nvalue bytes of 4 turns: {plain} as serialized, {compressed} compressed")
    assert compressed < 0.8 * plain


async def test_delta_channel_history_reads_compressed_writes(api: Api) -> None:
    class DeltaState(TypedDict):
        messages: Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]

    graph, reference, config = await _converse(api, chat(DeltaState), 5)
    assert await api.count(WRITES, COMPRESSED) > 0
    assert await api.count(BLOBS, COMPRESSED) > 0  # the snapshots
    state = await api.state(graph, config)
    assert state.values == reference.get_state(config).values
    history = [s.values for s in await api.history(graph, config)]
    assert history == [s.values for s in reference.get_state_history(config)]
    await api.copy_thread("t", "copy")
    copied = await api.state(graph, {"configurable": {"thread_id": "copy"}})
    assert copied.values == state.values


async def test_small_and_incompressible_values_are_stored_as_they_are(api: Api) -> None:
    values = {"small": "x" * (COMPRESS_FROM // 2), "noise": os.urandom(4 * COMPRESS_FROM)}
    checkpoint = generate_checkpoint(
        channel_values=values, channel_versions=dict.fromkeys(values, "1")
    )
    config = await api.put(generate_config("t"), checkpoint, {}, checkpoint["channel_versions"])
    assert await api.count(BLOBS) == 2 and await api.count(BLOBS, COMPRESSED) == 0
    assert (await api.get_tuple(config)).checkpoint["channel_values"] == values


async def test_an_encrypted_saver_never_compresses(api: Api) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    other = api.reopened(f"{api.saver.db.name}_encrypted", serde=serde)
    try:
        graph, reference, config = await _converse(other, chat(), 2)
        assert not other.saver.ops.compressing
        assert await other.count(BLOBS, COMPRESSED) == await other.count(WRITES, COMPRESSED) == 0
        assert (await other.state(graph, config)).values == reference.get_state(config).values
    finally:
        await other.drop_database()


async def test_a_damaged_compressed_value_is_missing_not_misread(api: Api) -> None:
    graph, _, config = await _converse(api, chat(), 2)
    (head, *_) = await api.docs(BLOBS, {**COMPRESSED, "channel": "messages"})
    data = bytearray(head["data"])
    data[len(data) // 2] ^= 0xFF
    raw = api.raw(BLOBS)
    await maybe_await(raw.update_one({"_id": head["_id"]}, {"$set": {"data": Binary(bytes(data))}}))
    with pytest.raises(MissingValueError):
        await api.get_tuple(
            {
                "configurable": {
                    "thread_id": "t",
                    "checkpoint_ns": "",
                    "checkpoint_id": await _naming(api, head),
                }
            }
        )


async def _naming(api: Api, head: dict[str, Any]) -> str:
    """The id of a checkpoint whose values include ``head``'s."""
    entry = {"channel": head["channel"], "version": head["version"]}
    (doc, *_) = await api.docs(CHECKPOINTS, {"values": {"$elemMatch": entry}})
    return str(doc["checkpoint_id"])


def test_two_attempts_with_and_without_compression_never_share_a_part() -> None:
    data = prose(7, 6 * COMPRESS_FROM).encode()
    plain = list(split("msgpack", data, chunk_size=COMPRESS_FROM))
    packed = list(split("msgpack", data, chunk_size=COMPRESS_FROM, compress=True))
    assert (packed[-1]["type"], plain[-1]["type"]) == ("msgpack" + ZLIB, "msgpack")
    assert {p["part"] for p in plain[:-1]}.isdisjoint(p["part"] for p in packed[:-1])
    # Parts of both attempts under one key: each head joins its own parts only.
    for head in (plain[-1], packed[-1]):
        docs = [{**p, "k": 1} for p in (*plain[:-1], *packed[:-1], head)]
        ((_, (type_, joined)),) = join(docs, ("k",)).values()
        assert (type_, joined) == ("msgpack", data)


def test_a_reader_that_does_not_know_an_encoding_refuses_the_value() -> None:
    """A value stored by a later release under an encoding this one does not know (its tag
    names it): the serializer refuses the tag, instead of decoding the stored bytes."""
    value = {"text": prose(1, 4 * COMPRESS_FROM)}
    type_, data = SERDE.dumps_typed(value)
    (head,) = split(type_ + "+zstd", data)
    ((_, stored),) = join([{**head, "k": 1}], ("k",)).values()
    assert stored == (type_ + "+zstd", data)
    with pytest.raises(NotImplementedError, match="Unknown serialization type"):
        SERDE.loads_typed(stored)
    # And a compressed value, as a reader that knew no compression would be handed it.
    (packed,) = split(type_, data, compress=True)
    with pytest.raises(NotImplementedError, match="Unknown serialization type"):
        SERDE.loads_typed((packed["type"], bytes(packed["data"])))


def test_a_serializer_tag_ending_like_the_compression_reads_back_as_stored() -> None:
    """A serializer whose own type tag ends in ``+zlib``: the compression is added on top,
    so the reader takes off exactly the layer it added."""
    for data in (b"small", prose(2, 4 * COMPRESS_FROM).encode()):
        for compress in (False, True):
            (head,) = split("custom" + ZLIB, data, compress=compress)
            ((_, stored),) = join([{**head, "k": 1}], ("k",)).values()
            assert stored == ("custom" + ZLIB, data)
