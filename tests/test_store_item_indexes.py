"""The namespace registry on the items' indexes (store layout version 5): entries are found
by their marks on ``prefix_recency`` and expire by ``expires_at`` on the items' TTL index,
so the registry has no index of its own. A new store's layout, an entry expiring with its
items, and the upgrade of a layout-4 collection with a process of this release still
writing the older way beside it. The races of listings with puts and deletes are in
``tests/test_store_registry.py``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt import schema
from mongo_ckpt.schema import (
    SCHEMA,
    SCHEMA_COLLECTION,
    STORE_ITEM_INDEXES_VERSION,
    read_version,
    store_key,
)
from mongo_ckpt.store import MongoDBStore, registry
from tests.backends import count_calls
from tests.store_support import assert_entry_fields

NAMES = [("users", f"u{i}", "memories") for i in range(registry.BATCH_FROM)]
ITEM_INDEXES = {"_id_", "namespace_key", "prefix_recency", "expires_at"}


def _entries(store: MongoDBStore) -> dict[str, dict[str, Any]]:
    found = store.collections["store"].find({"_id": {"$regex": "^namespace:"}})
    return {doc[registry.LISTED]: doc for doc in found}


def test_a_new_store_keeps_its_registry_on_the_items_indexes(make_store: Any) -> None:
    """A new collection is set up at layout 5 with the items' indexes only; every entry
    carries its marks and an expires_at equal to its listed_until, and listings answer
    as ``InMemoryStore`` does."""
    store = make_store()
    store.setup()
    assert read_version(store.db, store_key("store")) == STORE_ITEM_INDEXES_VERSION
    assert store.ops.on_items
    assert set(store.collections["store"].index_information()) == ITEM_INDEXES
    memory = InMemoryStore()
    ops = [PutOp(ns, "k", {"v": 1}, ttl=None if i % 2 else 30) for i, ns in enumerate(NAMES)]
    ops += [PutOp(("teams", "t1"), "k", {"v": 1}), PutOp(("users",), "top", {"v": 1}, ttl=5)]
    for target in (store, memory):
        target.batch(ops)
    listings: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"prefix": ("users", "*", "memories"), "max_depth": 2},
        {"suffix": ("memories",), "limit": 3, "offset": 2},
        {"max_depth": 1},
    ]
    for listing in listings:
        assert store.list_namespaces(**listing) == memory.list_namespaces(**listing), listing
    entries = _entries(store)
    assert len(entries) == len(NAMES) + 2
    for entry in entries.values():
        assert_entry_fields(entry, on_items=True)
        items = store.collections["store"].find({"ns": entry[registry.LISTED]})
        assert entry[registry.EXPIRES] == max(i.get("expires_at", registry._NEVER) for i in items)


def test_an_entry_expires_with_its_items(make_store: Any, request: Any) -> None:
    """The items' TTL index drops a namespace's entry with its last item: nothing of the
    namespace is left stored, and the listing is empty without a sweep."""
    store = make_store()
    store.put(("short",), "k", {"v": 1}, ttl=0.005)  # 0.3 s
    collection = store.collections["store"]
    (entry,) = _entries(store).values()
    assert entry[registry.EXPIRES] == collection.find_one({"key": "k"})["expires_at"]
    if request.node.callspec.params["client"][0] == "mongodb":
        return  # MongoDB's TTL monitor runs once a minute: too slow to wait for here
    deadline = time.monotonic() + 10
    # mongomock deletes on the next read; SecantusDB's monitor wakes every second.
    while collection.count_documents({}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(collection.find({})) == []
    assert store.list_namespaces() == []


def _at_layout_4(make_store: Any) -> MongoDBStore:
    """A store on a collection recorded at layout 4 with the registry's own indexes, as
    the release before this one left it."""
    first = make_store()
    first.setup()
    first.collections["store"].create_indexes(registry.index_models(on_items=False))
    versions = first.db[SCHEMA_COLLECTION]
    versions.update_one({"_id": store_key("store")}, {"$set": {"version": 4}})
    store = make_store()
    store.setup()
    assert (store.ops.batched, store.ops.on_items) == (True, False)
    return store


def test_upgrade_moves_a_layout_4_registry_onto_the_items_indexes(make_store: Any) -> None:
    """Entries and a batch document written as the previous release writes them (without
    marks or expires_at) are found after ``upgrade()``, which gives every entry its marks
    and expires_at, and drops the registry's own indexes; a second ``upgrade()`` changes
    nothing."""
    old = _at_layout_4(make_store)
    collection = old.collections["store"]
    old.put(("a", "b"), "k", {"v": 1}, ttl=30)
    old.put(("a", "c"), "k", {"v": 1})
    old.ops.batch_from = 1
    old.batch([PutOp(("a", "d"), "k", {"v": 1}), PutOp(("e",), "k", {"v": 1})])
    assert collection.find_one({registry.LISTED: registry.BATCHES}) is not None
    for entry in _entries(old).values():
        assert entry[registry.EXPIRES] is None
    # What the previous release wrote: no marks, no expires_at.
    unmarked = {"$unset": {registry.PREFIXES: "", registry.EXPIRES: ""}}
    collection.update_many({registry.LISTED: {"$exists": True}}, unmarked)

    store = make_store()
    store.upgrade()
    assert read_version(store.db, store_key("store")) == STORE_ITEM_INDEXES_VERSION
    assert set(collection.index_information()) == ITEM_INDEXES
    for entry in _entries(store).values():
        assert_entry_fields(entry, on_items=True)
    expected = [("a", "b"), ("a", "c"), ("a", "d"), ("e",)]
    assert store.list_namespaces() == expected  # folds the batch document too
    assert store.list_namespaces(prefix=("a",)) == expected[:3]
    before = list(collection.find({}))
    store.upgrade()
    assert list(collection.find({})) == before


def test_a_process_set_up_before_the_upgrade_keeps_entries_expiring_with_their_items(
    make_store: Any,
) -> None:
    """A process of this release set up at layout 4 writes the older way after another
    one upgraded: where an entry has an expires_at, every write it makes (a raise, a
    flag, a settle) keeps it equal to listed_until, so the items' TTL index never drops
    the entry early; an entry it creates has none until a process on layout 5 writes it
    or ``upgrade()`` runs again."""
    stale = _at_layout_4(make_store)
    stale.put(("a",), "short", {"v": 1}, ttl=30)
    store = make_store()
    store.upgrade()
    stale.put(("a",), "forever", {"v": 1})  # raises the entry to FOREVER
    (entry,) = _entries(stale).values()
    assert entry[registry.UNTIL] == registry._NEVER
    assert_entry_fields(entry, on_items=True)
    stale.delete(("a",), "forever")  # flags it; the listing settles it back to the TTL item
    assert stale.list_namespaces() == [("a",)]
    (entry,) = _entries(stale).values()
    short = stale.collections["store"].find_one({"key": "short"})
    assert entry[registry.UNTIL] == entry[registry.EXPIRES] == short["expires_at"]
    stale.put(("b",), "k", {"v": 1})
    assert _entries(stale)["b"][registry.EXPIRES] is None
    assert store.list_namespaces() == [("a",), ("b",)]
    store.upgrade()
    for entry in _entries(store).values():
        assert_entry_fields(entry, on_items=True)


def test_an_upgrade_cut_before_its_record_leaves_no_expiry_on_entries(
    make_store: Any, monkeypatch: Any
) -> None:
    """An upgrade that fails before it records version 5 has given entries their marks
    only: the previous release, still allowed on the collection, raises ``listed_until``
    alone, and the items' TTL index must find no earlier ``expires_at`` to delete the
    entry at."""
    old = _at_layout_4(make_store)
    old.put(("a",), "short", {"v": 1}, ttl=30)
    collection = old.collections["store"]
    collection.update_many({registry.LISTED: {"$exists": True}}, {"$unset": {"prefixes": ""}})

    def cut(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the record was cut")
        yield  # a generator, as schema.record is

    monkeypatch.setattr(schema, "record", cut)
    with pytest.raises(ConnectionError):
        make_store().upgrade()
    monkeypatch.undo()
    assert read_version(old.db, store_key("store")) == 4
    (entry,) = _entries(old).values()
    assert entry[registry.PREFIXES] == registry.marks(("a",))
    assert entry.get(registry.EXPIRES) is None
    assert set(collection.index_information()) > ITEM_INDEXES  # the registry's own stay


def test_a_store_set_up_before_the_upgrade_reads_the_version_again(
    make_store: Any, monkeypatch: Any
) -> None:
    """A store on layout 4 reads the version again before an operation once
    ``LAYOUT_RECHECK_SECONDS`` passed, and after another process's upgrade lists on the
    items' indexes (the registry's own are gone) without a restart; on layout 5 it never
    reads it again."""
    monkeypatch.setattr(schema, "LAYOUT_RECHECK_SECONDS", 0.0)
    stale = _at_layout_4(make_store)
    stale.put(("a",), "k", {"v": 1})
    assert not stale.ops.on_items
    store = make_store()
    store.upgrade()
    calls = count_calls(stale.collections)
    assert stale.list_namespaces() == [("a",)]
    assert stale.ops.on_items
    assert calls[(SCHEMA, "find_one")] == 1  # the version, read once
    calls.clear()
    assert stale.list_namespaces() == [("a",)]
    assert calls == {("store", "aggregate"): 1}


def test_the_version_is_read_again_at_most_once_a_minute(
    make_store: Any, monkeypatch: Any
) -> None:
    """On layout 4 the first operation a minute after the last read reads the version
    again, and claims that read (operations beside it do not read it too), also when the
    version document is gone; a version read again lower than one read before (a read
    answered after an upgrade) never turns the newer layout off; a setup takes the version
    as found (a collection restored, or recreated by an earlier release)."""
    now = [0.0]
    monkeypatch.setattr(schema, "monotonic", lambda: now[0])
    stale = _at_layout_4(make_store)
    calls = count_calls(stale.collections)
    stale.get(("a",), "k")
    assert calls[(SCHEMA, "find_one")] == 0
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    assert stale.ops.recheck_due() and not stale.ops.recheck_due()  # claimed
    now[0] += schema.LAYOUT_RECHECK_SECONDS
    stale.db[SCHEMA_COLLECTION].delete_one({"_id": store_key("store")})
    for _ in range(3):
        stale.get(("a",), "k")
    assert calls[(SCHEMA, "find_one")] == 1
    assert (stale.ops.batched, stale.ops.on_items) == (True, False)
    store = make_store()
    store.upgrade()
    versions = store.db[SCHEMA_COLLECTION]
    versions.update_one({"_id": store_key("store")}, {"$set": {"version": 4}})
    store._run(store.ops.recheck_layout(store.db.name, "store"))
    assert store.ops.on_items
    store.setup()
    assert (store.ops.batched, store.ops.on_items) == (True, False)
