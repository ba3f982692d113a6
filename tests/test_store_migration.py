"""``mongo-ckpt migrate --from-official-store``: a langgraph-store-mongodb collection
converted into the store, verified, resumed, the source untouched; on mock and wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.store.base import PutOp
from langgraph.store.mongodb import MongoDBStore as OfficialStore

from mongo_ckpt.store import MongoDBStore, documents
from mongo_ckpt.store.migration import NotOfficialStoreError, migrate_official_store
from mongo_ckpt.store.reading import utc
from tests.cli_support import invoke
from tests.store_support import DIMS, FakeEmbeddings

VALUES = {
    "a": {"text": "hiking in the alps", "n": 1, "$schema": "x", "deep": {"a.b": [1, {"c": 2}]}},
    "b": {"text": "sailing trips", "n": 2},
    "c": {"text": "mountain bikes", "n": 3},
}


class Collection:
    """PyMongo's ``create_index(keys=[names])`` as the official store calls it, on mongomock."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_index(self, keys: Any = None, **kwargs: Any) -> Any:
        if isinstance(keys, list):
            keys = [(k, 1) if isinstance(k, str) else k for k in keys]
        return self._inner.create_index(keys, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@pytest.fixture
def dbs(client: Any, db_name: str) -> Iterator[tuple[str, str]]:
    yield f"{db_name}_src", db_name
    client.drop_database(f"{db_name}_src")
    client.drop_database(db_name)


def official(client: Any, db: str, **kwargs: Any) -> OfficialStore:
    store = OfficialStore(Collection(client[db]["memories"]), **kwargs)
    for i in range(6):
        ns = ("users", f"u{i % 3}", "facts") if i % 2 else ("users", f"u{i % 3}")
        store.batch([PutOp(ns, key, {**v, "i": i}) for key, v in VALUES.items()])
    return store


def snapshot(client: Any, db: str) -> list[Any]:
    return sorted(map(repr, client[db]["memories"].find({})))


def test_migrate_verify_resume(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    src = official(client, source)
    before = snapshot(client, source)
    args = ["migrate", "--from-official-store", "--source-db", source, "--db", target]
    args += ["--source-store", "memories", "--batch", "4"]
    result = invoke(client, *args, "--verify", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["migrated"]["items"] == 18 and report["verified"]["items"] == 18
    assert report["verified"]["mismatches"] == []
    assert snapshot(client, source) == before  # the source is only read
    store = MongoDBStore(client, target)
    for ns in [("users", "u0"), ("users", "u1", "facts")]:
        for key in VALUES:
            ours, theirs = store.get(ns, key), src.get(ns, key, refresh_ttl=False)
            assert ours is not None and theirs is not None
            assert (ours.value, ours.created_at, ours.updated_at) == (
                theirs.value,
                utc(theirs.created_at),  # mongomock's official store returns them naive
                utc(theirs.updated_at),
            )
    assert store.list_namespaces(prefix=("users",), max_depth=2) == [
        ("users", "u0"),
        ("users", "u1"),
        ("users", "u2"),
    ]
    assert [i.key for i in store.search(("users", "u2"), filter={"n": 2})] == ["b", "b"]
    # A rerun continues after the last batch: nothing left, nothing changed.
    again = invoke(client, *args, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output[again.output.index("{") :])["migrated"]["items"] == 18
    assert store.get(("users", "u0"), "a").value == VALUES["a"] | {"i": 0}


def test_an_interrupted_migration_resumes(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    official(client, source)
    store = MongoDBStore(client, target)
    batches: list[int] = []

    def stop_after_two(counts: Any) -> None:
        batches.append(counts.items)
        if len(batches) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        migrate_official_store(client[source]["memories"], store, batch=5, progress=stop_after_two)
    assert store.collections["store"].count_documents({"key": {"$exists": True}}) == 10
    done = migrate_official_store(client[source]["memories"], store, batch=5)
    assert done.items == 18
    assert store.collections["store"].count_documents({"key": {"$exists": True}}) == 18


def test_ttl_and_vectors_come_along(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    official(client, source, ttl_config={"default_ttl": 3600.0})
    memories = client[source]["memories"]
    # The official store's vectors: one per item under ``embedding``, of its indexed field.
    for doc in memories.find({}):
        vector = FakeEmbeddings.vector(doc["value"]["text"])
        memories.update_one({"_id": doc["_id"]}, {"$set": {"embedding": vector}})
    # One item last written two hours ago: expired (the source's TTL monitor may have
    # deleted it already; if not, the migration leaves it out).
    past = documents.utc_now() - timedelta(hours=2)
    memories.update_one({"key": "c", "value.i": 5}, {"$set": {"updated_at": past}})
    args = ["migrate", "--from-official-store", "--source-db", source, "--db", target, "--json"]
    args += ["--source-store", "memories", "--vector-field", "text", "--vector-dims", str(DIMS)]
    result = invoke(client, *args, "--verify")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["migrated"]["items"] == 17 and report["migrated"]["vectors"] == 17
    assert report["verified"]["mismatches"] == []
    index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}
    store = MongoDBStore(client, target, index=index, exact_search=True)  # type: ignore[arg-type]
    hits = store.search(("users", "u1"), query="sailing trips", limit=1)
    assert hits[0].key == "b" and hits[0].score == pytest.approx(1.0)
    assert store.get(("users", "u2", "facts"), "c") is None  # the expired one
    assert store.collections["store"].find_one({"key": "a"})["ttl_minutes"] == 60


def test_refuses_a_collection_of_another_layout(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    MongoDBStore(client, source, collection_name="memories").put(("a",), "k", {"v": 1})
    store = MongoDBStore(client, target)
    with pytest.raises(NotOfficialStoreError, match="is not a langgraph-store-mongodb item"):
        migrate_official_store(client[source]["memories"], store)
    args = ["migrate", "--from-official-store", "--source-db", target, "--db", target]
    same = invoke(client, *args)
    assert same.exit_code == 2 and "source and target are the same collection" in same.output


def test_a_source_collection_without_items_is_refused_naming_those_with_items(
    client: Any, dbs: tuple[str, str]
) -> None:
    """A source name with a typo (or the docs' ``store`` where the official default is
    ``persistent-store``): exit 3, the collections that hold official items named, and
    nothing written in the target database."""
    source, target = dbs
    official(client, source)
    args = ["migrate", "--from-official-store", "--source-db", source, "--db", target]
    missing = invoke(client, *args, "--source-store", "store", "--verify")
    assert missing.exit_code == 3, missing.output
    assert "holds no items" in missing.output
    assert "langgraph-store-mongodb items: memories: pass --source-store NAME" in missing.output
    assert target not in client.list_database_names()
    report = invoke(client, *args, "--source-store", "nothing", "--json")
    assert json.loads(report.output)["official_store_collections"] == ["memories"]
    client[source]["memories"].drop()
    alone = invoke(client, *args, "--source-store", "store")
    assert alone.exit_code == 3 and "no collection of it holds" in alone.output


def test_a_namespace_the_store_refuses_stops_the_run_before_its_batch(
    client: Any, dbs: tuple[str, str]
) -> None:
    """An official item whose namespace the store refuses (``registry.check_storable``):
    the run stops before its batch, naming the document, and stops there again until it is
    fixed in the source; then it continues and lists every namespace."""
    source, target = dbs
    official(client, source)
    huge = ["users", "x" * (3 * 2**20)]
    now = datetime.now(timezone.utc)
    fields = {"key": "k", "value": {"v": 1}, "created_at": now, "updated_at": now}
    inserted = client[source]["memories"].insert_one({"namespace": huge, **fields})
    args = ["migrate", "--from-official-store", "--source-db", source, "--source-store",
            "memories", "--db", target, "--batch", "4"]
    for _ in range(2):
        stopped = invoke(client, *args)
        assert stopped.exit_code == 2, stopped.output
        assert repr(inserted.inserted_id) in stopped.output and "-byte limit" in stopped.output
    store = MongoDBStore(client, target)
    assert huge not in [list(ns) for ns in store.list_namespaces()]
    client[source]["memories"].update_one({"_id": inserted.inserted_id},
                                          {"$set": {"namespace": ["users", "short"]}})
    assert invoke(client, *args).exit_code == 0
    assert ("users", "short") in store.list_namespaces(prefix=("users",))


def test_a_finished_migration_run_again_on_an_emptied_source_reports_it(
    client: Any, dbs: tuple[str, str]
) -> None:
    source, target = dbs
    official(client, source)
    args = ["migrate", "--from-official-store", "--source-db", source, "--source-store",
            "memories", "--db", target]
    assert invoke(client, *args).exit_code == 0
    client[source]["memories"].delete_many({})
    again = invoke(client, *args)
    assert again.exit_code == 0, again.output
