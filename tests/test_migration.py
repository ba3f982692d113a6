"""Migration from langgraph-checkpoint-mongodb 0.5.1: data written in the test by the
official saver through real graphs (interrupts, a subgraph, parallel pending writes,
forks, EncryptedSerializer), converted, verified, and continued on mongo-ckpt."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from operator import add
from typing import Annotated, Any

import bson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.layout import CHECKPOINTS
from mongo_ckpt.migration import (
    Source,
    convert_versions,
    migrate_from_official,
    verify_migration,
)
from mongo_ckpt.official import OfficialFormatError
from tests.backends import aclose, async_client, sync_client
from tests.delta_graphs import messages_state
from tests.faults import Fault, Faults
from tests.graphs import chat_builder, contents, thread

OfficialSaver = pytest.importorskip(
    "langgraph.checkpoint.mongodb",
    reason="migrates data of langgraph-checkpoint-mongodb: pip install -e '.[test,bench]'",
).MongoDBSaver


KEY = b"0123456789abcdef"


class Job(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], add]
    answer: str
    verdict: str


def article_builder() -> StateGraph:
    """The subgraph: draft -> review (interrupts)."""

    def draft(state: Job) -> dict:
        return {"notes": [f"draft {state['topic']}"]}

    def review(state: Job) -> dict:
        return {"verdict": interrupt({"review": state["notes"][-1]})}

    builder = StateGraph(Job)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", END)
    return builder


def job_builder() -> StateGraph:
    """plan -> (research | ask: interrupts) -> article (subgraph, interrupts) -> END.

    While ``ask`` waits, ``research``'s finished write is a pending write."""

    def plan(state: Job) -> dict:
        return {"notes": [f"plan {state['topic']}"]}

    def research(state: Job) -> dict:
        return {"notes": ["research"]}

    def ask(state: Job) -> dict:
        return {"answer": interrupt({"question": f"go ahead with {state['topic']}?"})}

    builder = StateGraph(Job)
    builder.add_node("plan", plan)
    builder.add_node("research", research)
    builder.add_node("ask", ask)
    builder.add_node("article", article_builder().compile())
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "research")
    builder.add_edge("plan", "ask")
    builder.add_edge(["research", "ask"], "article")
    builder.add_edge("article", END)
    return builder


def write_small_threads(official: OfficialSaver, count: int) -> None:
    chat = chat_builder().compile(checkpointer=official)
    for i in range(count):
        chat.invoke({"messages": [HumanMessage(f"hello {i}")]}, thread(f"small-{i}"))


def write_official_threads(official: OfficialSaver) -> None:
    """Threads in every state a migration meets, written by the official saver."""
    jobs = job_builder().compile(checkpointer=official)
    jobs.invoke({"topic": "mongo"}, thread("waits-at-ask"))
    jobs.invoke({"topic": "mongo"}, thread("waits-in-subgraph"))
    jobs.invoke(Command(resume="yes"), thread("waits-in-subgraph"))
    jobs.invoke({"topic": "mongo"}, thread("done"))
    jobs.invoke(Command(resume="yes"), thread("done"))
    jobs.invoke(Command(resume="ship it"), thread("done"))
    chat = chat_builder().compile(checkpointer=official)
    for text in ("one", "two", "three"):
        chat.invoke({"messages": [HumanMessage(text)]}, thread("chat"))
    # A fork from the first turn: the official saver numbers versions 1, 2, 3... so the
    # fork reuses numbers of the original branch for different values.
    first = list(chat.get_state_history(thread("chat")))[-3]
    forked = chat.update_state(first.config, {"messages": [HumanMessage("fork")]})
    chat.invoke(None, forked)
    write_small_threads(official, 6)  # to span several batches


def snapshot(db: Any) -> str:
    """A digest of every document of every collection of ``db``."""
    h = hashlib.sha256()
    for name in sorted(db.list_collection_names()):
        for doc in db[name].find({}, sort=[("_id", 1)]):
            h.update(bson.encode(doc))
    return h.hexdigest()


