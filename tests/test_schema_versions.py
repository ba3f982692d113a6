"""Versioned layout: ``setup()`` records the version and refuses pre-release layouts and
data written by a newer mongo-ckpt (the mechanism on a ladder of several versions:
``tests/test_layout_ladder.py``)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from mongo_ckpt import (
    MongoDBSaver,
    SchemaTooNewError,
    SchemaUpgradeRequired,
    schema,
)
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.schema import (
    SAVER_SCHEMA_VERSION,
    SCHEMA_COLLECTION,
    STORE_SCHEMA_VERSION,
    read_version,
    saver_key,
    store_key,
)
from mongo_ckpt.store import MongoDBStore
from mongo_ckpt.store.operations import StoreOperations
from tests.backends import count_calls, maybe_await, sync_client
from tests.graphs import chat_builder, thread
from tests.layout_support import recorded_meanwhile
from tests.saver_support import Api


async def schema_doc(saver: Any, key: str) -> dict | None:
    return await maybe_await(saver.db[SCHEMA_COLLECTION].find_one({"_id": key}))


async def set_version(saver: Any, key: str, version: int | None) -> None:
    coll = saver.db[SCHEMA_COLLECTION]
    if version is None:
        await maybe_await(coll.delete_one({"_id": key}))
    else:
        await maybe_await(coll.update_one({"_id": key}, {"$set": {"version": version}}))


async def chat(run: Api, *turns: str) -> list:
    graph = run.compile(chat_builder())
    for text in turns:
        await run.invoke(graph, {"messages": [HumanMessage(text)]}, thread("t"))
    return (await run.state(graph, thread("t"))).values["messages"]


async def count(run: Api, logical: str, query: dict) -> int:
    name = run.saver.layout.by_logical()[logical]
    return await maybe_await(run.saver.db[name].count_documents(query))


# -- the saver ------------------------------------------------------------------


async def check_setup_records_the_version(run: Api) -> None:
    await chat(run, "hi")
    doc = await schema_doc(run.saver, saver_key("checkpoints"))
    assert doc["version"] == SAVER_SCHEMA_VERSION
    assert doc["collections"] == run.saver.layout.by_logical()
    assert doc["written_by"].startswith("mongo-ckpt ")
    # Recorded: the next saver's setup is one round trip.
    again = run.reopened()
    calls = count_calls(again.saver.collections)
    await maybe_await(again.saver.setup())
    assert dict(calls) == {("schema", "find_one"): 1}


async def check_newer_layout_is_refused(run: Api) -> None:
    await chat(run, "one")
    await set_version(run.saver, saver_key("checkpoints"), SAVER_SCHEMA_VERSION + 1)
    counts = {c: await count(run, c, {}) for c in (CHECKPOINTS, BLOBS, WRITES)}
    later = run.reopened()
    graph = later.compile(chat_builder())
    with pytest.raises(SchemaTooNewError) as raised:
        await later.invoke(graph, {"messages": [HumanMessage("two")]}, thread("t"))
    message = str(raised.value)
    assert f"layout version {SAVER_SCHEMA_VERSION + 1}" in message
    assert "upgrade mongo-ckpt to a newer release" in message
    with pytest.raises(SchemaTooNewError):
        await later.state(graph, thread("t"))
    # Refused before anything was read or written, and the version was not lowered.
    assert {c: await count(run, c, {}) for c in counts} == counts
    doc = await schema_doc(run.saver, saver_key("checkpoints"))
    assert doc["version"] == SAVER_SCHEMA_VERSION + 1


async def test_setup_records_the_version(api: Api) -> None:
    await check_setup_records_the_version(api)


def test_read_version_reads_the_recorded_version(saver: MongoDBSaver) -> None:
    assert read_version(saver.db, saver_key("checkpoints")) == SAVER_SCHEMA_VERSION


@pytest.mark.parametrize("recorded", [None, 1, SAVER_SCHEMA_VERSION - 1],
                         ids=["unrecorded", "version 1", "the version before"])
async def test_pre_release_data_is_refused_and_left_as_it_was(
    api: Api, recorded: int | None
) -> None:
    """Data a development build wrote before the first release (a version below the
    current one, or none): setup refuses it with ``SchemaUpgradeRequired`` naming what to
    do, and writes nothing, not even the version."""
    await chat(api, "one", "two")
    key = saver_key("checkpoints")
    await set_version(api.saver, key, recorded)
    counts = {c: await count(api, c, {}) for c in (CHECKPOINTS, BLOBS, WRITES)}
    later = api.reopened()
    graph = later.compile(chat_builder())
    with pytest.raises(SchemaUpgradeRequired) as raised:
        await later.invoke(graph, {"messages": [HumanMessage("three")]}, thread("t"))
    held = "no recorded layout version" if recorded is None else f"layout version {recorded}"
    assert f"holds mongo-ckpt data with {held}, written by a development build" in str(
        raised.value
    )
    assert f"reads layout version {SAVER_SCHEMA_VERSION} only" in str(raised.value)
    with pytest.raises(SchemaUpgradeRequired):
        await later.state(graph, thread("t"))
    with pytest.raises(SchemaUpgradeRequired):
        await later.upgrade()
    assert {c: await count(api, c, {}) for c in counts} == counts
    assert schema.version_of(await schema_doc(api.saver, key)) == recorded


async def test_newer_layout_is_refused(api: Api) -> None:
    await check_newer_layout_is_refused(api)


def test_official_documents_are_refused_with_the_migrate_command(client: Any, db_name: str) -> None:
    official = pytest.importorskip(
        "langgraph.checkpoint.mongodb",
        reason="needs langgraph-checkpoint-mongodb: pip install -e '.[test,bench]'",
    )
    OfficialSaver = official.MongoDBSaver

    graph = chat_builder().compile(checkpointer=OfficialSaver(client, db_name))
    graph.invoke({"messages": [HumanMessage("hi")]}, thread("t"))
    saver = MongoDBSaver(client, db_name)
    try:
        with pytest.raises(SchemaUpgradeRequired) as raised:
            saver.get_tuple(thread("t"))
        assert "langgraph-checkpoint-mongodb" in str(raised.value)
        assert f"mongo-ckpt migrate --from-official --source-db {db_name}" in str(raised.value)
        assert read_version(saver.db, saver_key("checkpoints")) is None
    finally:
        client.drop_database(db_name)


# -- the store ------------------------------------------------------------------


async def test_store_records_and_refuses_newer_versions(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("users", "1"), "prefs", {"theme": "dark"})
    coll = store.db[SCHEMA_COLLECTION]
    doc = await maybe_await(coll.find_one({"_id": store_key("store")}))
    assert doc["version"] == STORE_SCHEMA_VERSION
    await maybe_await(
        coll.update_one(
            {"_id": store_key("store")}, {"$set": {"version": STORE_SCHEMA_VERSION + 1}}
        )
    )
    later = make_astore()
    with pytest.raises(SchemaTooNewError, match="upgrade mongo-ckpt to a newer release"):
        await later.aget(("users", "1"), "prefs")
    with pytest.raises(SchemaTooNewError):
        await later.aput(("users", "1"), "prefs", {"theme": "light"})
    assert (await store.aget(("users", "1"), "prefs")).value == {"theme": "dark"}


def test_sync_store_refuses_newer_versions(make_store: Any) -> None:
    store = make_store()
    store.put(("users", "1"), "prefs", {"theme": "dark"})
    assert read_version(store.db, store_key("store")) == STORE_SCHEMA_VERSION
    store.db[SCHEMA_COLLECTION].update_one({"_id": store_key("store")}, {"$set": {"version": 9}})
    with pytest.raises(SchemaTooNewError, match="layout version 9"):
        make_store().get(("users", "1"), "prefs")


@pytest.mark.parametrize("other", [2, SAVER_SCHEMA_VERSION - 1, SAVER_SCHEMA_VERSION + 1])
def test_a_saver_on_new_collections_keeps_the_version_recorded_first(
    client: Any, db_name: str, monkeypatch: Any, other: int
) -> None:
    """A process of another build sets up the same new database at the same moment and
    records its version first: this saver keeps that version and refuses it (an older one
    as a pre-release layout, a newer one as too new) instead of raising it to its own."""
    key = saver_key("checkpoints")
    recorded_meanwhile(monkeypatch, CheckpointOperations, "create_indexes", client[db_name],
                        key, other)
    saver = MongoDBSaver(client, db_name)
    refusal = SchemaTooNewError if other > SAVER_SCHEMA_VERSION else SchemaUpgradeRequired
    with pytest.raises(refusal, match=f"layout version {other}"):
        saver.setup()
    assert read_version(client[db_name], key) == other
    client.drop_database(db_name)


@pytest.mark.parametrize("other", [1, STORE_SCHEMA_VERSION - 1, STORE_SCHEMA_VERSION + 1])
def test_a_store_on_a_new_collection_keeps_the_version_recorded_first(
    make_store: Any, monkeypatch: Any, other: int
) -> None:
    """As for the saver: a store on a new collection whose version another release records
    between its read and its record refuses it (a pre-release one, or a newer one), and
    no item is written."""
    store = make_store()
    key = store_key("store")
    recorded_meanwhile(monkeypatch, StoreOperations, "_refuse_foreign", store.db, key, other)
    refusal = SchemaTooNewError if other > STORE_SCHEMA_VERSION else SchemaUpgradeRequired
    with pytest.raises(refusal, match=f"layout version {other}"):
        store.put(("a",), "k", {"v": 1})
    assert store.collections["store"].count_documents({}) == 0
    assert read_version(store.db, key) == other


def test_processes_setting_up_new_collections_at_once_agree(db_name: str) -> None:
    """Savers and stores of several processes set up the same new database at the same
    moment (racing first upserts of the version document, which the wire server may
    answer with no document): every setup succeeds, on the current layout."""
    clients = [sync_client("wire") for _ in range(4)]
    try:
        for round_ in range(10):
            name = f"{db_name}_{round_}"
            barrier = threading.Barrier(len(clients))

            def set_up(client: Any, name: str = name, barrier: Any = barrier) -> tuple[int, int]:
                saver, store = MongoDBSaver(client, name), MongoDBStore(client, name)
                barrier.wait()
                saver.setup()
                store.setup()
                versions = client[name]
                return read_version(versions, saver_key("checkpoints")), read_version(
                    versions, store_key("store")
                )

            with ThreadPoolExecutor(len(clients)) as pool:
                layouts = list(pool.map(set_up, clients))
            assert layouts == [(SAVER_SCHEMA_VERSION, STORE_SCHEMA_VERSION)] * len(clients)
            clients[0].drop_database(name)
    finally:
        for client in clients:
            client.close()
