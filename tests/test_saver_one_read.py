"""``get_tuple`` reads a checkpoint, the values it names (list-delta bases included) and its
pending writes in one aggregation, one small result document per part, thread-scoped, and
still reads values stored before they carried a ``join`` key."""

from __future__ import annotations

import random
from typing import Any

import bson
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance.test_utils import generate_metadata

from mongo_ckpt.calls import aggregate
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, JOIN_SEP
from mongo_ckpt.payload import CHUNK_SIZE
from mongo_ckpt.reading import checkpoint_query, split_joined, tuple_pipeline
from tests.backends import count_calls, maybe_await
from tests.list_delta_support import Chain
from tests.saver_support import Api

MB = 1024 * 1024
ONE_AGGREGATE = {(CHECKPOINTS, "aggregate"): 1}
# Random bytes: two parts each (CHUNK_SIZE is 8 MiB), nothing compresses them.
BIG = random.Random(21).randbytes(9 * MB)
BIG_WRITE = random.Random(22).randbytes(9 * MB)
# What a result document holds besides one part's bytes: its keys, ``vid``, type...
OVERHEAD = 4096


def config(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def delta_chain(api: Api, puts: int = 8) -> tuple[Chain, list[Any]]:
    """``puts`` versions of a list whose first element is a multi-part value; each later
    version a list delta (the last one rebuilt from several bases), a big write on the
    latest checkpoint."""
    chain = Chain(api)
    messages: list[Any] = [BIG]
    for i in range(puts):
        messages = [*messages, f"m{i}".encode()]
        await chain.put(messages)
    await api.put_writes(chain.config, [("messages", BIG_WRITE), ("small", "w")], "task")
    return chain, messages


async def test_deltas_and_multipart_values_in_one_call(api: Api) -> None:
    chain, messages = await delta_chain(api)
    latest_id = chain.config["configurable"]["checkpoint_id"]
    (latest,) = await api.docs(CHECKPOINTS, {"checkpoint_id": latest_id})
    bases = [v for v in latest["values"] if v["channel"] == "messages" and v.get("base")]
    assert len(bases) == 3  # the 8th version in a row: counters 0, 4, 6 are its bases
    assert await api.count(BLOBS, {"channel": "messages", "part": {"$ne": 0}}) >= 1

    fresh = api.reopened()  # what the instance remembers does not matter
    await fresh.setup()
    for reader in (api, fresh):
        counter = count_calls(reader.saver.collections)
        got = await reader.get_tuple(config("t"))
        assert dict(counter) == ONE_AGGREGATE, counter
        assert got.checkpoint["channel_values"] == {"messages": messages, "other": ["fixed"]}
        assert got.pending_writes == [("task", "messages", BIG_WRITE), ("task", "small", "w")]

    counter = count_calls(api.saver.collections)
    earlier = await api.get_tuple(config("t", checkpoint_id="1ef000000000005"))
    assert dict(counter) == ONE_AGGREGATE, counter
    assert earlier.checkpoint["channel_values"]["messages"] == messages[:6]


async def test_no_result_document_holds_more_than_one_part(api: Api) -> None:
    chain, _ = await delta_chain(api, puts=3)
    # Metadata of its own size: the checkpoint's fields are not repeated beside each part.
    checkpoint = {
        **empty_checkpoint(),
        "id": "1ef999999999999",
        "channel_values": chain.values,
        "channel_versions": dict(chain.versions),
    }
    metadata = {**generate_metadata(), "note": "n" * MB}
    stored = await api.put(chain.config, checkpoint, metadata, {})
    await api.put_writes(stored, [("messages", BIG_WRITE)], "task")

    pipeline = tuple_pipeline(checkpoint_query("t", "", None), api.saver.layout.by_logical())
    docs = await api.run(aggregate(CHECKPOINTS, pipeline))
    sizes = {
        kind: [len(bson.encode(d)) for d in docs if kind in d]
        for kind in ("checkpoint", "value", "write")
    }
    assert len(sizes["checkpoint"]) == 1 and sizes["checkpoint"][0] > MB
    assert len(sizes["value"]) >= 4 and len(sizes["write"]) == 2  # both big ones, 2 parts
    assert max(sizes["value"] + sizes["write"]) <= CHUNK_SIZE + OVERHEAD
    assert all(len([k for k in d if k in sizes]) <= 1 for d in docs)


async def put_one(api: Api, thread_id: str, checkpoint_ns: str, text: str) -> Any:
    checkpoint = {
        **empty_checkpoint(),
        "id": "1ef000000000001",  # the same id on every thread and namespace
        "channel_values": {"v": text},
        "channel_versions": {"v": "00000000001.0"},
    }
    stored = await api.put(
        config(thread_id, checkpoint_ns), checkpoint, generate_metadata(), {"v": "00000000001.0"}
    )
    await api.put_writes(stored, [("w", text)], "task")
    return stored


async def test_neighbouring_threads_and_namespaces_are_not_joined(api: Api) -> None:
    keys = [("a", ""), ("a", "inner"), ("a2", ""), ("a\x1fb", ""), ("a", "b" + JOIN_SEP)]
    for thread_id, checkpoint_ns in keys:
        await put_one(api, thread_id, checkpoint_ns, f"{thread_id}/{checkpoint_ns}")
    for thread_id, checkpoint_ns in keys:
        counter = count_calls(api.saver.collections)
        got = await api.get_tuple(config(thread_id, checkpoint_ns, "1ef000000000001"))
        assert dict(counter) == ONE_AGGREGATE, counter
        text = f"{thread_id}/{checkpoint_ns}"
        assert got.checkpoint["channel_values"] == {"v": text}
        assert got.pending_writes == [("task", "w", text)]

    # ("a\x1fb", "") and ("a", "b\x1f") spell the same join keys: the lookups bring both
    # threads' parts, and the reader keeps only those of its own thread and namespace.
    query = checkpoint_query("a\x1fb", "", None)
    pipeline = tuple_pipeline(query, api.saver.layout.by_logical())
    docs = await api.run(aggregate(CHECKPOINTS, pipeline))
    parts = [d.get("value") or d["write"] for d in docs if "value" in d or "write" in d]
    assert {p["thread_id"] for p in parts} == {"a\x1fb", "a"}
    head, values, writes = split_joined(docs)
    assert head is not None and head["thread_id"] == "a\x1fb"
    assert [(p["thread_id"], p["checkpoint_ns"]) for p in values + writes] == [("a\x1fb", "")] * 2
    # The others: exactly their own parts.
    for thread_id, checkpoint_ns in keys[:3]:
        query = checkpoint_query(thread_id, checkpoint_ns, None)
        pipeline = tuple_pipeline(query, api.saver.layout.by_logical())
        docs = await api.run(aggregate(CHECKPOINTS, pipeline))
        owners = {
            (p["thread_id"], p["checkpoint_ns"])
            for d in docs
            for p in (d.get("value"), d.get("write"))
            if p
        }
        assert owners == {(thread_id, checkpoint_ns)}


async def test_values_without_join_keys_still_read(api: Api) -> None:
    """Values without ``join`` (written by hand, or by a tool other than the saver) are read
    by their keys: one more round trip."""
    chain, messages = await delta_chain(api, puts=4)
    await maybe_await(api.raw(BLOBS).update_many({}, {"$unset": {"join": ""}}))
    counter = count_calls(api.saver.collections)
    got = await api.get_tuple(config("t"))
    assert dict(counter) == {**ONE_AGGREGATE, (BLOBS, "find"): 1}, counter
    assert got.checkpoint["channel_values"] == {"messages": messages, "other": ["fixed"]}
    assert got.pending_writes == [("task", "messages", BIG_WRITE), ("task", "small", "w")]


async def test_numeric_versions_are_joined(api: Api) -> None:
    """A version's join key is Python's ``str`` of it: ints and whole floats (which
    ``$toString`` spells without ``.0`` on a server) are found by the lookup too."""
    for thread_id, version in (("ints", 3), ("floats", 2.0), ("fractions", 2.5)):
        checkpoint = {
            **empty_checkpoint(),
            "channel_values": {"v": thread_id, "w": [thread_id]},
            "channel_versions": {"v": version, "w": version},
        }
        new = {"v": version, "w": version}
        await api.put(config(thread_id), checkpoint, generate_metadata(), new)
        counter = count_calls(api.saver.collections)
        got = await api.get_tuple(config(thread_id))
        assert dict(counter) == ONE_AGGREGATE, (thread_id, counter)
        assert got.checkpoint["channel_values"] == {"v": thread_id, "w": [thread_id]}