def readable(tuple_: Any) -> tuple:
    """What both savers must agree on for one checkpoint."""
    configurable = tuple_.config["configurable"]
    parent = (tuple_.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (
        configurable["checkpoint_ns"],
        configurable["checkpoint_id"],
        parent,
        tuple_.metadata,
        sorted(tuple_.pending_writes or [], key=repr),
        tuple_.checkpoint["channel_values"],
    )


def thread_ids(official: OfficialSaver) -> list[str]:
    return sorted(official.checkpoint_collection.distinct("thread_id"))


ENCRYPTED = pytest.mark.parametrize("serde", ["plain", "encrypted"], indirect=True)


@pytest.fixture
def serde(request: Any) -> Any:
    """Plain, unless a test is parametrized with ``ENCRYPTED``."""
    if getattr(request, "param", "plain") == "encrypted":
        return EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    return None


@pytest.fixture
def empty_source(client: Any, db_name: str, serde: Any) -> Iterator[tuple[OfficialSaver, Source]]:
    """The official saver on a database of its own, and that database as a ``Source``."""
    yield OfficialSaver(client, f"{db_name}_src", serde=serde), Source(f"{db_name}_src")
    client.drop_database(f"{db_name}_src")


@pytest.fixture
def source(empty_source: tuple[OfficialSaver, Source]) -> tuple[OfficialSaver, Source]:
    """``empty_source`` holding ``write_official_threads``."""
    write_official_threads(empty_source[0])
    return empty_source


@pytest.fixture
def dest(client: Any, db_name: str, serde: Any) -> Iterator[MongoDBSaver]:
    yield MongoDBSaver(client, db_name, serde=serde)
    client.drop_database(db_name)


@ENCRYPTED
def test_migrated_threads_read_as_the_official_saver_reads_them_and_go_on(
    source: tuple[OfficialSaver, Source], dest: MongoDBSaver
) -> None:
    official, src = source
    before = snapshot(official.db)
    seen = []
    done = migrate_from_official(dest, src, batch=3, progress=lambda p: seen.append(p.threads))
    threads = thread_ids(official)
    assert (done.threads, done.checkpoints) == (
        len(threads),
        official.checkpoint_collection.count_documents({}),
    )
    assert done.writes == official.writes_collection.count_documents({}) > 0
    assert seen == [0, 3, 6, 9, len(threads)]  # progress first, then after each batch of 3
    assert snapshot(official.db) == before  # the source is only read

    report = verify_migration(dest, src)
    assert report.mismatches == []
    assert (report.threads, report.checkpoints) == (done.threads, done.checkpoints)
    # Every checkpoint of every thread (all namespaces) reads the same through both savers.
    for thread_id in threads:
        expected = [readable(t) for t in official.list(thread(thread_id))]
        assert [readable(t) for t in dest.list(thread(thread_id))] == expected
    waiting = dest.get_tuple(thread("waits-at-ask"))
    channels = {(channel, repr(value)) for _, channel, value in waiting.pending_writes}
    assert ("notes", repr(["research"])) in channels  # the parallel node's finished write
    assert "__interrupt__" in {channel for channel, _ in channels}

    # The graphs go on from where the official saver left them, to the end the official
    # saver reached on the thread it ran to completion.
    final = job_builder().compile(checkpointer=official).get_state(thread("done")).values
    assert final["verdict"] == "ship it" and final["notes"][-1] == "draft mongo"
    jobs = job_builder().compile(checkpointer=dest)
    interrupted = jobs.invoke(Command(resume="yes"), thread("waits-at-ask"))
    assert [i.value for i in interrupted["__interrupt__"]] == [{"review": "draft mongo"}]
    assert jobs.invoke(Command(resume="ship it"), thread("waits-at-ask")) == final
    assert jobs.invoke(Command(resume="ship it"), thread("waits-in-subgraph")) == final
    assert jobs.get_state(thread("done")).values == final
    chat = chat_builder().compile(checkpointer=dest)
    result = chat.invoke({"messages": [HumanMessage("four")]}, thread("chat"))
    assert contents(result["messages"]) == [
        ("human", "one"),
        ("ai", "#1: one"),
        ("human", "fork"),  # added as the bot: the fork waits for the next input
        ("human", "four"),
        ("ai", "#4: four"),
    ]
    # The original branch is still there, with the values of its own version numbers.
    history = chat.get_state_history(thread("chat"))
    ends = {contents(s.values["messages"])[-1] for s in history if s.values.get("messages")}
    assert {("ai", "#5: three"), ("ai", "#3: two"), ("human", "fork")} <= ends


def test_migration_cut_and_resumed_gives_the_same_result(
    source: tuple[OfficialSaver, Source], client: Any, db_name: str
) -> None:
    """Plain values only: encrypted bytes differ on every write, and this compares bytes."""
    official, src = source
    # Calls are numbered alike on both: no first setup's hello on one (a migration writes
    # one bulk write per collection anyway).
    reference = MongoDBSaver(client, f"{db_name}_ref", client_bulk_write=False)
    cut = MongoDBSaver(client, db_name, client_bulk_write=False)
    # Both runs with one version key (a run keeps its key in the progress marker).
    type_, data = reference.serde.dumps_typed(b"k" * 32)
    for saver in (reference, cut):
        marker = {"_id": src.marker, "version_key": {"type": type_, "data": data}}
        saver.collections["schema"].insert_one(marker)
    calls = Faults(reference.collections)
    migrate_from_official(reference, src, batch=4)
    # Cut the second batch's checkpoints write after two of its documents.
    second = [
        i
        for i, (name, method, _) in enumerate(calls.calls)
        if name == CHECKPOINTS and method == "bulk_write"
    ][1]
    faults = Faults(cut.collections)
    faults.arm(Fault(second, "cut", k=2))
    with pytest.raises(Exception, match="injected"):
        migrate_from_official(cut, src, batch=4)
    faults.restore()
    partial = cut.collections[CHECKPOINTS].count_documents({})
    assert 0 < partial < official.checkpoint_collection.count_documents({})
    resumed = migrate_from_official(cut, src, batch=4)
    assert resumed.threads == len(thread_ids(official))
    assert verify_migration(cut, src).mismatches == []
    # Rerunning a finished migration, resumed or from the start, changes nothing.
    migrate_from_official(cut, src, batch=4)
    migrate_from_official(cut, src, batch=2, restart=True)
    for logical in cut.layout.by_logical():
        collection = cut.collections[logical]
        projection = {"_id": 0, "created_at": 0, "touched_at": 0}  # the server's write times
        got = sorted(map(bson.encode, collection.find({}, projection)))
        want = sorted(map(bson.encode, reference.collections[logical].find({}, projection)))
        assert got == want, logical
    client.drop_database(f"{db_name}_ref")


def test_metadata_of_releases_before_0_2_2_is_read(
    source: tuple[OfficialSaver, Source], dest: MongoDBSaver
) -> None:
    """Before 0.2.2 the official saver stored each metadata leaf as bare JSON bytes,
    which its 0.3 release no longer reads."""
    official, src = source
    expected = {t.config["configurable"]["checkpoint_id"]: t.metadata for t in official.list(None)}
    for doc in official.checkpoint_collection.find({"thread_id": "chat"}):
        meta = {k: _json_leaves(v) for k, v in doc["metadata"].items()}
        official.checkpoint_collection.update_one({"_id": doc["_id"]}, {"$set": {"metadata": meta}})
    assert isinstance(
        official.checkpoint_collection.find_one({"thread_id": "chat"})["metadata"]["step"], bytes
    )
    migrate_from_official(dest, src)
    assert verify_migration(dest, src).mismatches == []
    for t in dest.list(None):
        assert t.metadata == expected[t.config["configurable"]["checkpoint_id"]]


def _json_leaves(value: Any) -> Any:
    import json

    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    if isinstance(value, dict):
        return {k: _json_leaves(v) for k, v in value.items()}
    return json.dumps(JsonPlusSerializer().loads_typed(tuple(value))).encode()


def test_verification_reports_differences(
    empty_source: tuple[OfficialSaver, Source], dest: MongoDBSaver
) -> None:
    official, src = empty_source
    write_small_threads(official, 4)
    migrate_from_official(dest, src)
    latest = dest.get_tuple(thread("small-2"))
    dest.collections[CHECKPOINTS].delete_one(
        {"thread_id": "small-2", "checkpoint_id": latest.config["configurable"]["checkpoint_id"]}
    )
    dest.collections[CHECKPOINTS].update_one(
        {"thread_id": "small-3", "parent_checkpoint_id": {"$ne": None}},
        {"$set": {"parent_checkpoint_id": "elsewhere"}},
    )
    found = {(m.thread_id, m.field) for m in verify_migration(dest, src).mismatches}
    assert found == {("small-2", "checkpoint"), ("small-3", "parent")}


BIG = "small-1-big"  # sorts between small-1 and small-2: threads on both sides migrate
# Valid for langgraph-checkpoint-mongodb (one copy, under 16 MiB); mongo-ckpt stores this
# metadata twice (plain BSON would give the int64 back as ``bson.Int64``), over its 15 MiB
# checkpoint-document limit.
BIG_METADATA = {"note": "x" * (8 * 2**20), "wide": 2**40}


def write_big_thread(official: OfficialSaver) -> None:
    chat = chat_builder().compile(checkpointer=official)
    config = {**thread(BIG), "metadata": BIG_METADATA}
    chat.invoke({"messages": [HumanMessage("a big one")]}, config)


def test_a_thread_that_cannot_be_converted_is_skipped_and_reported(
    empty_source: tuple[OfficialSaver, Source], dest: MongoDBSaver
) -> None:
    official, src = empty_source
    write_small_threads(official, 4)
    write_big_thread(official)
    big = official.checkpoint_collection.count_documents({"thread_id": BIG})
    newest = official.checkpoint_collection.find_one(
        {"thread_id": BIG}, sort=[("checkpoint_id", -1)]
    )
    done = migrate_from_official(dest, src, batch=2)
    [skip] = done.skipped
    assert (skip.thread_id, skip.checkpoint_ns, skip.checkpoints) == (BIG, "", big)
    assert skip.checkpoint_id == newest["checkpoint_id"]  # the first converted, newest first
    assert "15 MiB" in skip.reason and "metadata" in skip.reason
    total = official.checkpoint_collection.count_documents({})
    assert (done.threads, done.checkpoints) == (4, total - big)
    assert dest.get_tuple(thread(BIG)) is None  # nothing of the thread is stored
    assert dest.collections[CHECKPOINTS].count_documents({"thread_id": BIG}) == 0
    for i in range(4):
        expected = [readable(t) for t in official.list(thread(f"small-{i}"))]
        assert [readable(t) for t in dest.list(thread(f"small-{i}"))] == expected
    # Verification compares the rest and lists the skipped thread as skipped.
    report = verify_migration(dest, src)
    assert report.mismatches == [] and report.skipped == [skip]
    assert (report.threads, report.checkpoints) == (4, total - big)
    # A rerun (resumed, or from the start) reports the same skip and changes nothing.
    for restart in (False, True):
        again = migrate_from_official(dest, src, batch=2, restart=restart)
        assert (again.threads, again.checkpoints, again.skipped) == (4, total - big, [skip])
    # Once the source thread fits, a rerun converts it.
    for doc in official.checkpoint_collection.find({"thread_id": BIG}):
        small = official.checkpoint_collection.find_one({"thread_id": "small-0"})
        official.checkpoint_collection.update_one(
            {"_id": doc["_id"]}, {"$set": {"metadata": small["metadata"]}}
        )
    fixed = migrate_from_official(dest, src, batch=2)
    assert (fixed.threads, fixed.checkpoints, fixed.skipped) == (5, total, [])
    assert verify_migration(dest, src).skipped == []
    assert dest.get_tuple(thread(BIG)) is not None


def test_a_migration_cut_after_a_skip_resumes_with_it(
    empty_source: tuple[OfficialSaver, Source], client: Any, db_name: str
) -> None:
    official, src = empty_source
    write_small_threads(official, 4)
    write_big_thread(official)
    # Calls are numbered alike on both: no first setup's hello on one.
    reference = MongoDBSaver(client, f"{db_name}_ref", client_bulk_write=False)
    calls = Faults(reference.collections)
    expected = migrate_from_official(reference, src, batch=1)
    # Cut the checkpoints write of small-2, the batch after the skipped thread's.
    writes = [
        i
        for i, (name, method, _) in enumerate(calls.calls)
        if name == CHECKPOINTS and method == "bulk_write"
    ]
    assert len(writes) == 4  # the skipped thread writes nothing
    cut = MongoDBSaver(client, db_name, client_bulk_write=False)
    faults = Faults(cut.collections)
    faults.arm(Fault(writes[2], "cut", k=1))
    with pytest.raises(Exception, match="injected"):
        migrate_from_official(cut, src, batch=1)
    faults.restore()
    resumed = migrate_from_official(cut, src, batch=1)
    assert resumed.skipped == expected.skipped and [s.thread_id for s in resumed.skipped] == [BIG]
    assert (resumed.threads, resumed.checkpoints) == (expected.threads, expected.checkpoints)
    report = verify_migration(cut, src)
    assert report.mismatches == [] and report.skipped == expected.skipped
    client.drop_database(f"{db_name}_ref")


def test_source_collections_must_differ_from_the_target(client: Any, db_name: str) -> None:
    with pytest.raises(ValueError, match="migrate into another database"):
        migrate_from_official(MongoDBSaver(client, db_name), Source(db_name))
    with pytest.raises(ValueError, match="positive number of threads"):
        migrate_from_official(MongoDBSaver(client, db_name), Source("other"), batch=0)


def test_fork_versions_that_the_official_saver_reuses_stay_apart() -> None:
    base = {"v": 4, "id": "x", "ts": "2024-01-01T00:00:00+00:00", "updated_channels": None}
    one = {
        **base,
        "channel_values": {"m": ["a"]},
        "channel_versions": {"m": 2, "go": 2},
        "versions_seen": {"bot": {"m": 2, "go": 1}},
    }
    two = {**one, "channel_values": {"m": ["b"]}}
    key = b"k" * 32
    a, b = (convert_versions(c, key, "t", "") for c in (one, two))
    assert a["channel_versions"]["m"] != b["channel_versions"]["m"]
    assert a["channel_versions"]["m"].startswith("000000000002.")
    assert a["channel_versions"]["go"] == "000000000002"  # no value: no tail
    # What a node saw maps exactly as the channel's version, so LangGraph compares the same.
    assert a["versions_seen"]["bot"] == {"m": a["channel_versions"]["m"], "go": "000000000001"}
    assert convert_versions(one, key, "t", "") == a  # the same value: the same version
    # Another key, or the same value in another thread, namespace: another tail.
    for other in (convert_versions(one, b"j" * 32, "t", ""), convert_versions(one, key, "u", ""),
                  convert_versions(one, key, "t", "sub")):
        assert other["channel_versions"]["m"] != a["channel_versions"]["m"]


def delta_chat_builder() -> StateGraph:
    """START -> bot -> END on a ``DeltaChannel`` messages list (a snapshot every 3 steps)."""

    def bot(state: dict) -> dict:
        return {"messages": [AIMessage(f"#{len(state['messages'])}")]}

    builder = StateGraph(messages_state(delta=True, snapshot_frequency=3))
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder


@ENCRYPTED
def test_delta_channel_threads_read_the_same_after_migration(
    empty_source: tuple[OfficialSaver, Source], dest: MongoDBSaver
) -> None:
    official, src = empty_source
    before = delta_chat_builder().compile(checkpointer=official)
    for i in range(7):
        before.invoke({"messages": [HumanMessage(f"turn {i}")]}, thread("delta"))
    migrate_from_official(dest, src)
    assert verify_migration(dest, src).mismatches == []
    after = delta_chat_builder().compile(checkpointer=dest)
    # Every checkpoint's state, rebuilt from the DeltaChannel's history, is the same.
    expected = [s.values for s in before.get_state_history(thread("delta"))]
    assert [s.values for s in after.get_state_history(thread("delta"))] == expected
    result = after.invoke({"messages": [HumanMessage("turn 7")]}, thread("delta"))
    assert contents(result["messages"])[-2:] == [("human", "turn 7"), ("ai", "#15")]


def test_a_source_that_is_not_official_data_is_refused(client: Any, db_name: str) -> None:
    ours = MongoDBSaver(client, f"{db_name}_ours")
    chat_builder().compile(checkpointer=ours).invoke(
        {"messages": [HumanMessage("hi")]}, thread("t")
    )
    dest = MongoDBSaver(client, db_name)
    try:
        with pytest.raises(OfficialFormatError, match="not a langgraph-checkpoint-mongodb"):
            migrate_from_official(dest, Source(f"{db_name}_ours"))
        assert dest.collections[CHECKPOINTS].count_documents({}) == 0
    finally:
        client.drop_database(f"{db_name}_ours")
        client.drop_database(db_name)


async def test_async_saver_continues_migrated_threads(db_name: str) -> None:
    """The async saver (PyMongo's AsyncMongoClient over the wire) reads and continues
    what the migration wrote."""
    client = sync_client("wire")
    aclient = async_client("wire", "pymongo")
    try:
        official = OfficialSaver(client, f"{db_name}_src")
        jobs = job_builder().compile(checkpointer=official)
        await asyncio.to_thread(jobs.invoke, {"topic": "mongo"}, thread("waits-at-ask"))
        migrate_from_official(MongoDBSaver(client, db_name), Source(f"{db_name}_src"))
        graph = job_builder().compile(checkpointer=AsyncMongoDBSaver(aclient, db_name))
        state = await graph.aget_state(thread("waits-at-ask"))
        assert state.next == ("ask",) and state.values["notes"] == ["plan mongo", "research"]
        interrupted = await graph.ainvoke(Command(resume="yes"), thread("waits-at-ask"))
        assert [i.value for i in interrupted["__interrupt__"]] == [{"review": "draft mongo"}]
        done = await graph.ainvoke(Command(resume="ship it"), thread("waits-at-ask"))
        assert done["verdict"] == "ship it" and done["answer"] == "yes"
    finally:
        for name in (db_name, f"{db_name}_src"):
            client.drop_database(name)
        client.close()
        await aclose(aclient)
