"""Collections of one name are refused before anything is read or written: the saver's
three (and the layout-version collection), from the constructor, the command line and the
platform variables; and the store refuses a collection of another layout (the saver's,
langgraph-store-mongodb's)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import mongomock
import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage
from mongomock_motor import AsyncMongoMockClient

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver, platform
from mongo_ckpt.cli import CliState, cli
from mongo_ckpt.layout import CollectionNameClash
from mongo_ckpt.schema import SCHEMA_COLLECTION, store_key
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from mongo_ckpt.store.layouts import ForeignCollectionError
from tests.backends import maybe_await, sync_client
from tests.cli_support import write_threads
from tests.graphs import chat_builder, thread

SAVER_COLLECTIONS = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
CLASH = (
    "checkpoint_collection_name and writes_collection_name are both 'checkpoints': "
    "checkpoints, values, pending writes and thread settings need a collection each "
    "(maintenance of one would delete the others' documents); pass another name for "
    "checkpoint_collection_name or writes_collection_name"
)


# -- the saver's constructor --------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"writes_collection_name": "checkpoints"}, CLASH),
        (
            {"blobs_collection_name": "w", "writes_collection_name": "w"},
            "blobs_collection_name and writes_collection_name are both 'w'",
        ),
        (
            {"checkpoint_collection_name": "c", "blobs_collection_name": "c"},
            "checkpoint_collection_name and blobs_collection_name are both 'c'",
        ),
        (
            {"blobs_collection_name": SCHEMA_COLLECTION},
            "blobs_collection_name is 'mongo_ckpt_schema', the name of mongo-ckpt's "
            "layout-version collection: pass another name for blobs_collection_name",
        ),
    ],
)
def test_saver_refuses_collections_of_one_name(names: dict[str, str], message: str) -> None:
    sync_client, async_client = mongomock.MongoClient(), AsyncMongoMockClient()
    for saver_class, client in ((MongoDBSaver, sync_client), (AsyncMongoDBSaver, async_client)):
        with pytest.raises(CollectionNameClash) as raised:
            saver_class(client, "db", **names)
        assert isinstance(raised.value, ValueError)
        assert message in str(raised.value)
    assert sync_client.list_database_names() == []


# -- the command line ---------------------------------------------------------------


@pytest.fixture(params=["mock", "wire"])
def written(request: Any) -> Iterator[tuple[Any, str]]:
    client = sync_client(request.param)
    db_name = f"t_names_{uuid.uuid4().hex[:8]}"
    write_threads(MongoDBSaver(client, db_name))
    try:
        yield client, db_name
    finally:
        client.drop_database(db_name)
        client.close()


def _stored(client: Any, db_name: str) -> dict[str, int]:
    return {name: client[db_name][name].count_documents({}) for name in SAVER_COLLECTIONS}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["prune", "chat-ada", "--writes", "checkpoints", "--yes"],
            "Error: --checkpoints and --writes are both 'checkpoints': checkpoints, values, "
            "pending writes and thread settings need a collection each (maintenance of one "
            "would delete the others' documents); pass another name for --checkpoints or "
            "--writes",
        ),
        (
            ["delete", "chat-ada", "--blobs", "checkpoint_writes", "--yes"],
            "Error: --blobs and --writes are both 'checkpoint_writes'",
        ),
        (
            ["threads", "--checkpoints", SCHEMA_COLLECTION],
            "Error: --checkpoints is 'mongo_ckpt_schema', the name of mongo-ckpt's "
            "layout-version collection: pass another name for --checkpoints",
        ),
    ],
)
def test_cli_refuses_collections_of_one_name(
    written: tuple[Any, str], args: list[str], message: str
) -> None:
    client, db_name = written
    before = _stored(client, db_name)
    result = CliRunner().invoke(cli, [*args, "--db", db_name], obj=CliState(client=client))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert _stored(client, db_name) == before
    assert before["checkpoints"] > 0


# -- the platform variables ---------------------------------------------------------


def test_platform_refuses_collections_of_one_name(monkeypatch: Any) -> None:
    with pytest.raises(CollectionNameClash) as raised:
        platform.saver_kwargs({"MONGO_CKPT_WRITES_COLLECTION": "checkpoints"})
    assert str(raised.value) == (
        "MONGO_CKPT_CHECKPOINTS_COLLECTION and MONGO_CKPT_WRITES_COLLECTION are both "
        "'checkpoints': checkpoints, values, pending writes and thread settings need a "
        "collection each (maintenance of one would delete the others' documents); pass "
        "another name for MONGO_CKPT_CHECKPOINTS_COLLECTION or MONGO_CKPT_WRITES_COLLECTION"
    )
    with pytest.raises(CollectionNameClash) as raised:
        platform.store_kwargs({"MONGO_CKPT_STORE_COLLECTION": "checkpoint_blobs"})
    assert str(raised.value) == (
        "MONGO_CKPT_BLOBS_COLLECTION and MONGO_CKPT_STORE_COLLECTION are both "
        "'checkpoint_blobs': the store needs a collection of its own, apart from the "
        "checkpointer's; pass another name for MONGO_CKPT_STORE_COLLECTION"
    )
    with pytest.raises(CollectionNameClash, match="MONGO_CKPT_STORE_COLLECTION is 'mongo_ckpt"):
        platform.store_kwargs({"MONGO_CKPT_STORE_COLLECTION": SCHEMA_COLLECTION})
    assert platform.store_kwargs({"MONGO_CKPT_STORE_COLLECTION": "memories"})


async def test_platform_factories_refuse_before_connecting(monkeypatch: Any) -> None:
    monkeypatch.setenv("MONGODB_URI", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=1")
    monkeypatch.setenv("MONGO_CKPT_BLOBS_COLLECTION", "checkpoints")
    with pytest.raises(CollectionNameClash, match="MONGO_CKPT_BLOBS_COLLECTION"):
        async with platform.checkpointer():
            pass
    monkeypatch.delenv("MONGO_CKPT_BLOBS_COLLECTION")
    monkeypatch.setenv("MONGO_CKPT_STORE_COLLECTION", "checkpoint_writes")
    with pytest.raises(CollectionNameClash, match="MONGO_CKPT_STORE_COLLECTION"):
        async with platform.store():
            pass


# -- the store ----------------------------------------------------------------------


def test_store_refuses_the_layout_version_collection() -> None:
    for store_class, client in (
        (MongoDBStore, mongomock.MongoClient()),
        (AsyncMongoDBStore, AsyncMongoMockClient()),
    ):
        with pytest.raises(CollectionNameClash, match="collection_name is 'mongo_ckpt_schema'"):
            store_class(client, "db", collection_name=SCHEMA_COLLECTION)


async def refused(store: Any, attempt: Callable[[], Any], collection: str) -> str:
    """``attempt()`` raises ``ForeignCollectionError`` and changes neither the collection nor
    the schema records; returns the message."""
    raw = store.db[collection]
    docs = await maybe_await(raw.count_documents({}))
    indexes = await maybe_await(raw.index_information())
    with pytest.raises(ForeignCollectionError) as raised:
        await maybe_await(attempt())
    assert isinstance(raised.value, ValueError)
    assert await maybe_await(raw.count_documents({})) == docs
    assert await maybe_await(raw.index_information()) == indexes
    schema = store.db[SCHEMA_COLLECTION]
    assert await maybe_await(schema.find_one({"_id": store_key(collection)})) is None
    return str(raised.value)


def _saver_message(message: str, db_name: str, collection: str, role: str) -> None:
    assert message == (
        f"collection {collection!r} of database {db_name!r} holds the {role} of the mongo-ckpt "
        "checkpointer recorded as 'saver:checkpoints', not mongo-ckpt store items: the store "
        "would misread it, or its indexes would refuse or delete the store's items. Give the "
        "store a collection of its own with collection_name= (default 'store'); nothing was "
        "written"
    )


ROLES = dict(zip(SAVER_COLLECTIONS, ("checkpoints", "blobs", "writes")))


@pytest.mark.parametrize("collection", SAVER_COLLECTIONS)
async def test_store_refuses_the_savers_collections(
    client: Any, db_name: str, make_store: Any, collection: str
) -> None:
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, db_name))
    graph.invoke({"messages": [HumanMessage("hi")]}, thread("t"))
    store = make_store(collection_name=collection)
    message = await refused(store, store.setup, collection)
    _saver_message(message, db_name, collection, ROLES[collection])
    await refused(store, lambda: store.put(("users",), "a", {"x": 1}), collection)
    # Without the saver's schema document its indexes still give it away.
    client[db_name][SCHEMA_COLLECTION].delete_many({})
    assert "the checkpointer's index" in await refused(store, store.setup, collection)


@pytest.mark.parametrize("collection", SAVER_COLLECTIONS)
async def test_async_store_refuses_the_savers_collections(
    aclient: Any, db_name: str, make_astore: Any, collection: str
) -> None:
    saver = AsyncMongoDBSaver(aclient, db_name)
    graph = chat_builder().compile(checkpointer=saver)
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, thread("t"))
    store = make_astore(collection_name=collection)
    _saver_message(await refused(store, store.setup, collection), db_name, collection,
                   ROLES[collection])
    await refused(store, lambda: store.aget(("users",), "a"), collection)


def test_store_refuses_one_name_for_its_items_and_its_registry() -> None:
    with pytest.raises(CollectionNameClash, match="registry_collection_name are both 'memo'"):
        MongoDBStore(mongomock.MongoClient(), "db", "memo", registry_collection_name="memo")


async def test_store_refuses_a_registry_in_another_layouts_collection(
    client: Any, db_name: str, make_store: Any
) -> None:
    """The registry's collection is checked as the items' is: a saver's collection, and
    another store's items or registry, are refused before anything is written."""
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, db_name))
    graph.invoke({"messages": [HumanMessage("hi")]}, thread("t"))
    store = make_store(registry_collection_name="checkpoints")
    message = await refused(store, store.setup, "checkpoints")
    assert "holds the checkpoints of the mongo-ckpt checkpointer" in message
    assert "not mongo-ckpt store namespace registry entries" in message
    assert "registry_collection_name=" in message
    first = make_store(collection_name="memo")
    await maybe_await(first.put(("users",), "a", {"x": 1}))
    for names in (
        {"collection_name": "memo_namespaces"},
        {"collection_name": "other", "registry_collection_name": "memo"},
    ):
        store = make_store(**names)
        message = await refused(store, store.setup, names["collection_name"])
        assert "of the mongo-ckpt store recorded as 'store:memo'" in message


