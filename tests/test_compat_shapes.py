"""Issue 9: awaitable setup, prune("delete_all"), containment metadata filters,
metadata kept whole, the official packages' call shapes, store namespace validation
and the TTL sweepers. Every test runs on each backend of the fixtures."""

from __future__ import annotations

import asyncio
import inspect
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from tests.backends import maybe_await, wire_uri

METADATAS: list[dict[str, Any]] = [
    {"source": "input", "step": -1, "extra": {"a": 1, "b": "x"}},
    {"source": "loop", "step": 0, "extra": {"a": 1, "b": "y", "c": {"d": [1, 2]}}},
    {"source": "loop", "step": 1, "extra": {"a": 2}, "tags": ["p", "q"]},
    {"source": "loop", "step": 2, "extra": {}, "tags": ["q", "p"]},
    {"source": "update", "step": 3, "extra": 5},
]
EQUALITY_FILTERS: list[dict[str, Any]] = [
    {"source": "loop"},
    {"step": 1},
    {"extra": {"a": 1, "b": "x"}},
    {"extra": {"b": "x", "a": 1}},  # another key order
    {"extra": {"a": 2}},
    {"extra": 5},
    {"tags": ["p", "q"]},
    {"source": "loop", "extra": {"a": 2}},
    {"source": "nope"},
]
SUBSET_FILTERS: list[tuple[dict[str, Any], list[int]]] = [
    ({"extra": {"a": 1}}, [-1, 0]),
    ({"extra": {"b": "y"}}, [0]),
    ({"extra": {"c": {"d": [1, 2]}}}, [0]),
    ({"extra": {"c": {}}}, [0]),
    ({"extra": {}}, [-1, 0, 1, 2]),  # {} is contained in every object
    ({"extra": {"a": 1, "z": 1}}, []),
]


def _fill(saver: Any) -> None:
    for i, metadata in enumerate(METADATAS):
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1ef00000-0000-6000-8000-{i:012d}"
        saver.put(config, checkpoint, metadata, {})


def _steps(saver: Any, filter: dict[str, Any]) -> list[int]:
    return sorted(t.metadata["step"] for t in saver.list(None, filter=filter))


@pytest.mark.parametrize("filter", EQUALITY_FILTERS, ids=str)
def test_metadata_filter_equality_as_in_memory(saver: MongoDBSaver, filter: dict) -> None:
    twin = InMemorySaver()
    _fill(saver)
    _fill(twin)
    assert _steps(saver, filter) == _steps(twin, filter)


@pytest.mark.parametrize(("filter", "steps"), SUBSET_FILTERS, ids=str)
def test_metadata_filter_containment(saver: MongoDBSaver, filter: dict, steps: list) -> None:
    _fill(saver)
    assert _steps(saver, filter) == steps


def test_metadata_filter_nested_keys_are_checked(saver: MongoDBSaver) -> None:
    with pytest.raises(ValueError):
        list(saver.list(None, filter={"extra": {"$where": 1}}))
    with pytest.raises(ValueError):
        list(saver.list(None, filter={"extra": {"a.b": 1}}))


def test_put_keeps_writes_metadata_as_in_memory(saver: MongoDBSaver) -> None:
    metadata = {"source": "loop", "step": 1, "writes": {"node": {"k": "v"}}, "parents": {}}
    config = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
    twin = InMemorySaver()
    stored = saver.put(config, empty_checkpoint(), metadata, {})
    twin_stored = twin.put(config, empty_checkpoint(), metadata, {})
    ours = saver.get_tuple(stored)
    theirs = twin.get_tuple(twin_stored)
    assert ours is not None and theirs is not None
    assert ours.metadata == theirs.metadata
    assert ours.metadata["writes"] == {"node": {"k": "v"}}


async def test_async_setup_is_a_coroutine(aclient: Any, db_name: str) -> None:
    saver = AsyncMongoDBSaver(aclient, db_name)
    assert inspect.iscoroutinefunction(saver.setup)
    await saver.setup()
    await saver.asetup()
    store = AsyncMongoDBStore(aclient, db_name)
    assert inspect.iscoroutinefunction(store.setup)
    await store.setup()
    await store.asetup()
    await store.aput(("a",), "k", {"v": 1})
    assert (await store.aget(("a",), "k")).value == {"v": 1}
    await aclient.drop_database(db_name)


