"""What list deltas store and cost: round trips, bytes sent and stored, blob documents read
per state, values over 16 MiB, encryption, missing bases, old whole values, concurrency."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator
from typing import Any

import bson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.listdelta import DIGEST_SIZE, fingerprints
from mongo_ckpt.reading import MissingValueError
from tests.backends import count_calls, total, wire_uri
from tests.list_delta_support import ENCRYPTED, Chain, message
from tests.saver_support import BOTH_PUT_PATHS, Api, maybe_await, put_write_calls

MB = 1024 * 1024


class SentBytes:
    """Wraps the blobs collection: BSON bytes of every ``bulk_write`` request sent."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.sent = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bulk_write(self, requests: list[Any], **kwargs: Any) -> Any:
        self.sent += sum(len(bson.encode(getattr(r, "_doc", r._filter))) for r in requests)
        return self.inner.bulk_write(requests, **kwargs)


@pytest.fixture
def sizes(saver: MongoDBSaver) -> Iterator[SentBytes]:
    wrapper = SentBytes(saver.collections[BLOBS])
    saver.collections[BLOBS] = wrapper
    yield wrapper


async def test_bytes_sent_follow_the_change_not_the_list(
    saver: MongoDBSaver, sizes: SentBytes
) -> None:
    chain = Chain(Api(saver))
    messages: list[Any] = []
    per_put = []
    for i in range(64):
        messages = [*messages, message(i)]
        before = sizes.sent
        await chain.put(messages)
        per_put.append(sizes.sent - before)
    # The k-th delta sends the elements appended since version k & (k - 1): on average
    # about log2(k) / 2 messages per put, one when k is odd.
    odd = per_put[1::2]
    assert max(odd) < 2 * 1100
    assert sum(per_put) < 64 * (math.log2(64) / 2 + 1.5) * 1100
    whole = sum(1100 * (i + 1) for i in range(64))
    assert sum(per_put) * 5 < whole
    stored = sum(len(bson.encode(d)) for d in Api(saver).raw(BLOBS).find({"channel": "messages"}))
    assert stored * 4 < whole
    assert (await Api(saver).get_tuple(chain.config)).checkpoint["channel_values"] == {
        "messages": messages,
        "other": ["fixed"],
    }


@BOTH_PUT_PATHS
async def test_round_trips(api: Api) -> None:
    chain = Chain(api)
    messages = [message(0)]
    configs = [await chain.put(messages)]
    counter = count_calls(api.saver.collections)
    for i in range(1, 40):
        messages = [*messages, message(i)]
        counter.clear()
        configs.append(await chain.put(messages))
        assert dict(counter) == put_write_calls(api.saver), counter

    counter.clear()
    latest = await api.get_tuple({"configurable": {"thread_id": "t"}})
    assert dict(counter) == {(CHECKPOINTS, "aggregate"): 1}, counter
    assert latest.checkpoint["channel_values"]["messages"] == messages

    counter.clear()
    page = await api.list({"configurable": {"thread_id": "t"}}, limit=10)
    assert total(counter) <= 3, counter
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in page] == list(
        range(40, 30, -1)
    )

    # A fork from a checkpoint this instance read: unchanged list values keep their chain.
    fork = await api.get_tuple(configs[20])
    chain.config, chain.versions = configs[20], fork.checkpoint["channel_versions"]
    counter.clear()
    forked = await chain.put(messages[:21], changed=("other",))
    assert dict(counter) == put_write_calls(api.saver), counter
    got = await api.get_tuple(forked)
    assert got.checkpoint["channel_values"]["messages"] == messages[:21]

    # An instance that never saw the parent reads its chains first: one more round trip.
    other = api.reopened()
    await other.setup()
    chain2 = Chain(other)
    chain2.config, chain2.versions, chain2.n = forked, dict(chain.versions), 100
    counter = count_calls(other.saver.collections)
    again = await chain2.put(messages[:21], changed=("other",))
    assert dict(counter) == {(CHECKPOINTS, "find"): 1, **put_write_calls(other.saver)}
    assert (await other.get_tuple(again)).checkpoint["channel_values"]["messages"] == messages[:21]


