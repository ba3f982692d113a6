"""Attacks on ``get_tuple`` of a thread's latest checkpoint read from the newest id the
saver knows there (``memory.newest_known``, ``operations.get_tuple``): whatever another
instance deletes, hides, or writes (with a clock behind, or ids that are not uuid6),
the latest read by a warm instance must be the one a cold instance (and, where the runs
can be replayed, ``InMemorySaver``) returns; one aggregation normally, two only when
the newest id known is gone, one again next time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt.layout import BLOBS, CHECKPOINTS, PENDING
from mongo_ckpt.memory import THREAD_BYTES
from tests.backends import count_calls, maybe_await
from tests.clock_skew import skewed_client_clock
from tests.delta_conversation import Conversation
from tests.graphs import chat_builder, thread
from tests.prefetch_support import replaying_latest
from tests.saver_support import Api
from tests.subgraph_support import parent_builder

AGGREGATE = (CHECKPOINTS, "aggregate")


@contextmanager
def skewed_ids(offset: timedelta) -> Iterator[None]:
    """LangGraph's checkpoint ids (uuid6) made by a process whose clock is ``offset`` off,
    and the library's clock too (``skewed_client_clock``): uuid6 keeps the ids of one
    process increasing, so its memory of the last timestamp is set aside meanwhile (the other
    writer is another process)."""
    import langgraph.checkpoint.base.id as ids

    real = ids.time
    last = ids._last_v6_timestamp
    shift = int(offset.total_seconds() * 1e9)
    ids.time = SimpleNamespace(time_ns=lambda: real.time_ns() + shift)  # type: ignore[assignment]
    ids._last_v6_timestamp = None
    try:
        with skewed_client_clock(offset):
            yield
    finally:
        ids.time = real  # type: ignore[assignment]
        ids._last_v6_timestamp = last  # this process never saw the other's timestamps


def comparable(item: CheckpointTuple | None) -> Any:
    if item is None:
        return None
    return (item.config, item.checkpoint, item.metadata, item.parent_config, item.pending_writes)


async def run_turn(api: Api, graph: Any, text: str, thread_id: str = "t") -> str:
    run_id = str(uuid.uuid4())
    config = {**thread(thread_id), "metadata": {"run_id": run_id}}
    await api.invoke(graph, {"messages": [HumanMessage(text)]}, config)
    return run_id


def said(item: CheckpointTuple | None) -> list[str] | None:
    """What the humans said up to ``item`` (the chat graph's even messages)."""
    if item is None:
        return None
    return [m.content for m in item.checkpoint["channel_values"].get("messages", [])[::2]]


async def agree(api: Api, config: Any, aggregates: int | None = None) -> CheckpointTuple | None:
    """The warm read equals a cold instance's; with ``aggregates``, it took that many."""
    counter = count_calls(api.saver.collections)
    warm = await api.get_tuple(config)
    if aggregates is not None:
        assert counter[AGGREGATE] == aggregates
    cold = await api.reopened().get_tuple(config)
    assert comparable(warm) == comparable(cold)
    return warm


# -- deletions by another instance ------------------------------------------------------


async def _delete_last_run(other: Api, runs: list[str]) -> None:
    await other.delete_for_runs([runs[-1]])


async def _keep_latest(other: Api, runs: list[str]) -> None:
    await other.prune(["t"], strategy="keep_latest")


async def _prune_delete(other: Api, runs: list[str]) -> None:
    await other.prune(["t"], strategy="delete")


async def _delete_thread(other: Api, runs: list[str]) -> None:
    await other.delete_thread("t")


async def _sweep(other: Api, runs: list[str]) -> None:
    sweeper = other.reopened(ttl=3600)
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    raw = other.raw(CHECKPOINTS)
    await maybe_await(raw.update_many({"thread_id": "t"}, {"$set": {"created_at": old}}))
    assert await sweeper.sweep_expired() == ["t"]


DELETIONS = [_delete_last_run, _keep_latest, _prune_delete, _delete_thread, _sweep]


@pytest.mark.parametrize("deletion", DELETIONS, ids=lambda f: f.__name__.strip("_"))
async def test_every_deletion_by_another_instance(api: Api, deletion: Any) -> None:
    graph = api.compile(chat_builder())
    runs = [await run_turn(api, graph, f"turn {n}") for n in range(3)]
    await api.get_tuple(thread("t"))  # remembered as the latest found, too
    known = api.saver.memory.newest_known("t", "")
    await deletion(api.reopened(), runs)
    left = await api.count(CHECKPOINTS, {"thread_id": "t", "checkpoint_id": known})
    # Two aggregations when the newest known is gone, then one.
    cold = await agree(api, thread("t"), aggregates=1 if left else 2)
    await agree(api, thread("t"), aggregates=1)
    await run_turn(api, graph, "after")
    latest = await agree(api, thread("t"), aggregates=1)
    assert said(latest) == [*(said(cold) or []), "after"]
    assert bool(left) == (deletion is _keep_latest)


async def test_cli_delete_between_reads(api: Api) -> None:
    if api.is_async:
        pytest.skip("the command line runs on a sync client")
    from click.testing import CliRunner

    from mongo_ckpt.cli import CliState, cli

    graph = api.compile(chat_builder())
    await run_turn(api, graph, "hello")
    result = CliRunner().invoke(
        cli,
        ["delete", "t", "--yes", "--db", api.saver.db.name],
        obj=CliState(client=api.saver.client),
    )
    assert result.exit_code == 0, result.output
    assert await agree(api, thread("t"), aggregates=2) is None
    assert await agree(api, thread("t"), aggregates=1) is None


# -- hidden and pending checkpoints ------------------------------------------------------


async def test_the_newest_known_made_pending_again(api: Api) -> None:
    """A take-back that hides a checkpoint (``maintenance._take_back`` with ``hide``)."""
    graph = api.compile(chat_builder())
    for n in range(2):
        await run_turn(api, graph, f"turn {n}")
    latest = await api.get_tuple(thread("t"))
    assert latest is not None
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest.checkpoint["id"]}
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$set": {PENDING: True}}))
    found = await agree(api, thread("t"), aggregates=2)
    assert found is not None and found.config == latest.parent_config
    await agree(api, thread("t"), aggregates=1)
    # Shown again (the confirmation of a put retried): found from the bound too.
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$unset": {PENDING: ""}}))
    found = await agree(api, thread("t"), aggregates=1)
    assert found is not None and found.checkpoint["id"] == latest.checkpoint["id"]