def test_sync_setup_is_synchronous(client: Any, db_name: str) -> None:
    saver = MongoDBSaver(client, db_name)
    assert saver.setup() is None
    store = MongoDBStore(client, db_name)
    assert store.setup() is None
    client.drop_database(db_name)


def _config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_prune_delete_all(saver: MongoDBSaver, asaver: AsyncMongoDBSaver) -> None:
    for s in (saver,):
        s.put(_config("x"), empty_checkpoint(), {}, {})
        s.put(_config("y"), empty_checkpoint(), {}, {})
        s.prune(["x"], strategy="delete_all")
        assert s.get_tuple(_config("x")) is None
        assert s.get_tuple(_config("y")) is not None
    await asaver.aput(_config("x"), empty_checkpoint(), {}, {})
    await asaver.aprune(["x"], strategy="delete_all")
    assert await asaver.aget_tuple(_config("x")) is None
    with pytest.raises(ValueError):
        await asaver.aprune(["x"], strategy="bogus")


def test_saver_collection_attributes(saver: MongoDBSaver) -> None:
    assert saver.checkpoint_collection.name == "checkpoints"
    assert saver.writes_collection.name == "checkpoint_writes"


def test_saver_official_positional_order(client: Any, db_name: str) -> None:
    saver = MongoDBSaver(client, db_name, "cks", "wrs", 60)
    assert saver.checkpoint_collection.name == "cks"
    assert saver.writes_collection.name == "wrs"
    assert saver.ttl == 60
    client.drop_database(db_name)


def test_saver_from_conn_string_official_positional_order(db_name: str) -> None:
    with MongoDBSaver.from_conn_string(wire_uri(), db_name, "cks", "wrs", 60) as saver:
        assert (saver.db.name, saver.checkpoint_collection.name) == (db_name, "cks")
        assert saver.writes_collection.name == "wrs" and saver.ttl == 60
        saver.put(_config("t"), empty_checkpoint(), {}, {})
        assert saver.get_tuple(_config("t")) is not None
        saver.client.drop_database(db_name)


async def test_async_saver_from_conn_string_official_positional_order(db_name: str) -> None:
    async with AsyncMongoDBSaver.from_conn_string(wire_uri(), db_name, "cks", "wrs") as saver:
        assert saver.checkpoint_collection.name == "cks"
        await saver.aput(_config("t"), empty_checkpoint(), {}, {})
        assert await saver.aget_tuple(_config("t")) is not None
        await saver.client.drop_database(db_name)


def test_store_on_a_collection(client: Any, db_name: str) -> None:
    collection = client[db_name]["persistent-store"]
    store = MongoDBStore(collection, ttl_config={"default_ttl": 5, "refresh_on_read": True})
    assert store.db.name == db_name
    assert store.collections["store"].name == "persistent-store"
    assert store.ttl_config == {"default_ttl": 5, "refresh_on_read": True}
    store.put(("n",), "k", {"v": 1})
    assert collection.count_documents({}) == 1
    positional = MongoDBStore(collection, {"default_ttl": 1})
    assert positional.ttl_config == {"default_ttl": 1}
    client.drop_database(db_name)


async def test_async_store_on_a_collection(aclient: Any, db_name: str) -> None:
    store = AsyncMongoDBStore(aclient[db_name]["items"], index_config=None)
    await store.aput(("n",), "k", {"v": 1})
    assert (await store.aget(("n",), "k")).value == {"v": 1}
    assert store.collections["store"].name == "items"
    await aclient.drop_database(db_name)


def test_one_spelling_per_store_option(client: Any, db_name: str) -> None:
    ttl, index = {"default_ttl": 5}, {"dims": 2, "embed": lambda texts: [[1.0, 0.0]] * len(texts)}
    for ours, official in (("ttl", "ttl_config"), ("index", "index_config")):
        value = ttl if ours == "ttl" else index
        with pytest.raises(TypeError, match=f"{ours}= and {official}= are two spellings"):
            MongoDBStore(client, db_name, **{ours: value, official: value})
        assert getattr(MongoDBStore(client, db_name, **{official: value}), official) == value


