"""Batch documents: a batch putting into ``registry.BATCH_FROM``
namespaces or more names them in one document instead of one registry statement each, and
every listing folds batch documents into the entries before it reads them. What a batch
leaves, what a listing makes of it, a fold cut part way or run twice, a shorter TTL named
by a batch. The races of batch documents with deletes, puts and a
listing are in ``tests/test_store_registry.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langgraph.store.base import PutOp

from mongo_ckpt.store import MongoDBStore, documents, registry
from mongo_ckpt.store.namespaces import joined
from tests.backends import sync_client
from tests.store_stepping import LISTING, Stepper, listed, operation, truth
from tests.store_support import keep_expired

NAMES = [("users", f"u{i}", "memories") for i in range(registry.BATCH_FROM + 2)]


def _batches(store: MongoDBStore) -> list[dict[str, Any]]:
    return list(store.collections["registry"].find(registry.BATCHES_QUERY))


def _entries(store: MongoDBStore) -> dict[str, dict[str, Any]]:
    found = store.collections["registry"].find({"_id": {"$regex": "^namespace:"}})
    return {doc[registry.LISTED]: doc for doc in found}


def test_a_batch_into_many_namespaces_leaves_one_batch_document_for_the_listing(
    make_store: Any,
) -> None:
    store = make_store()
    store.setup()
    store.batch([PutOp(ns, "k", {"v": 1}) for ns in NAMES])
    (batch,) = _batches(store)
    assert [tuple(labels) for labels, _, _ in batch["named"]] == NAMES
    assert _entries(store) == {}
    assert store.list_namespaces(prefix=("users",)) == NAMES
    assert _batches(store) == []
    entries = _entries(store)
    assert sorted(entries) == sorted(joined(ns) for ns in NAMES)
    assert not any(entry["recheck"] for entry in entries.values())
    # Below BATCH_FROM namespaces, a batch sends their entry statements.
    few = [PutOp(("teams", f"t{i}"), "k", {"v": 1}) for i in range(registry.BATCH_FROM - 1)]
    store.batch(few)
    assert _batches(store) == []
    assert store.list_namespaces(prefix=("teams",)) == [op.namespace for op in few]


def test_a_shorter_ttl_named_by_a_batch_document_is_noticed(make_store: Any) -> None:
    """An overwrite with a TTL beside a new item expiring later: the batch document names
    each namespace with its earliest expiry as well as its latest, so the fold flags the
    entries (recorded as never expiring), and the probe finds the items expired."""
    store = make_store()
    store.setup()
    keep_expired(store)
    store.batch([PutOp(ns, "k", {"v": 1}) for ns in NAMES])  # never expire
    assert listed(store) == NAMES
    store.batch([PutOp(ns, key, {}, ttl=ttl) for ns in NAMES for key, ttl in (("k", 5), ("b", 6))])
    past = documents.utc_now() - timedelta(seconds=1)
    store.collections["store"].update_many({}, {"$set": {"expires_at": past}})
    assert listed(store) == []


def test_a_fold_cut_part_way_is_folded_again(db_name: str) -> None:
    """A listing dies after each request of its fold in turn (its bulk write cut there):
    the batch document stays until its entries are written, and the next listing lists
    every namespace."""
    client = sync_client("mock")
    for cut in range(len(NAMES) + 2):  # up to the batch document's delete
        client.drop_database(db_name)
        store = MongoDBStore(client, db_name)
        store.setup()
        store.batch([PutOp(ns, "k", {"v": 1}) for ns in NAMES])
        lister = Stepper(operation(store, [LISTING]))
        for _ in range(2 + cut):  # the page, the batch documents, then ``cut`` requests
            lister.step(store.collections)
        assert len(_batches(store)) == (1 if cut <= len(NAMES) else 0), cut
        assert listed(store) == NAMES, cut
    client.drop_database(db_name)


def test_a_batch_document_folded_twice_leaves_the_entries_exact(make_store: Any) -> None:
    """Two listings read one batch document and both fold it; the second lands after the
    first listing settled the entries and after a delete emptied a namespace."""
    store = make_store()
    store.setup()
    store.batch([PutOp(ns, "k", {"v": 1}, ttl=5) for ns in NAMES])
    (batch,) = _batches(store)
    assert listed(store) == NAMES
    store.delete(NAMES[0], "k")
    store.collections["registry"].insert_one({**batch, "_id": "batch:again"})
    assert listed(store) == NAMES[1:] == truth(store)
    entries = _entries(store)
    assert joined(NAMES[0]) not in entries
    items = {doc["ns"]: doc for doc in store.collections["store"].find({"key": "k"})}
    for name, entry in entries.items():
        assert not entry["recheck"] and entry[registry.UNTIL] == items[name]["expires_at"]


def test_a_put_cut_before_its_batch_document_is_listed_once_retried(make_store: Any) -> None:
    """The batch's items land, its batch document does not (the bulk write cut there): the
    namespaces stay unlisted until the same batch is sent again."""
    store = make_store()
    store.setup()
    puts = [PutOp(ns, "k", {"v": 1}) for ns in NAMES]
    cut = Stepper(operation(store, puts))
    for _ in range(len(NAMES)):  # the inserts, not the batch document
        cut.step(store.collections)
    assert listed(store) == []
    store.batch(puts)
    assert listed(store) == NAMES == truth(store)


def test_a_batch_naming_more_than_a_document_holds_writes_several(
    make_store: Any, monkeypatch: Any
) -> None:
    """Past ``registry.BATCH_BYTES`` of labels a batch document is followed by another
    (none comes near MongoDB's 16 MiB per document); the listing folds them all."""
    store = make_store()
    store.setup()
    monkeypatch.setattr(registry, "BATCH_BYTES", 300)
    store.batch([PutOp(ns, "k", {"v": 1}) for ns in NAMES])
    batches = _batches(store)
    assert len(batches) > 2
    named = [tuple(labels) for batch in batches for labels, _, _ in batch["named"]]
    assert sorted(named) == NAMES
    assert store.list_namespaces(prefix=("users",)) == NAMES
    assert _batches(store) == []


def test_a_backlog_is_folded_in_parts_each_kept(db_name: str, monkeypatch: Any) -> None:
    """Past ``registry.FOLD_NAMES`` names a fold writes in parts; a listing that dies after
    the first part leaves the other batch documents, which the next listing folds."""
    monkeypatch.setattr(registry, "FOLD_NAMES", len(NAMES))
    client = sync_client("mock")
    store = MongoDBStore(client, db_name)
    store.setup()
    for round_ in range(3):
        store.batch([PutOp(ns, f"k{round_}", {"v": round_}) for ns in NAMES])
    assert len(_batches(store)) == 3
    lister = Stepper(operation(store, [LISTING]))
    for _ in range(2 + len(NAMES) + 1):  # the page, the batch documents, the first part
        lister.step(store.collections)
    assert len(_batches(store)) == 2
    assert listed(store) == NAMES
    assert _batches(store) == []
    client.drop_database(db_name)


def test_listings_by_suffix_and_stores_reading_the_items_meet_batch_documents(
    make_store: Any,
) -> None:
    """A suffix-only listing folds as any other (batch documents have an empty label list
    for its ``$size``); a store whose listings read the items (``omit_expired`` off),
    which never folds, sends entry statements instead of batch documents."""
    store = make_store()
    store.setup()
    store.batch([PutOp(ns, "k", {"v": 1}) for ns in NAMES])
    assert store.list_namespaces(suffix=("memories",)) == NAMES
    assert _batches(store) == []
    reading_items = make_store(ttl={"omit_expired": False})
    reading_items.setup()
    others = [PutOp(("teams", f"t{i}"), "k", {"v": 1}) for i in range(registry.BATCH_FROM)]
    reading_items.batch(others)
    assert _batches(store) == []
    assert store.list_namespaces(prefix=("teams",)) == [op.namespace for op in others]
