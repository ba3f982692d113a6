"""Versioned layout: ``setup()`` records the version, upgrades older data in place (or names
the command that does), and refuses data written by a newer mongo-ckpt."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from mongo_ckpt import (
    AsyncMongoDBSaver,
    MongoDBSaver,
    SchemaTooNewError,
    SchemaUpgradeRequired,
    schema,
)
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.schema import (
    SAVER_SCHEMA_VERSION,
    SAVER_SETUP_VERSION,
    SCHEMA_COLLECTION,
    STORE_SCHEMA_VERSION,
    read_version,
    saver_key,
    store_key,
)
from mongo_ckpt.store import MongoDBStore
from mongo_ckpt.store.operations import StoreOperations
from tests.backends import count_calls, maybe_await, sync_client
from tests.graphs import chat_builder, contents, thread
from tests.saver_support import Api


async def schema_doc(saver: Any, key: str) -> dict | None:
    return await maybe_await(saver.db[SCHEMA_COLLECTION].find_one({"_id": key}))


async def set_version(saver: Any, key: str, version: int | None) -> None:
    coll = saver.db[SCHEMA_COLLECTION]
    if version is None:
        await maybe_await(coll.delete_one({"_id": key}))
    else:
        await maybe_await(coll.update_one({"_id": key}, {"$set": {"version": version}}))


async def as_version_1(run: Api) -> None:
    """Make the saver's data look as the earliest releases stored it: no ``join`` keys,
    no schema document."""
    db = run.saver.db
    for logical in (BLOBS, WRITES):
        name = run.saver.layout.by_logical()[logical]
        await maybe_await(db[name].update_many({}, {"$unset": {"join": ""}}))
    await set_version(run.saver, saver_key("checkpoints"), None)


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


async def check_older_layout_is_upgraded_in_place(run: Api) -> None:
    await chat(run, "one", "two")
    await as_version_1(run)
    missing = {"join": {"$exists": False}}
    assert await count(run, BLOBS, missing) > 0 and await count(run, WRITES, missing) > 0
    # A restarted application on the old data: the first use upgrades, the thread goes on.
    later = run.reopened()
    messages = await chat(later, "three")
    assert contents(messages)[-2:] == [("human", "three"), ("ai", "#5: three")]
    assert await count(run, BLOBS, missing) == 0 and await count(run, WRITES, missing) == 0
    # Existing data: an earlier release may still run beside this one, so the version
    # that needs the explicit upgrade step (list deltas) is not recorded.
    recorded = await schema_doc(run.saver, saver_key("checkpoints"))
    assert recorded["version"] == SAVER_SETUP_VERSION
    # Recorded: the next saver's setup is one round trip.
    again = run.reopened()
    calls = count_calls(again.saver.collections)
    await maybe_await(again.saver.setup())
    assert dict(calls) == {("schema", "find_one"): 1}


async def check_too_big_upgrade_names_the_command(run: Api) -> None:
    await chat(run, "one", "two")
    await as_version_1(run)
    missing = {"join": {"$exists": False}}
    before = await count(run, BLOBS, missing) + await count(run, WRITES, missing)
    later = run.reopened()
    with pytest.raises(SchemaUpgradeRequired) as raised:
        await maybe_await(later.saver.setup(upgrade_limit=before - 1))
    assert f"`mongo-ckpt upgrade --db {run.saver.db.name}`" in str(raised.value)
    assert f"from version 1 to {SAVER_SETUP_VERSION}" in str(raised.value)
    # Nothing was changed, and the version is still unrecorded.
    assert await count(run, BLOBS, missing) + await count(run, WRITES, missing) == before
    assert await schema_doc(run.saver, saver_key("checkpoints")) is None
    # What the command runs: the same upgrade without a limit.
    await maybe_await(later.saver.setup(upgrade_limit=None))
    assert await count(run, BLOBS, missing) + await count(run, WRITES, missing) == 0
    assert contents(await chat(later, "three"))[-1] == ("ai", "#5: three")


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


async def check_layout_3_keeps_whole_values_until_the_upgrade_step(
    run: Api, monkeypatch: Any
) -> None:
    key = saver_key("checkpoints")
    await set_version(run.saver, key, 3)  # as the previous release records it
    running = run.reopened()
    await running.setup()
    off = run.reopened(list_deltas=False)
    assert (await schema_doc(run.saver, key))["version"] == 3
    await chat(running, "one", "two", "three")
    deltas = {"base": {"$exists": True}}
    assert await count(run, BLOBS, deltas) == 0
    await run.reopened().upgrade()
    assert (await schema_doc(run.saver, key))["version"] == SAVER_SCHEMA_VERSION
    # Within the minute the running saver neither reads the version again nor writes deltas.
    calls = count_calls(running.saver.collections)
    await chat(running, "four")
    assert calls[("schema", "find_one")] == 0
    assert await count(run, BLOBS, deltas) == 0
    # A minute on, it reads the version once and writes deltas from then on.
    real = time.monotonic
    monkeypatch.setattr(schema, "monotonic", lambda: real() + 61)
    await chat(running, "five", "six")
    assert calls[("schema", "find_one")] == 1
    written = await count(run, BLOBS, deltas)
    assert written > 0
    monkeypatch.setattr(schema, "monotonic", lambda: real() + 3600)
    messages = await chat(running, "seven")
    assert calls[("schema", "find_one")] == 1
    assert len(messages) == 14 and contents(messages)[-1] == ("ai", "#13: seven")
    # list_deltas=False: never deltas, and no reads of the version for them.
    off_calls = count_calls(off.saver.collections)
    before = await count(run, BLOBS, deltas)
    await chat(off, "eight")
    assert off_calls[("schema", "find_one")] == 1  # its setup, on first use
    assert await count(run, BLOBS, deltas) == before
    assert len(await chat(run.reopened(), "nine")) == 18


async def check_layout_4_keeps_its_documents_until_the_upgrade_step(
    run: Api, monkeypatch: Any
) -> None:
    key = saver_key("checkpoints")
    await set_version(run.saver, key, 4)  # as the previous release records it
    running = run.reopened()
    await running.setup()
    assert (await schema_doc(run.saver, key))["version"] == 4
    await chat(running, "one", "two")
    slim = {"metadata_typed": {"$exists": False}}
    # What version 4 reads: the metadata twice.
    assert await count(run, CHECKPOINTS, slim) == 0
    version_4 = await count(run, CHECKPOINTS, {})
    await run.reopened().upgrade()
    assert (await schema_doc(run.saver, key))["version"] == SAVER_SCHEMA_VERSION
    # Within the minute the running saver still writes version 4 documents.
    await chat(running, "three")
    assert await count(run, CHECKPOINTS, slim) == 0
    # A minute on, it reads the version again and writes slim documents: the metadata
    # (plain BSON reads it back exactly) once.
    real = time.monotonic
    monkeypatch.setattr(schema, "monotonic", lambda: real() + 61)
    await chat(running, "four")
    assert await count(run, CHECKPOINTS, {"metadata_typed": {"$exists": True}}) == version_4 + 3
    assert await count(run, CHECKPOINTS, slim) == 3
    # Both layouts read back, whole history included.
    messages = await chat(run.reopened(), "five")
    assert len(messages) == 10 and contents(messages)[-1] == ("ai", "#9: five")
    history = await run.history(run.compile(chat_builder()), thread("t"))
    assert [len(s.values.get("messages", [])) for s in history] == [
        n for turn in range(5, 0, -1) for n in (2 * turn, 2 * turn - 1, 2 * turn - 2)
    ]


async def test_layout_4_keeps_its_documents_until_the_upgrade_step(
    api: Api, monkeypatch: Any
) -> None:
    await check_layout_4_keeps_its_documents_until_the_upgrade_step(api, monkeypatch)


async def test_layout_3_keeps_whole_values_until_the_upgrade_step(
    api: Api, monkeypatch: Any
) -> None:
    await check_layout_3_keeps_whole_values_until_the_upgrade_step(api, monkeypatch)


async def test_setup_records_the_version(api: Api) -> None:
    await check_setup_records_the_version(api)


def test_read_version_reads_the_recorded_version(saver: MongoDBSaver) -> None:
    assert read_version(saver.db, saver_key("checkpoints")) == SAVER_SCHEMA_VERSION


async def test_older_layout_is_upgraded_in_place(api: Api) -> None:
    await check_older_layout_is_upgraded_in_place(api)


async def test_too_big_upgrade_names_the_command(api: Api) -> None:
    await check_too_big_upgrade_names_the_command(api)


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


async def test_calls_beside_each_other_read_an_older_version_once(
    aclient: Any, db_name: str, monkeypatch: Any
) -> None:
    """A saver on an older layout reads the version again once a minute passed, by one of
    the calls running at that moment: the read is claimed before it is sent."""
    now = [0.0]
    monkeypatch.setattr(schema, "monotonic", lambda: now[0])
    first = AsyncMongoDBSaver(aclient, db_name)
    await first.setup()
    await set_version(first, saver_key("checkpoints"), schema.SLIM_DOCUMENTS_VERSION)
    saver = AsyncMongoDBSaver(aclient, db_name)
    await saver.setup()
    calls = count_calls(saver.collections)
    config = thread("t")
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(8)))
    assert calls[("schema", "find_one")] == 0
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    assert saver.memory.recheck_due() and not saver.memory.recheck_due()  # claimed
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(8)))
    assert calls[("schema", "find_one")] == 1
    assert not saver.memory.compression_allowed
    await first.upgrade()
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(8)))
    assert calls[("schema", "find_one")] == 2
    assert saver.memory.compression_allowed
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    await asyncio.gather(*(saver.aget_tuple(config) for _ in range(8)))
    assert calls[("schema", "find_one")] == 2  # at the current version: never again
    await maybe_await(aclient.drop_database(db_name))


def _recorded_meanwhile(monkeypatch: Any, owner: type, step: str, db: Any, key: str,
                        version: int) -> None:
    """Another process records ``version`` of ``key`` while ``owner``'s setup runs
    ``step`` (after it read no version and found the collections empty)."""
    original = getattr(owner, step)

    def racing(self: Any, *args: Any) -> Any:
        result = yield from original(self, *args)
        db[SCHEMA_COLLECTION].update_one(
            {"_id": key}, {"$max": {"version": version}}, upsert=True
        )
        return result

    monkeypatch.setattr(owner, step, racing)


@pytest.mark.parametrize("other", [2, SAVER_SCHEMA_VERSION - 1, SAVER_SCHEMA_VERSION + 1])
def test_a_saver_on_new_collections_keeps_the_version_recorded_first(
    client: Any, db_name: str, monkeypatch: Any, other: int
) -> None:
    """A process of another release sets up the same new database at the same moment and
    records its version first: this saver writes what that version reads (raised to the
    setup version, as for older data; a newer one is refused) and does not raise it to the
    current one."""
    key = saver_key("checkpoints")
    _recorded_meanwhile(monkeypatch, CheckpointOperations, "create_indexes", client[db_name],
                        key, other)
    saver = MongoDBSaver(client, db_name)
    expected = max(other, schema.SAVER_SETUP_VERSION)
    if other > SAVER_SCHEMA_VERSION:
        with pytest.raises(SchemaTooNewError, match=f"layout version {other}"):
            saver.setup()
    else:
        saver.setup()
        allowed = (saver.memory.slim_allowed, saver.memory.compression_allowed)
        assert allowed == (expected >= schema.SLIM_DOCUMENTS_VERSION, False)
        graph = chat_builder().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("hi")]}, thread("t"))
        assert len(graph.get_state(thread("t")).values["messages"]) == 2
    assert read_version(client[db_name], key) == expected
    client.drop_database(db_name)


@pytest.mark.parametrize("other", [1, STORE_SCHEMA_VERSION - 1, STORE_SCHEMA_VERSION + 1])
def test_a_store_on_a_new_collection_keeps_the_version_recorded_first(
    make_store: Any, monkeypatch: Any, other: int
) -> None:
    """As for the saver: a store on a new collection whose version another release records
    between its read and its record uses that layout (raised to the setup version, as for
    older data), with that layout's indexes."""
    store = make_store()
    key = store_key("store")
    _recorded_meanwhile(monkeypatch, StoreOperations, "_refuse_foreign", store.db, key, other)
    expected = max(other, schema.STORE_SETUP_VERSION)
    if other > STORE_SCHEMA_VERSION:
        with pytest.raises(SchemaTooNewError, match=f"layout version {other}"):
            store.put(("a",), "k", {"v": 1})
        assert store.collections["store"].count_documents({}) == 0
    else:
        store.put(("a",), "k", {"v": 1})
        assert store.ops.layout == expected and not store.ops.on_items
        assert {"registry_levels", "registry_until"} <= set(
            store.collections["store"].index_information()
        )
        assert store.list_namespaces() == [("a",)]
    assert read_version(store.db, key) == expected


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
                return saver.memory.layout, store.ops.layout

            with ThreadPoolExecutor(len(clients)) as pool:
                layouts = list(pool.map(set_up, clients))
            assert layouts == [(SAVER_SCHEMA_VERSION, STORE_SCHEMA_VERSION)] * len(clients)
            clients[0].drop_database(name)
    finally:
        for client in clients:
            client.close()


