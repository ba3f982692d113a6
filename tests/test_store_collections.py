"""The store's two collections: ``store.collection`` holds exactly the items (as the
official store's does), the namespace registry a collection of its own with its indexes,
its entries found by their marks and expiring with their items. The races of listings
with puts and deletes are in ``tests/test_store_registry.py``."""

from __future__ import annotations

import threading
import time
from typing import Any

from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.schema import (
    STORE_SCHEMA_VERSION,
    read_version,
    store_key,
)
from mongo_ckpt.store import MongoDBStore, registry
from tests.store_support import assert_entry_fields

NAMES = [("users", f"u{i}", "memories") for i in range(registry.BATCH_FROM)]
ITEM_INDEXES = {"_id_", "namespace_key", "prefix_recency", "expires_at"}
REGISTRY_INDEXES = {"_id_", "registry_prefixes", "registry_until"}


def _entries(store: MongoDBStore) -> dict[str, dict[str, Any]]:
    found = store.collections["registry"].find({"_id": {"$regex": "^namespace:"}})
    return {doc[registry.LISTED]: doc for doc in found}


def test_the_items_collection_holds_only_items_and_the_registry_its_own(
    make_store: Any,
) -> None:
    """New collections get their indexes: the items', and the registry's own, in
    ``<collection>_namespaces``. After puts into many namespaces (batch documents) and
    listings, ``store.collection`` holds one document per item, each with its key and
    value; every entry carries its marks and the latest expiry of its items, and listings
    answer as ``InMemoryStore`` does."""
    store = make_store()
    store.setup()
    assert read_version(store.db, store_key("store")) == STORE_SCHEMA_VERSION
    assert store.collections["registry"].name == "store_namespaces"
    assert set(store.collection.index_information()) == ITEM_INDEXES
    assert set(store.collections["registry"].index_information()) == REGISTRY_INDEXES
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
    docs = list(store.collection.find({}))
    assert len(docs) == store.collection.count_documents({}) == len(ops)
    assert all(doc["key"] == "k" or doc["key"] == "top" for doc in docs)
    assert all(doc["value"] == {"v": 1} for doc in docs)
    entries = _entries(store)
    assert len(entries) == len(NAMES) + 2
    for entry in entries.values():
        assert_entry_fields(entry)
        items = store.collections["store"].find({"ns": entry[registry.LISTED]})
        assert entry[registry.UNTIL] == max(i.get("expires_at", registry._NEVER) for i in items)


def test_an_entry_expires_with_its_items(make_store: Any, request: Any) -> None:
    """The registry's TTL index drops a namespace's entry with its last item: nothing of
    the namespace is left stored, and the listing is empty without a sweep."""
    store = make_store()
    store.put(("short",), "k", {"v": 1}, ttl=0.005)  # 0.3 s
    collection = store.collections["store"]
    (entry,) = _entries(store).values()
    assert entry[registry.UNTIL] == collection.find_one({"key": "k"})["expires_at"]
    if request.node.callspec.params["client"][0] == "mongodb":
        return  # MongoDB's TTL monitor runs once a minute: too slow to wait for here
    deadline = time.monotonic() + 10
    # mongomock deletes on the next read; SecantusDB's monitor wakes every second.
    entries = store.collections["registry"]
    while (collection.count_documents({}) or entries.count_documents({})) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert list(collection.find({})) == [] == list(entries.find({}))
    assert store.list_namespaces() == []


def test_two_upgrades_at_once_both_succeed(make_store: Any) -> None:
    """Two processes upgrading one store at once (``mongo-ckpt upgrade --store`` twice):
    both succeed, the layout recorded once, the items untouched."""
    first = make_store(collection_name="memories")
    first.put(("users",), "a", {"v": 1})
    stores = [make_store(collection_name="memories") for _ in range(2)]
    errors: list[BaseException] = []

    def upgrade(store: MongoDBStore) -> None:
        try:
            store.upgrade()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=upgrade, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert read_version(first.db, store_key("memories")) == STORE_SCHEMA_VERSION
    assert [(i.key, i.value) for i in first.search(("users",))] == [("a", {"v": 1})]