def test_official_vector_index_keys_the_store_does_not_read_are_named(
    client: Any, db_name: str
) -> None:
    index = {
        "dims": 2, "embed": lambda texts: [[1.0, 0.0]] * len(texts), "fields": ["text"],
        "name": "vector_index", "relevance_score_fn": "euclidean", "embedding_key": "vec",
        "filters": ["kind"],
    }
    with pytest.warns(UserWarning) as warned:
        store = MongoDBStore(client, db_name, index_config=index)
    (message,) = [str(w.message) for w in warned]
    assert message.startswith(
        "index keys 'embedding_key', 'filters', 'name', 'relevance_score_fn' are ignored"
    )
    assert warned[0].filename == __file__  # points at the caller
    assert store.index_config == index


def test_store_from_conn_string_official_order(db_name: str) -> None:
    ttl = {"default_ttl": 10, "refresh_on_read": False}
    with MongoDBStore.from_conn_string(wire_uri(), db_name, "persistent-store", ttl, None) as s:
        assert s.collections["store"].name == "persistent-store"
        assert s.ttl_config == ttl and s.index_config is None
        s.put(("n",), "k", {"v": 1})
        assert s.get(("n",), "k").value == {"v": 1}
        s.client.drop_database(db_name)


BAD_OPS = [
    PutOp(("a.b",), "k", {"v": 1}),
    PutOp(("",), "k", {"v": 1}),
    GetOp(("a", "b.c"), "k"),
    SearchOp(("x.y",)),
]


@pytest.mark.parametrize("op", BAD_OPS, ids=repr)
async def test_batch_validates_namespaces(make_store: Any, make_astore: Any, op: Any) -> None:
    with pytest.raises(InvalidNamespaceError):
        make_store().batch([op])
    with pytest.raises(InvalidNamespaceError):
        await make_astore().abatch([op])


def _past() -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=5)


async def test_async_ttl_sweeper_deletes_expired(make_astore: Any) -> None:
    store = make_astore(ttl={"default_ttl": 10, "sweep_interval_minutes": 1})
    await store.setup()
    collection = store.collections["store"]
    await maybe_await(collection.drop_index("expires_at"))  # only the sweeper deletes
    await store.aput(("t",), "gone", {"v": 1})
    await store.aput(("t",), "kept", {"v": 1})
    await maybe_await(collection.update_one({"key": "gone"}, {"$set": {"expires_at": _past()}}))
    task = await store.start_ttl_sweeper(sweep_interval_minutes=0.001)
    assert await store.start_ttl_sweeper() is task  # already running
    deadline = time.monotonic() + 60  # a loaded machine may delay the sweeper's turns
    while await maybe_await(collection.find_one({"key": "gone"})) is not None:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert await maybe_await(collection.find_one({"key": "gone"})) is None
    assert await maybe_await(collection.find_one({"key": "kept"})) is not None
    assert await store.stop_ttl_sweeper(timeout=60) is True
    assert task.done()
    assert await store.stop_ttl_sweeper() is True


def test_sync_ttl_sweeper_deletes_expired(make_store: Any) -> None:
    store = make_store(ttl={"default_ttl": 10})
    store.setup()
    collection = store.collections["store"]
    collection.drop_index("expires_at")
    store.put(("t",), "gone", {"v": 1})
    store.put(("t",), "kept", {"v": 1})
    collection.update_one({"key": "gone"}, {"$set": {"expires_at": _past()}})
    future = store.start_ttl_sweeper(sweep_interval_minutes=0.001)
    deadline = time.monotonic() + 60  # a loaded machine may delay the sweeper's turns
    while collection.find_one({"key": "gone"}) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert collection.find_one({"key": "gone"}) is None
    assert collection.find_one({"key": "kept"}) is not None
    assert store.stop_ttl_sweeper(timeout=60) is True
    assert future.done()


def test_sweep_interval_from_ttl_config(make_store: Any) -> None:
    store = make_store(ttl={"default_ttl": 1, "sweep_interval_minutes": 2})
    assert store._sweep_interval_seconds(None) == 120
    assert make_store()._sweep_interval_seconds(None) == 300
    with pytest.raises(ValueError):
        store._sweep_interval_seconds(0)