async def test_a_pending_newer_checkpoint_of_another_writer(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "mine")
    doc = (await api.docs(CHECKPOINTS, {"thread_id": "t"}))[-1]
    newest = max(await api.docs(CHECKPOINTS, {"thread_id": "t"}), key=lambda d: d["checkpoint_id"])
    raw = {k: v for k, v in newest.items() if k != "_id"}
    from langgraph.checkpoint.base.id import uuid6

    raw.update(checkpoint_id=str(uuid6()), parent_checkpoint_id=newest["checkpoint_id"])
    await maybe_await(api.raw(CHECKPOINTS).insert_one({**raw, PENDING: True}))
    assert doc is not None
    found = await agree(api, thread("t"), aggregates=1)
    assert found is not None and found.checkpoint["id"] == newest["checkpoint_id"]


# -- other writers' ids ------------------------------------------------------------------


async def test_another_writer_with_a_clock_behind(api: Api) -> None:
    """Its new checkpoints have smaller ids: the latest is still the greatest id (as
    ``InMemorySaver`` returns), whichever instance asks."""
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "mine")
    other = api.reopened()
    other_graph = other.compile(chat_builder())
    with skewed_ids(timedelta(hours=-1)):
        await run_turn(other, other_graph, "theirs behind")
    everything = await api.list(thread("t"))
    greatest = max(item.checkpoint["id"] for item in everything)
    theirs = [i for i in everything if "theirs behind" in (said(i) or [])]
    assert theirs and all(i.checkpoint["id"] < greatest for i in theirs)  # skewed indeed
    for reader in (api, other):
        found = await agree(reader, thread("t"), aggregates=1)
        assert found is not None and found.checkpoint["id"] == greatest
    # Our run deleted by the skewed writer: its (smaller) ids are all that is left.
    ours = [i.metadata.get("run_id") for i in everything if "mine" in (said(i) or [])]
    await other.delete_for_runs([r for r in ours if r])
    left = await api.reopened().list(thread("t"))
    found = await agree(api, thread("t"))
    expected = max((i.checkpoint["id"] for i in left), default=None)
    assert (found.checkpoint["id"] if found else None) == expected
    await agree(api, thread("t"), aggregates=1)