class BlobDocsRead:
    """Wraps the checkpoints collection: value documents each ``aggregate`` returned (a
    ``get_tuple`` reads its values in its aggregation)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def aggregate(self, *args: Any, **kwargs: Any) -> Any:
        docs = list(self.inner.aggregate(*args, **kwargs))
        self.reads.append(sum("value" in d for d in docs))
        return docs


def test_graph_state_reads_few_blob_documents(saver: MongoDBSaver) -> None:
    def bot(state: MessagesState) -> dict:
        return {"messages": [AIMessage(f"#{len(state['messages'])}")]}

    graph = StateGraph(MessagesState).add_node("bot", bot).add_edge(START, "bot")
    graph = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "g"}}
    worst, versions = 0, 0
    reads = BlobDocsRead(saver.collections[CHECKPOINTS])
    saver.collections[CHECKPOINTS] = reads
    counter = count_calls(saver.collections)
    for turn in range(40):
        graph.invoke({"messages": [HumanMessage(f"h{turn}")]}, config)
        versions += 2
        counter.clear()
        reads.reads.clear()
        state = graph.get_state(config)
        assert dict(counter) == {(CHECKPOINTS, "aggregate"): 1}, counter
        assert len(state.values["messages"]) == 2 * turn + 2
        # ``messages`` from at most floor(log2(k)) + 2 documents, plus the other channels.
        assert reads.reads[0] <= math.floor(math.log2(versions)) + 2 + 2
        worst = max(worst, reads.reads[0])
    assert worst >= 6  # deltas are in use: some states need several documents


async def test_over_16_mib(api: Api) -> None:
    chain = Chain(api)
    # Pseudo-random bytes: compression leaves them over 16 MiB.
    rng = random.Random(0)
    big = [rng.randbytes(6 * MB) for _ in range(3)]
    first = await chain.put(big)  # a whole value over 16 MiB, in parts
    longer = [*big, *(rng.randbytes(6 * MB) for _ in range(3))]
    second = await chain.put(longer)  # a delta whose tail is over 16 MiB, in parts
    heads = await api.docs(BLOBS, {"channel": "messages", "part": 0})
    assert sorted("base" in d for d in heads) == [False, True]
    assert await api.count(BLOBS, {"channel": "messages"}) >= 6
    assert (await api.get_tuple(first)).checkpoint["channel_values"]["messages"] == big
    assert (await api.get_tuple(second)).checkpoint["channel_values"]["messages"] == longer


async def test_encrypted(api: Api) -> None:
    secret = api.reopened(serde=ENCRYPTED)
    chain = Chain(secret)
    messages: list[Any] = []
    for i in range(12):
        messages = [*messages, HumanMessage(f"marker-{i:03d}-quokka", id=f"m{i}")]
        await chain.put(messages)
    assert await secret.count(BLOBS, {"base": {"$exists": True}}) == 11
    raw = await secret.raw_bytes()
    # Both ends of each text, words no id, digest or ciphertext holds by chance (a 4-digit
    # hex tag turns up in about one run in 140, inside a checkpoint id).
    assert b"quokka" not in raw and b"marker" not in raw
    digests = fingerprints(ENCRYPTED, messages)  # plaintext-derived digests stay in memory
    for start in range(0, len(digests), DIGEST_SIZE):
        assert digests[start : start + DIGEST_SIZE] not in raw
    fresh = api.reopened(serde=ENCRYPTED)
    got = await fresh.get_tuple(chain.config)
    assert got.checkpoint["channel_values"]["messages"] == messages


async def test_missing_base_is_loud(api: Api) -> None:
    chain = Chain(api)
    messages: list[Any] = []
    for i in range(6):
        messages = [*messages, message(i, 10)]
        await chain.put(messages)
    deltas = await api.docs(BLOBS, {"channel": "messages", "base": {"$exists": True}})
    doc = max(deltas, key=lambda d: d["version"])
    await maybe_await(api.raw(BLOBS).delete_many({"channel": "messages", "version": doc["base"]}))
    with pytest.raises(MissingValueError) as raised:
        await api.get_tuple(chain.config)
    error = raised.value
    assert (error.thread_id, error.checkpoint_ns, error.channel) == ("t", "", "messages")
    assert error.version == doc["version"] and error.base == doc["base"]
    assert repr(doc["base"]) in str(error)


async def test_whole_values_of_earlier_versions_still_read(saver: MongoDBSaver) -> None:
    old = Api(saver).reopened(list_deltas=False)
    chain = Chain(old)
    messages = [message(i, 10) for i in range(3)]
    first = await chain.put(messages)
    assert await old.count(BLOBS, {"base": {"$exists": True}}) == 0
    new = Api(saver)
    chain.api = new
    await new.get_tuple(first)
    for i in range(3, 8):
        messages = [*messages, message(i, 10)]
        await chain.put(messages)
    # Every new version is a delta: the first based on the whole value ``get_tuple`` read.
    assert await new.count(BLOBS, {"base": {"$exists": True}}) == 5
    got = await new.list({"configurable": {"thread_id": "t"}})
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in got] == list(range(8, 2, -1))


async def test_concurrent_threads_on_one_async_saver(asaver: AsyncMongoDBSaver) -> None:
    api = Api(asaver)

    async def grow(thread_id: str) -> list[Any]:
        chain, messages = Chain(api, thread_id), []
        for i in range(10):
            messages = [*messages, message(i, 10)]
            await chain.put(messages)
        return messages

    ids = [f"c{i}" for i in range(6)]
    expected = await asyncio.gather(*(grow(t) for t in ids))
    for thread_id, messages in zip(ids, expected):
        got = await api.get_tuple({"configurable": {"thread_id": thread_id}})
        assert got.checkpoint["channel_values"]["messages"] == messages
    assert await api.count(BLOBS, {"base": {"$exists": True}}) == 6 * 9


async def test_concurrent_threads_on_one_sync_saver(saver: MongoDBSaver) -> None:
    api = Api(saver)

    def grow(thread_id: str) -> list[Any]:
        return asyncio.run(_grow(Chain(api, thread_id)))

    async def _grow(chain: Chain) -> list[Any]:
        messages: list[Any] = []
        for i in range(10):
            messages = [*messages, message(i, 10)]
            await chain.put(messages)
        return messages

    ids = [f"c{i}" for i in range(6)]
    expected = await asyncio.gather(*(asyncio.to_thread(grow, t) for t in ids))
    for thread_id, messages in zip(ids, expected):
        got = await api.get_tuple({"configurable": {"thread_id": thread_id}})
        assert got.checkpoint["channel_values"]["messages"] == messages
    assert await api.count(BLOBS, {"base": {"$exists": True}}) == 6 * 9


async def test_from_conn_string_turns_list_deltas_off() -> None:
    uri = wire_uri()
    with MongoDBSaver.from_conn_string(uri, "off_sync", list_deltas=False) as saver:
        await grow_and_count_deltas(Api(saver), expected=0)
    async with AsyncMongoDBSaver.from_conn_string(uri, "off_async", list_deltas=False) as asaver:
        await grow_and_count_deltas(Api(asaver), expected=0)
    async with AsyncMongoDBSaver.from_conn_string(uri, "on_async") as asaver:
        await grow_and_count_deltas(Api(asaver), expected=3)


async def grow_and_count_deltas(api: Api, expected: int) -> None:
    chain, messages = Chain(api), []
    for i in range(4):
        messages = [*messages, message(i, 10)]
        await chain.put(messages)
    assert await api.count(BLOBS, {"base": {"$exists": True}}) == expected
    got = await api.get_tuple(chain.config)
    assert got.checkpoint["channel_values"]["messages"] == messages
    await api.drop_database()


async def test_delta_channel_seed_is_rebuilt(api: Api) -> None:
    """A list stored as deltas that then seeds a DeltaChannel (a graph switched from a
    plain list channel): ``get_delta_channel_history`` returns the whole list as the seed."""
    chain = Chain(api)
    messages: list[Any] = []
    for i in range(6):
        messages = [*messages, message(i, 10)]
        await chain.put(messages)
    assert await api.count(BLOBS, {"base": {"$exists": True}}) == 5
    versions = {
        **chain.versions,
        "messages": api.saver.get_next_version(chain.versions["messages"], None),
    }
    checkpoint = {
        **empty_checkpoint(),
        "id": "1ef999999999999",
        "channel_values": {"other": ["fixed"]},
        "channel_versions": versions,
    }
    metadata = {
        "source": "loop",
        "step": 7,
        "parents": {},
        "counters_since_delta_snapshot": {"messages": (1, 1)},
    }
    await api.put_writes(chain.config, [("messages", [message(99, 10)])], "task")
    target = await api.put(chain.config, checkpoint, metadata, {"messages": versions["messages"]})
    history = await api.get_delta_channel_history(config=target, channels=["messages"])
    assert history["messages"]["seed"] == messages
    assert [w[2] for w in history["messages"]["writes"]] == [[message(99, 10)]]

