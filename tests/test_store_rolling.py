"""The store's previous release and this one on one collection (DESIGN.md §2, a rolling
deployment): the release before batches of puts were sent insert-first runs as a separate
process beside this one. They take turns writing batches over each other's items (new
items, stored ones, deletes); after each, both read every item and namespace, and both
readings equal each other and what ``InMemoryStore`` holds, and an item overwritten keeps
its ``created_at`` whichever release wrote it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.store import MongoDBStore, documents, registry
from tests import rolling_store
from tests.store_support import assert_entry_fields
from tests.test_rolling_upgrade import ROOT, OldRelease, _having, history, release_tree

SCRIPT = ROOT / "tests" / "rolling_store.py"
ITEMS = [(["roll", f"n{n}"], f"k{k}") for n in range(3) for k in range(12)]


# Previous releases of the store, each the newest commit of ``HEAD``'s history without a
# line of what came after it: batches sent insert-first; quiet puts (store layout 3);
# batch documents (store layout 4); the registry on the items' indexes (store layout 5).
RELEASES = {
    "before insert-first": ("^INSERTS_FROM = ", "store/documents.py"),
    "before quiet puts": ("^STORE_QUIET_PUTS_VERSION = ", "mongo_ckpt/schema.py"),
    "before batch documents": ("^STORE_BATCH_DOCUMENTS_VERSION = ", "mongo_ckpt/schema.py"),
    "before the registry on the items' indexes": (
        "^STORE_ITEM_INDEXES_VERSION = ",
        "mongo_ckpt/schema.py",
    ),
}


def store_release(name: str) -> str | None:
    """The commit of the previous release ``name`` (``RELEASES``)."""
    pattern, path = RELEASES[name]
    for chunk in history():
        later = _having(chunk, pattern, path)
        for rev in chunk:
            if rev not in later:
                return rev
    return None


def release_named(name: str, tmp_path_factory: Any) -> Path:
    rev = store_release(name)
    if rev is None:
        pytest.skip("needs git and the repository's history (the store's previous release)")
    return release_tree(rev, tmp_path_factory.mktemp("store-release"))


@pytest.fixture(scope="module", params=RELEASES)
def previous_store(request: Any, tmp_path_factory: Any) -> Path:
    return release_named(request.param, tmp_path_factory)


def _batch(rng: random.Random, round_: int) -> list[list[Any]]:
    """Twelve distinct items, the first nine put (more than ``INSERTS_FROM``), the rest put
    or deleted."""
    chosen = rng.sample(ITEMS, 12)
    return [
        [ns, key, None if i >= 9 and rng.random() < 0.5 else {"round": round_, "r": i}]
        for i, (ns, key) in enumerate(chosen)
    ]


def test_the_previous_release_and_this_one_write_and_read_one_collection(
    previous_store: Path, database: tuple[str, Any, str, bool]
) -> None:
    uri, client, db_name, direct = database
    assert documents.INSERTS_FROM <= 9
    old = OldRelease(previous_store, uri, db_name, direct, script=SCRIPT)
    try:
        assert old.started["ready"].startswith(str(previous_store)), old.started
        store = MongoDBStore(client, db_name)
        store.setup()
        memory = InMemoryStore()
        rng = random.Random(5)
        created: dict[tuple[str, ...], str] = {}
        for round_ in range(10):
            batch = _batch(rng, round_)
            if round_ % 2:
                theirs = old.turn(json.dumps(batch))
            else:
                store.batch([PutOp(tuple(ns), key, value) for ns, key, value in batch])
                theirs = old.turn("[]")
            memory.batch([PutOp(tuple(ns), key, value) for ns, key, value in batch])
            mine = {
                "items": rolling_store.items(store),
                "namespaces": rolling_store.namespaces(store),
            }
            assert json.loads(json.dumps(mine)) == theirs, round_
            expected = sorted(
                [list(i.namespace), i.key, i.value] for i in memory.search(("roll",), limit=1000)
            )
            assert [item[:3] for item in mine["items"]] == expected, round_
            listed = sorted({tuple(ns) for ns, _, _ in expected})
            assert [tuple(ns) for ns in mine["namespaces"]] == listed, round_
            deleted = {(tuple(ns), key) for ns, key, value in batch if value is None}
            for ns, key, _, created_at, _ in mine["items"]:
                item = (tuple(ns), key)
                if item in created and item not in deleted:
                    assert created_at == created[item], (round_, item)
            created = {(tuple(ns), key): c for ns, key, _, c, _ in mine["items"]}
    finally:
        old.stop()


# What a release's layout gates: whether this release's store may put quietly, whether
# it may send batch documents, and whether its registry is on the items' indexes, on the
# layout that release records.
GATED = {
    "before quiet puts": lambda store: store.ops.quiet,
    "before batch documents": lambda store: store.ops.batched,
    "before the registry on the items' indexes": lambda store: store.ops.on_items,
}


@pytest.mark.parametrize("release", GATED)
def test_a_previous_release_refuses_a_collection_upgraded_past_it(
    release: str, tmp_path_factory: Any, database: tuple[str, Any, str, bool]
) -> None:
    """The previous release records its layout on a new collection; this release's
    ``setup()`` keeps it (quiet puts, batch documents, or the registry on the items'
    indexes off, as that release needs) until ``upgrade()``, after which the previous
    release refuses to start, and every entry, the previous release's too, is found by
    its marks and expires with its items."""
    tree = release_named(release, tmp_path_factory)
    gated = GATED[release]
    uri, client, db_name, direct = database
    old = OldRelease(tree, uri, db_name, direct, script=SCRIPT)
    try:
        store = MongoDBStore(client, db_name)
        store.setup()
        assert not gated(store)
        store.ops.batch_from = 1  # a batch document even for one namespace, were it on
        store.put(("roll", "n0"), "k0", {"v": 1})
        assert old.turn(json.dumps([[["roll", "n1"], "k1", {"v": 2}]]))["namespaces"] == [
            ["roll", "n0"],
            ["roll", "n1"],
        ]
    finally:
        old.stop()
    store.upgrade()
    assert gated(store)
    collection = store.collections["store"]
    for entry in collection.find({registry.LISTED: {"$exists": True, "$ne": registry.BATCHES}}):
        assert_entry_fields(entry, on_items=True)
    assert not {"registry_levels", "registry_until"} & set(collection.index_information())
    with pytest.raises(AssertionError, match="SchemaTooNewError"):
        OldRelease(tree, uri, db_name, direct, script=SCRIPT).stop()
    store.batch([PutOp(("roll", f"n{n}"), "k", {"v": n}) for n in range(2, 4)])
    expected = [("roll", f"n{n}") for n in range(4)]
    assert store.list_namespaces(prefix=("roll",)) == expected