@pytest.mark.parametrize(
    "mine, theirs", [("a", "b"), ("b", "a"), ("9", "10"), ("10", "9"), ("é", "z")]
)
async def test_ids_that_are_not_uuid6(api: Api, mine: str, theirs: str) -> None:
    """Arbitrary ids a user puts: the latest is the greatest string, as in
    ``InMemorySaver`` fed the same puts."""
    reference = InMemorySaver()
    other = api.reopened()
    parent: dict[str, Any] = thread("t", checkpoint_ns="")
    for saver, checkpoint_id in ((api, mine), (other, theirs)):
        checkpoint = generate_checkpoint(
            checkpoint_id=checkpoint_id, channel_values={"a": checkpoint_id}
        )
        checkpoint["channel_versions"] = {"a": f"{len(checkpoint_id)}.{checkpoint_id}"}
        metadata = generate_metadata()
        versions = checkpoint["channel_versions"]
        parent_config = await saver.put(parent, checkpoint, metadata, versions)
        reference.put(parent, checkpoint, metadata, versions)
        parent = parent_config
    expected = reference.get_tuple(thread("t"))
    assert expected is not None
    for reader in (api, other):
        found = await agree(reader, thread("t"), aggregates=1)
        assert found is not None
        assert found.checkpoint["id"] == expected.checkpoint["id"] == max(mine, theirs)
        assert found.checkpoint["channel_values"] == expected.checkpoint["channel_values"]


# -- namespaces, copies, new runs --------------------------------------------------------


async def test_several_namespaces_deleted_apart(api: Api) -> None:
    runs: dict[str, list[str]] = {}
    stored: dict[str, list[Any]] = {}
    parents: dict[str, Any] = {}
    for n in range(3):
        for ns in ("", "child:1", "child:2"):
            run_id = str(uuid.uuid4())
            runs.setdefault(ns, []).append(run_id)
            checkpoint = generate_checkpoint(channel_values={"a": f"{ns}{n}"})
            checkpoint["channel_versions"] = {"a": f"{n + 1}"}
            stored.setdefault(ns, []).append(checkpoint)
            metadata = {**generate_metadata(), "run_id": run_id}
            parent = parents.get(ns, thread("t", checkpoint_ns=ns))
            parents[ns] = await api.put(parent, checkpoint, metadata, {"a": f"{n + 1}"})
    for ns in ("", "child:1", "child:2"):
        await api.get_tuple(thread("t", checkpoint_ns=ns))
    # The newest of child:1 and the middle one of the root namespace go.
    await api.reopened().delete_for_runs([runs["child:1"][-1], runs[""][-2]])
    expected = {
        "": stored[""][-1],
        "child:1": stored["child:1"][-2],
        "child:2": stored["child:2"][-1],
    }
    for ns in ("", "child:1", "child:2"):
        config = thread("t", checkpoint_ns=ns)
        found = await agree(api, config, aggregates=2 if ns == "child:1" else 1)
        assert found is not None
        assert found.checkpoint["id"] == expected[ns]["id"]
        assert found.checkpoint["channel_values"] == expected[ns]["channel_values"]
        await agree(api, config, aggregates=1)


