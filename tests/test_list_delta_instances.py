"""List deltas across saver instances: a ``get_tuple`` of the parent is enough to write a
delta, so two processes serving one thread in turn store what one does; and the reads
that must not serve as a base (another checkpoint, a ``list`` page, a layout that does
not allow deltas, a chain without counters, a value changed by the caller, a parent
deleted meanwhile) write whole values or are refused."""

from __future__ import annotations

import asyncio
from itertools import count
from types import SimpleNamespace
from typing import Any

import bson
import pytest
from hypothesis import given
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from mongo_ckpt import MongoDBSaver, StaleParentError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, NOT_PENDING
from mongo_ckpt.listdelta import DIGEST_SIZE, LINK_BYTES, fingerprints
from mongo_ckpt.memory import THREAD_BYTES
from tests.graphs import thread
from tests.lengths import Length
from tests.list_delta_programs import (
    check_bounded_chains,
    check_reads,
    programs,
    run_program,
)
from tests.list_delta_support import ENCRYPTED, Chain, message
from tests.prose import prose
from tests.saver_support import LOGICAL, Api, assert_no_orphans, maybe_await

TURNS = 60
DELTAS = {"base": {"$exists": True}}


def text(role: str, turn: int) -> str:
    return prose(f"{role}-{turn}", 1024, head=f"{role} turn {turn}:")


def chat() -> StateGraph:
    """``START -> reply``: a ~1 KB AI reply to each ~1 KB human message, ids fixed."""

    def reply(state: MessagesState) -> dict:
        turn = len(state["messages"]) // 2
        return {"messages": [AIMessage(text("ai", turn), id=f"ai-{turn}")]}

    return StateGraph(MessagesState).add_node("reply", reply).add_edge(START, "reply")


def said(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(text("human", turn), id=f"human-{turn}")]}


async def stored_bytes(api: Api, thread_id: str) -> int:
    docs = [await api.docs(logical, {"thread_id": thread_id}) for logical in LOGICAL]
    return sum(len(bson.encode(doc)) for found in docs for doc in found)


async def test_two_instances_in_turn_store_what_one_does(api: Api) -> None:
    other = api.reopened()
    graphs = [api.compile(chat()), other.compile(chat())]
    reference = chat().compile(checkpointer=InMemorySaver())
    for turn in range(TURNS):
        await api.invoke(graphs[0], said(turn), thread("one"))
        side = turn % 2  # each turn on the other instance, as behind a load balancer
        await [api, other][side].invoke(graphs[side], said(turn), thread("two"))
        reference.invoke(said(turn), thread("two"))

    one, two = await stored_bytes(api, "one"), await stored_bytes(api, "two")
    assert two == one  # the reader continues the writer's chain: the same documents
    updates = 2 * TURNS  # ``messages`` changes twice a turn; its first version is whole
    assert await api.count(BLOBS, {"thread_id": "two", **DELTAS}) == updates - 1
    whole = api.reopened(f"{api.saver.db.name}_whole", list_deltas=False)
    whole_graph = whole.compile(chat())
    for turn in range(TURNS):
        await whole.invoke(whole_graph, said(turn), thread("two"))
    assert two * 4 < await stored_bytes(whole, "two")

    # Every checkpoint reads back as InMemorySaver's, through either instance: listed,
    # and each one by itself (``get_tuple``) through one instance or the other.
    expected = [(s.values, s.next, s.metadata) for s in reference.get_state_history(thread("two"))]
    for run, graph in ((api, graphs[0]), (other, graphs[1])):
        history = await run.history(graph, thread("two"))
        assert [(s.values, s.next, s.metadata) for s in history] == expected
    for n, (snapshot, (values, *_)) in enumerate(zip(history, expected)):
        run, graph = ((api, graphs[0]), (other, graphs[1]))[n % 2]
        assert (await run.state(graph, snapshot.config)).values == values
    await whole.drop_database()