def test_a_saver_never_lowers_the_layout_it_writes(saver: MongoDBSaver) -> None:
    """A version read again answered late (read before an upgrade this saver ran, or the
    document since gone) never turns off what a higher version read before allows; a
    setup takes the version it reads as found (a database restored, or recreated by an
    earlier release)."""
    key = saver_key("checkpoints")
    versions = saver.db[SCHEMA_COLLECTION]
    saver.upgrade()
    assert saver.memory.compression_allowed
    for late in (schema.SLIM_DOCUMENTS_VERSION, None):
        if late is None:
            versions.delete_one({"_id": key})
        else:
            versions.update_one({"_id": key}, {"$set": {"version": late}})
        saver._run(saver.ops.recheck_layout(saver.db.name))
        assert (saver.memory.slim_allowed, saver.memory.compression_allowed) == (True, True)
    versions.insert_one({"_id": key, "version": schema.SLIM_DOCUMENTS_VERSION})
    saver.setup()
    assert (saver.memory.slim_allowed, saver.memory.compression_allowed) == (True, False)


def test_a_newer_version_read_again_is_refused_by_every_call(
    make_store: Any, saver: MongoDBSaver, monkeypatch: Any
) -> None:
    """A saver and a store on an older layout read the version again once due; when a
    newer release recorded its version meanwhile, that call and every later one raise
    ``SchemaTooNewError``, as a setup would, not only one call a minute."""
    now = [0.0]
    monkeypatch.setattr(schema, "monotonic", lambda: now[0])
    saver_version = {"_id": saver_key("checkpoints")}
    saver.db[SCHEMA_COLLECTION].update_one(saver_version, {"$set": {"version": 5}})
    saver.setup()
    store = make_store()
    store.put(("a",), "k", {"v": 1})
    store_version = {"_id": store_key("store")}
    store.db[SCHEMA_COLLECTION].update_one(store_version, {"$set": {"version": 4}})
    store.setup()
    for version in (saver_version, store_version):
        store.db[SCHEMA_COLLECTION].update_one(version, {"$set": {"version": 99}})
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    for _ in range(3):
        with pytest.raises(SchemaTooNewError, match="layout version 99"):
            saver.get_tuple(thread("t"))
        with pytest.raises(SchemaTooNewError, match="layout version 99"):
            store.get(("a",), "k")