async def test_copy_thread_into_a_thread_this_instance_knew(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "source", thread_id="src")
    await run_turn(api, graph, "target", thread_id="dst")  # newer ids than the source's
    await agree(api, thread("dst"))
    other = api.reopened()
    await other.delete_thread("dst")
    await other.copy_thread("src", "dst")
    found = await agree(api, thread("dst"), aggregates=2)
    assert said(found) == ["source"]
    await agree(api, thread("dst"), aggregates=1)
    await run_turn(api, graph, "more", thread_id="dst")
    found = await agree(api, thread("dst"), aggregates=1)
    assert said(found) == ["source", "more"]


@pytest.mark.parametrize("where", ["here", "there", "there behind"])
async def test_delete_thread_then_a_new_run(api: Api, where: str) -> None:
    graph = api.compile(chat_builder())
    for n in range(2):
        await run_turn(api, graph, f"old {n}")
    other = api.reopened()
    await (api if where == "here" else other).delete_thread("t")
    runner = api if where == "here" else other
    runner_graph = graph if runner is api else other.compile(chat_builder())
    if where == "there behind":
        with skewed_ids(timedelta(hours=-1)):
            await run_turn(runner, runner_graph, "new")
    else:
        await run_turn(runner, runner_graph, "new")
    found = await agree(api, thread("t"))
    assert said(found) == ["new"]
    await agree(api, thread("t"), aggregates=1)
    await run_turn(api, graph, "next")
    assert said(await agree(api, thread("t"), aggregates=1)) == ["new", "next"]


async def test_many_threads_past_the_memory(api: Api) -> None:
    """What the instance remembers is evicted (LRU): reads stay right."""
    memory = api.saver.memory
    memory._latest.budget = 2
    memory._heads.budget = 3 * THREAD_BYTES
    graph = api.compile(chat_builder())
    runs = {}
    for n in range(6):
        await run_turn(api, graph, f"a {n}", thread_id=f"t{n}")
        runs[n] = await run_turn(api, graph, f"b {n}", thread_id=f"t{n}")
    for n in range(6):
        await api.get_tuple(thread(f"t{n}"))
    await api.reopened().delete_for_runs([runs[n] for n in range(0, 6, 2)])
    for n in range(6):
        found = await agree(api, thread(f"t{n}"))
        assert said(found) == ([f"a {n}"] if n % 2 == 0 else [f"a {n}", f"b {n}"])
        found = await agree(api, thread(f"t{n}"))
        assert said(found) == ([f"a {n}"] if n % 2 == 0 else [f"a {n}", f"b {n}"])


# -- concurrency, list, serde ------------------------------------------------------------


async def test_concurrent_reads_across_a_deletion(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "kept")
    last = await run_turn(api, graph, "deleted")
    await api.reopened().delete_for_runs([last])
    found = await asyncio.gather(*(api.get_tuple(thread("t")) for _ in range(6)))
    cold = await api.reopened().get_tuple(thread("t"))
    assert all(comparable(f) == comparable(cold) for f in found)
    assert said(cold) == ["kept"]
    await agree(api, thread("t"), aggregates=1)


async def test_list_is_unaffected(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "kept")
    last = await run_turn(api, graph, "deleted")
    await api.get_tuple(thread("t"))
    await api.reopened().delete_for_runs([last])
    await api.get_tuple(thread("t"))
    warm = [comparable(i) for i in await api.list(thread("t"))]
    cold = [comparable(i) for i in await api.reopened().list(thread("t"))]
    assert warm == cold and warm
    limited = [comparable(i) for i in await api.list(thread("t"), limit=1)]
    assert limited == cold[:1]


async def test_encrypted_serializer(api: Api) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef" * 2)
    enc = api.reopened(serde=serde)
    graph = enc.compile(chat_builder())
    await run_turn(enc, graph, "kept")
    last = await run_turn(enc, graph, "deleted")
    await enc.reopened(serde=serde).delete_for_runs([last])
    counter = count_calls(enc.saver.collections)
    found = await enc.get_tuple(thread("t"))
    assert counter[AGGREGATE] == 2
    cold = await enc.reopened(serde=serde).get_tuple(thread("t"))
    assert comparable(found) == comparable(cold) and said(found) == ["kept"]
    counter.clear()
    await enc.get_tuple(thread("t"))
    assert counter[AGGREGATE] == 1