async def test_a_store_is_refused_another_registry_than_it_recorded(
    client: Any, db_name: str, make_store: Any
) -> None:
    """Set up with its registry in one collection, a store opened again with another
    registry name (another store's items, a saver's collection, a new one) is refused
    before anything is written: its entries are in the one it recorded."""
    MongoDBSaver(client, db_name).setup()
    first = make_store(collection_name="memo")
    await maybe_await(first.put(("users",), "a", {"x": 1}))
    other = make_store(collection_name="other")
    await maybe_await(other.put(("teams",), "b", {"x": 1}))
    for name in ("other", "checkpoints", "fresh"):
        raw = first.db[name]
        held = await maybe_await(raw.count_documents({}))
        again = make_store(collection_name="memo", registry_collection_name=name)
        with pytest.raises(ForeignCollectionError) as raised:
            await maybe_await(again.put(("z",), "k", {}))
        assert "keeps its namespace registry in 'memo_namespaces'" in str(raised.value)
        assert "pass registry_collection_name='memo_namespaces'" in str(raised.value)
        assert await maybe_await(raw.count_documents({})) == held
    assert await maybe_await(first.collection.count_documents({})) == 1
    assert await maybe_await(first.list_namespaces()) == [("users",)]


async def test_store_refuses_an_official_store_collection(
    client: Any, db_name: str, make_store: Any
) -> None:
    official = pytest.importorskip("langgraph.store.mongodb")
    if isinstance(client, mongomock.MongoClient):
        pytest.skip("langgraph-store-mongodb calls create_index(keys=...), which mongomock lacks")
    items = client[db_name]["persistent-store"]
    official.MongoDBStore(items).put(("users",), "a", {"x": 1})
    store = make_store(collection_name="persistent-store")
    message = await refused(store, store.setup, "persistent-store")
    assert message == (
        f"collection 'persistent-store' of database {db_name!r} holds langgraph-store-mongodb's "
        "index 'namespace_str_1_key_1' on namespace_str, key, not mongo-ckpt store items: the "
        "store would misread it, or its indexes would refuse or delete the store's items. Give "
        "the store a collection of its own with collection_name= (default 'store') "
        "(convert langgraph-store-mongodb items into it with mongo-ckpt migrate "
        "--from-official-store: see docs/store.md); nothing was written"
    )
    # Its TTL index alone, or its documents alone, are refused too.
    ttl = client[db_name]["ttl-store"]
    official.MongoDBStore(ttl, ttl_config={"default_ttl": 1.0})
    ttl.drop_index("namespace_str_1_key_1")
    store = make_store(collection_name="ttl-store")
    assert "a TTL index 'updated_at_1' on updated_at" in await refused(store, store.setup,
                                                                       "ttl-store")
    items.drop_indexes()
    store = make_store(collection_name="persistent-store")
    assert "langgraph-store-mongodb items (documents with namespace_str)" in await refused(
        store, store.setup, "persistent-store"
    )