async def test_a_read_of_another_checkpoint_is_no_base(api: Api) -> None:
    chain = Chain(api)
    messages = [message(i, 10) for i in range(4)]
    root = await chain.put(messages)
    left = await chain.put([*messages, message(4, 10)])
    chain.config = root
    right = await chain.put([*messages, message(5, 10)])  # a sibling of ``left``
    other = api.reopened()
    await other.setup()
    await other.get_tuple(left)
    follow = Chain(other)
    follow.versions, follow.n = dict(chain.versions), 100
    follow.config, follow.values = right, {**chain.values}
    grown = [*messages, message(5, 10), message(6, 10)]
    before = await api.count(BLOBS, DELTAS)
    await follow.put(grown)  # on ``right``, which this instance did not read
    assert await api.count(BLOBS, DELTAS) == before
    await other.get_tuple(right)
    follow.config = right
    await follow.put([*grown, message(7, 10)])  # on ``right``, read: a delta
    assert await api.count(BLOBS, DELTAS) == before + 1
    got = await api.reopened().get_tuple(follow.config)
    assert got.checkpoint["channel_values"]["messages"] == [*grown, message(7, 10)]


async def follower(api: Api, chain: Chain, **options: Any) -> tuple[Api, Chain]:
    """A second instance set to continue ``chain`` from its latest checkpoint."""
    other = api.reopened(**options)
    await other.setup()
    follow = Chain(other)
    follow.config, follow.versions, follow.n = chain.config, dict(chain.versions), 100
    follow.values = dict(chain.values)
    return other, follow


async def grown(api: Api, n: int, **options: Any) -> tuple[Chain, list[Any]]:
    chain = Chain(api.reopened(**options) if options else api)
    messages: list[Any] = []
    for i in range(n):
        messages = [*messages, message(i, 10)]
        await chain.put(messages)
    return chain, messages


async def test_a_list_page_is_no_base(api: Api) -> None:
    chain, messages = await grown(api, 5)
    other, follow = await follower(api, chain)
    listed = await other.list({"configurable": {"thread_id": "t"}})
    assert len(listed) == 5
    before = await api.count(BLOBS, DELTAS)
    await follow.put([*messages, message(5, 10)])
    assert await api.count(BLOBS, DELTAS) == before


async def test_a_read_costs_its_stored_bytes_until_a_put_digests_it(api: Api) -> None:
    chain, messages = await grown(api, 6)
    held = api.saver.memory.cached_bytes
    await api.get_tuple(chain.config)  # the checkpoint this instance wrote last: no new entry
    assert api.saver.memory.cached_bytes == held
    other, follow = await follower(api, chain)
    await other.get_tuple(chain.config)
    checkpoint_id = chain.config["configurable"]["checkpoint_id"]
    named = (await api.docs(CHECKPOINTS, {"checkpoint_id": checkpoint_id}))[0]["values"]
    data = {(d["channel"], d["version"]): len(d["data"]) for d in await api.docs(BLOBS)}
    stored = {
        ch: [data[ch, v["version"]] for v in named if v["channel"] == ch]
        for ch in ("messages", "other")
    }
    # ``messages`` at k = 5 is rebuilt from the 1st, the 5th and itself; ``other`` is whole.
    assert [len(stored[ch]) for ch in ("messages", "other")] == [3, 1]
    read = THREAD_BYTES + sum(map(sum, stored.values())) + 4 * LINK_BYTES
    assert other.saver.memory.cached_bytes == read
    await follow.put([*messages, message(6, 10)])  # k = 6: from the 1st, the 5th and itself
    digests = DIGEST_SIZE * (len(messages) + 1)
    written = THREAD_BYTES + digests + 3 * LINK_BYTES + sum(stored["other"]) + LINK_BYTES
    assert other.saver.memory.cached_bytes == written  # the read entry went with the put
    assert await api.count(BLOBS, DELTAS) == 6
    heads = await api.docs(BLOBS, DELTAS)
    assert sorted(d["k"] for d in heads) == [1, 2, 3, 4, 5, 6]


async def test_a_chain_larger_than_the_budget_is_not_kept(api: Api) -> None:
    chain, messages = await grown(api, 3)
    other, follow = await follower(api, chain)
    other.saver.memory._heads.budget = 100  # far less than the chain's stored bytes
    await other.get_tuple(chain.config)
    assert other.saver.memory.cached_bytes == 0
    await follow.put([*messages, message(3, 10)])
    assert await api.count(BLOBS, DELTAS) == 2