# -- the DeltaChannel prefetch ------------------------------------------------------------


async def test_prefetch_with_the_latest_deleted_elsewhere(api: Api) -> None:
    talk = Conversation(api)
    latest = await replaying_latest(talk)
    assert latest is not None
    other = api.reopened()
    await other.prune(["t"], strategy="keep_latest")  # kept: no read more
    await agree(api, thread("t"), aggregates=1)
    # The replaying latest taken back by hand (as a delete of its run would).
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest.checkpoint["id"]}
    await maybe_await(api.raw(CHECKPOINTS).delete_one(key))
    found = await agree(api, thread("t"))
    assert found is None or found.checkpoint["id"] < latest.checkpoint["id"]


async def test_prefetch_with_the_thread_deleted_elsewhere(api: Api) -> None:
    """The newest known is gone and nothing is left: the prefetch, the bounded read and the
    whole read all find nothing. The contract: two aggregations when the newest known is
    gone."""
    talk = Conversation(api)
    await replaying_latest(talk)
    await api.reopened().delete_thread("t")
    assert await agree(api, thread("t"), aggregates=2) is None
    assert await agree(api, thread("t"), aggregates=1) is None


async def test_prefetch_with_only_the_replaying_latest_deleted(api: Api) -> None:
    """The replaying latest deleted by hand, its parent left in the range the prefetch
    reads: found by the prefetch (or the reads after it), at most two aggregations."""
    talk = Conversation(api)
    latest = await replaying_latest(talk)
    expected_left = [
        i for i in await api.list(thread("t")) if i.checkpoint["id"] != latest.checkpoint["id"]
    ]
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest.checkpoint["id"]}
    await maybe_await(api.raw(CHECKPOINTS).delete_one(key))
    counter = count_calls(api.saver.collections)
    found = await api.get_tuple(thread("t"))
    reads = counter[AGGREGATE]
    cold = await api.reopened().get_tuple(thread("t"))
    assert comparable(found) == comparable(cold)
    assert found is not None and found.checkpoint["id"] == expected_left[0].checkpoint["id"]
    assert reads <= 2, reads


# -- a whole read racing this instance's own put -----------------------------------------


def test_own_put_racing_a_whole_read_keeps_the_written_head(saver: Any) -> None:
    """Sync driver, step by step: the whole read answered before this instance's put of a
    newer checkpoint, noted after it. The written head must stay known (the next put bases
    its list delta on it, and ``newest_known`` bounds the next read from it)."""
    from mongo_ckpt.drivers import execute

    api_graph = chat_builder().compile(checkpointer=saver)
    config = {**thread("t"), "metadata": {"run_id": "r1"}}
    api_graph.invoke({"messages": [HumanMessage("kept")]}, config)
    api_graph.invoke(
        {"messages": [HumanMessage("deleted")]}, {**thread("t"), "metadata": {"run_id": "r2"}}
    )
    type(saver)(saver.client, saver.db.name).delete_for_runs(["r2"])
    gen = saver.ops.get_tuple(thread("t"))
    step = gen.send(None)  # the bounded read
    step = gen.send(execute(saver.collections, step))  # nothing: the whole read
    answer = execute(saver.collections, step)  # answered: "kept"
    api_graph.invoke(
        {"messages": [HumanMessage("racing")]}, {**thread("t"), "metadata": {"run_id": "r3"}}
    )
    written = saver.memory.newest_known("t", "")
    try:
        while True:
            step = gen.send(answer)
            answer = execute(saver.collections, step)
    except StopIteration as stop:
        found = stop.value
    assert said(found) == ["kept"]
    assert saver.memory.newest_known("t", "") == written