async def test_async_store_refuses_an_official_store_layout(
    aclient: Any, db_name: str, make_astore: Any
) -> None:
    raw = aclient[db_name]["persistent-store"]
    await maybe_await(raw.create_index([("namespace_str", 1), ("key", 1)], unique=True))
    store = make_astore(collection_name="persistent-store")
    assert "langgraph-store-mongodb's index" in await refused(
        store, store.setup, "persistent-store"
    )
    await refused(store, lambda: store.aput(("users",), "a", {"x": 1}), "persistent-store")


async def test_store_refuses_official_store_documents(
    client: Any, db_name: str, make_store: Any
) -> None:
    # An item as langgraph-store-mongodb 0.4.0 writes it (its ``batch``), without its indexes.
    item = {"namespace_str": "users", "key": "a", "value": {"x": 1}, "namespace": ["users"]}
    client[db_name]["persistent-store"].insert_one(item)
    store = make_store(collection_name="persistent-store")
    assert "langgraph-store-mongodb items (documents with namespace_str)" in await refused(
        store, store.setup, "persistent-store"
    )


async def test_store_keeps_working_on_its_own_collection(make_store: Any) -> None:
    store = make_store()
    store.put(("users",), "a", {"x": 1})
    assert make_store().get(("users",), "a").value == {"x": 1}  # a new store: setup again