async def test_the_value_read_not_the_one_handed_out(api: Api) -> None:
    """A caller that changes the list it was given in place changes no base."""
    chain, messages = await grown(api, 4)
    other, follow = await follower(api, chain)
    read = (await other.get_tuple(chain.config)).checkpoint["channel_values"]["messages"]
    read[0].content = "edited in place"
    read.append(message(4, 10))
    await follow.put(read)
    got = await api.reopened().get_tuple(follow.config)
    assert got.checkpoint["channel_values"]["messages"] == read
    head = (await api.docs(BLOBS, {"version": follow.versions["messages"]}))[0]
    assert "base" not in head  # its first element differs from the stored one: whole


async def test_a_chain_without_counters_starts_anew(api: Api) -> None:
    chain, messages = await grown(api, 4)
    await maybe_await(api.raw(BLOBS).update_many({}, {"$unset": {"k": ""}}))  # as before ``k``
    other, follow = await follower(api, chain)
    await other.get_tuple(chain.config)
    await follow.put([*messages, message(4, 10)])
    head = (await api.docs(BLOBS, {"version": follow.versions["messages"]}))[0]
    assert "base" not in head
    await follow.put([*messages, message(4, 10), message(5, 10)])  # its own chain from here
    head = (await api.docs(BLOBS, {"version": follow.versions["messages"]}))[0]
    assert head["k"] == 1


async def test_encrypted_instances_in_turn(api: Api) -> None:
    writer = api.reopened(serde=ENCRYPTED)
    chain = Chain(writer)
    readers = [writer, api.reopened(serde=ENCRYPTED)]
    messages: list[Any] = []
    for i in range(8):
        side = readers[i % 2]
        if i:
            await side.get_tuple(chain.config)  # a run reads its parent first
        chain.api = side
        messages = [*messages, HumanMessage(f"marker-{i:03d}-quokka", id=f"m{i}")]
        await chain.put(messages)
    assert await api.count(BLOBS, DELTAS) == 7
    raw = await api.raw_bytes()
    # Both ends of each text, words no id, digest or ciphertext holds by chance (a 4-digit
    # hex tag turns up in about one run in 140, inside a checkpoint id).
    assert b"quokka" not in raw and b"marker" not in raw
    digests = fingerprints(ENCRYPTED, messages)
    for start in range(0, len(digests), DIGEST_SIZE):
        assert digests[start : start + DIGEST_SIZE] not in raw
    got = await api.reopened(serde=ENCRYPTED).get_tuple(chain.config)
    assert got.checkpoint["channel_values"]["messages"] == messages


async def test_a_parent_deleted_after_its_read_refuses_the_put(api: Api) -> None:
    chain, messages = await grown(api, 4)
    other, follow = await follower(api, chain)
    await other.get_tuple(chain.config)
    await api.delete_thread("t")  # another process deletes the thread (and the bases)
    with pytest.raises(StaleParentError):
        await follow.put([*messages, message(4, 10)])
    assert await api.count(CHECKPOINTS, {"thread_id": "t", **NOT_PENDING}) == 0


_threads = count()


class ReadsParent:
    """A saver whose every ``put`` first reads its parent with ``get_tuple``, as a run does."""

    def __init__(self, saver: MongoDBSaver) -> None:
        self.saver = saver

    def __getattr__(self, name: str) -> Any:
        return getattr(self.saver, name)

    def put(self, config: Any, *args: Any) -> Any:
        if config["configurable"].get("checkpoint_id"):
            self.saver.get_tuple(config)
        return self.saver.put(config, *args)


def test_programs_on_instances_that_read_their_parents(
    saver: MongoDBSaver, length: Length
) -> None:
    """``test_list_delta_differential``'s programs (forks, namespaces, edits in the middle,
    tuples, scalars), each put by one of two instances after a ``get_tuple`` of its parent:
    every checkpoint reads back as whole values do."""

    @length.settings(30)
    @given(program=programs)
    def check(program: list) -> None:
        api = Api(saver)
        other = api.reopened()
        plain = api.reopened(f"{saver.db.name}_plain", list_deltas=False)
        writers = [SimpleNamespace(saver=ReadsParent(run.saver)) for run in (api, other)]
        thread_id = f"r{next(_threads)}"
        done = run_program(writers, plain, program, thread_id)
        check_reads([api, other, plain], done)
        check_bounded_chains(api, thread_id, len(program))
        asyncio.run(assert_no_orphans(api))
        query = {"thread_id": thread_id}
        assert api.raw(BLOBS).count_documents(query) == plain.raw(BLOBS).count_documents(query)

    check()