def _delta_parts(saver: Any, thread_id: str) -> int:
    """How many ``messages`` versions of the thread are stored as list deltas."""
    query = {"thread_id": thread_id, "channel": "messages", "part": 0, "base": {"$exists": True}}
    return int(saver.collections[BLOBS].count_documents(query))


@pytest.mark.parametrize("race", [False, True])
def test_a_run_whose_head_a_racing_read_dropped_stores_lists_whole(saver: Any, race: bool) -> None:
    """What the dropped head costs: a poll (``get_state`` from an API worker sharing the
    saver) whose whole read found the older latest, noted while the run is between two
    supersteps, makes the run's next put store the message list whole instead of as a
    delta of the version the run wrote a step before."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from mongo_ckpt.drivers import execute

    def drive(gen: Any, answer: Any) -> Any:
        try:
            while True:
                answer = execute(saver.collections, gen.send(answer))
        except StopIteration as stop:
            return stop.value

    poll: dict[str, Any] = {}

    def first(state: MessagesState) -> dict:
        return {"messages": [AIMessage("one")]}

    def second(state: MessagesState) -> dict:
        if "gen" in poll:  # the poll notes what its whole read found, mid-run
            poll["found"] = drive(poll.pop("gen"), poll.pop("answer"))
        return {"messages": [AIMessage("two")]}

    builder = StateGraph(MessagesState)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    graph = builder.compile(checkpointer=saver)
    for n in range(3):
        graph.invoke({"messages": [HumanMessage(f"kept {n}")]}, thread("t"))
    graph.invoke({"messages": [HumanMessage("deleted")]}, {**thread("t"), "run_id": "gone"})
    last = saver.get_tuple(thread("t"))
    assert last is not None
    other = type(saver)(saver.client, saver.db.name)
    doomed = [i.config for i in other.list(thread("t"), limit=4)]
    for config in doomed:  # the last run's checkpoints, deleted by another instance
        key = {"thread_id": "t", "checkpoint_ns": "", **config["configurable"]}
        saver.collections[CHECKPOINTS].delete_one(key)
    gen = saver.ops.get_tuple(thread("t"))
    bounded = execute(saver.collections, gen.send(None))
    assert bounded == []  # the newest known is gone: the whole read comes next
    answer = execute(saver.collections, gen.send(bounded))
    if race:
        poll.update(gen=gen, answer=answer)
    before = _delta_parts(saver, "t")
    graph.invoke({"messages": [HumanMessage("next")]}, thread("t"))
    if not race:
        drive(gen, answer)
    # The run's three list versions (input, first, second): each a delta of the one before.
    assert _delta_parts(saver, "t") - before == 3


def _snapshot(state: Any) -> Any:
    """A state snapshot without its ids: values, next, and each subgraph task's state."""
    inner = [
        (t.name, t.state.values, t.state.next) if t.state is not None else (t.name, None, None)
        for t in state.tasks
    ]
    return state.values, state.next, inner


async def test_a_subgraph_resumed_and_rerun_by_another_instance(api: Api) -> None:
    """Real subgraph namespaces: the run interrupted here, resumed by another instance, then
    deleted and run again there; this instance's states equal ``InMemorySaver``'s."""
    from collections import Counter

    from langgraph.types import Command


    reference = parent_builder(Counter()).compile(checkpointer=InMemorySaver())
    graph = api.compile(parent_builder(Counter()))
    other = api.reopened()
    other_graph = other.compile(parent_builder(Counter()))
    config = thread("t")

    async def check() -> None:
        ours = await api.state(graph, config, subgraphs=True)
        theirs = reference.get_state(config, subgraphs=True)
        assert _snapshot(ours) == _snapshot(theirs)
        cold = await api.reopened().state(graph, config, subgraphs=True)
        assert _snapshot(cold) == _snapshot(theirs)

    await api.invoke(graph, {"topic": "mongo"}, config)
    reference.invoke({"topic": "mongo"}, config)
    await check()
    await other.invoke(other_graph, Command(resume="ok"), config)
    reference.invoke(Command(resume="ok"), config)
    await check()
    await other.delete_thread("t")
    reference.checkpointer.delete_thread("t")  # type: ignore[union-attr]
    with skewed_ids(timedelta(hours=-1)):
        await other.invoke(other_graph, {"topic": "again"}, config)
    reference.invoke({"topic": "again"}, config)
    await check()
    await api.invoke(graph, Command(resume="fine"), config)
    reference.invoke(Command(resume="fine"), config)
    await check()


@pytest.mark.parametrize("deletion", DELETIONS, ids=lambda f: f.__name__.strip("_"))
async def test_every_deletion_by_this_instance(api: Api, deletion: Any) -> None:
    graph = api.compile(chat_builder())
    runs = [await run_turn(api, graph, f"turn {n}") for n in range(3)]
    await api.get_tuple(thread("t"))
    await deletion(api, runs)
    cold = await agree(api, thread("t"))
    await agree(api, thread("t"), aggregates=1)
    await run_turn(api, graph, "after")
    latest = await agree(api, thread("t"), aggregates=1)
    assert said(latest) == [*(said(cold) or []), "after"]


async def test_another_writer_with_a_clock_ahead(api: Api) -> None:
    """Its checkpoint has a greater id than the ones this instance writes on it next: the
    latest stays the greatest id (``InMemorySaver``'s), read in one aggregation, until that
    one is deleted; then this instance's own, newest remaining."""
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "mine")
    other = api.reopened()
    with skewed_ids(timedelta(hours=1)):
        ahead = await run_turn(other, other.compile(chat_builder()), "theirs ahead")
    await run_turn(api, graph, "mine after")
    everything = await api.reopened().list(thread("t"))
    greatest = max(i.checkpoint["id"] for i in everything)
    found = await agree(api, thread("t"), aggregates=1)
    assert found is not None and found.checkpoint["id"] == greatest
    await other.delete_for_runs([ahead])
    found = await agree(api, thread("t"), aggregates=2)
    assert found is not None and said(found) == ["mine", "theirs ahead", "mine after"]
    await agree(api, thread("t"), aggregates=1)


async def test_polls_racing_a_run_after_a_deletion(api: Api) -> None:
    """Reads of this instance concurrent with its own run, after another instance deleted
    the newest checkpoint it knew: each returns a state the thread had, and afterwards the
    latest is read in one aggregation."""
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "kept")
    last = await run_turn(api, graph, "deleted")
    await api.reopened().delete_for_runs([last])
    results = await asyncio.gather(
        run_turn(api, graph, "racing"), *(api.get_tuple(thread("t")) for _ in range(4))
    )
    for polled in results[1:]:
        assert said(polled) in (["kept"], ["kept", "racing"])
    found = await agree(api, thread("t"), aggregates=1)
    assert said(found) == ["kept", "racing"]


@pytest.mark.parametrize("newer", [False, True])
async def test_prefetch_state_after_the_latest_deleted(api: Api, newer: bool) -> None:
    """The replaying latest this instance wrote deleted (and, with ``newer``, another
    instance's turn on its parent stored meanwhile): the state this instance's graph loads
    (tuple, then the DeltaChannel history LangGraph asks for) is a cold instance's."""
    from tests.delta_graphs import message_summary
    from tests.perf.conversation import DELTA, chat_graph, human_message

    talk = Conversation(api)
    latest = await replaying_latest(talk)
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest.checkpoint["id"]}
    await maybe_await(api.raw(CHECKPOINTS).delete_one(key))
    cold = api.reopened()
    cold_graph = chat_graph(cold.saver, DELTA, 4)
    if newer:
        await cold.invoke(cold_graph, {"messages": [human_message(99)]}, thread("t"))
    ours = await api.state(talk.graphs[0], thread("t"))
    theirs = await api.reopened().state(chat_graph(api.reopened().saver, DELTA, 4), thread("t"))
    assert ours.config == theirs.config
    assert message_summary(ours.values["messages"]) == message_summary(theirs.values["messages"])
