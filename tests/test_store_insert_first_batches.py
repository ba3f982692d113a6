"""The insert-first batch shape of the store: a batch of at least
``documents.INSERTS_FROM`` puts inserts its items, the first stored one sending the rest
again as upserts. Each test states the contract it checks (docs/store.md)."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.store.base import GetOp, PutOp
from langgraph.store.memory import InMemoryStore
from pymongo import ASCENDING
from pymongo.errors import BulkWriteError, OperationFailure

from mongo_ckpt.store import MongoDBStore, documents, registry
from tests.backends import count_calls, sync_client
from tests.store_support import DIMS, FakeEmbeddings, keep_expired

ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"1234567890123456")
BACKENDS = ["mock", "wire"]
MANY = 8  # documents.INSERTS_FROM (the put_shape fixture patches that constant)


@pytest.fixture(params=BACKENDS)
def sync_store(request: Any) -> Any:
    """A factory of sync stores on one fresh database of the backend."""
    client = sync_client(request.param)
    db_name = f"t_{uuid.uuid4().hex[:12]}"
    made: list[MongoDBStore] = []

    def make(**kwargs: Any) -> MongoDBStore:
        store = MongoDBStore(client, db_name, **kwargs)
        store.setup()
        made.append(store)
        return store

    yield make
    client.drop_database(db_name)
    client.close()


def _truth(store: Any) -> list[tuple[str, ...]]:
    """The namespaces with a live item, read from the items themselves."""
    query = documents.live(documents.utc_now())
    return sorted({tuple(d["namespace"]) for d in store.collections["store"].find(query)})


def _user_unique_index(store: Any) -> None:
    """The kind of index docs/store.md suggests adding yourself, made unique."""
    store.collections["store"].create_index(
        [("value.email", ASCENDING)], unique=True, sparse=True, name="user_email"
    )


# -- Finding: a failing put no longer leaves the batch's deletes flagged in the registry --


@pytest.mark.parametrize("put_shape", ["pipeline", "insert"], indirect=True)
def test_a_put_refused_by_a_user_index_unlists_a_namespace_the_batch_emptied(
    sync_store: Any, put_shape: str
) -> None:
    """A batch deletes the only item of ``("gone",)`` and puts items elsewhere, one of
    which another unique index of the user's refuses. The error is raised (docs: "raised
    as it is"), and the delete has been applied: the server ran the delete command
    first. Its registry entry must then be flagged (or gone), so that ``("gone",)`` is
    no longer listed. The flags ride with the deletes, before the puts: with them after
    the puts (as 9b4c483 first had them), a write stopped at a put never flagged the
    entry, and the empty namespace stayed listed for good."""
    store = sync_store()
    _user_unique_index(store)
    store.put(("gone",), "only", {"v": 1})
    store.put(("b",), "p", {"email": "x@example.com"})
    assert store.list_namespaces() == [("b",), ("gone",)]  # settles the new entries
    puts = [PutOp(("b",), f"n{i}", {"i": i}) for i in range(MANY)]
    puts[3] = PutOp(("b",), "n3", {"email": "x@example.com"})
    with pytest.raises(BulkWriteError):
        store.batch([PutOp(("gone",), "only", None), *puts])
    assert store.get(("gone",), "only") is None  # the delete was applied
    assert _truth(store) == [("b",)]
    assert store.list_namespaces() == _truth(store)


# -- What held ---------------------------------------------------------------------------


def test_user_unique_index_refusing_an_insert_is_raised_not_retried_forever(
    sync_store: Any,
) -> None:
    """An E11000 of another unique index at an insert is taken for a stored item; the
    upsert sent again is refused the same way and that error is raised (one retry, no
    loop); the other items and the conflicting one are as the ordered write left them."""
    store = sync_store()
    _user_unique_index(store)
    store.put(("b",), "p", {"email": "x@example.com"})
    inner = dict(store.collections)
    calls = count_calls(store.collections)
    puts = [PutOp(("b",), f"n{i}", {"i": i}) for i in range(documents.INSERTS_FROM)]
    puts[3] = PutOp(("b",), "n3", {"email": "x@example.com"})
    with pytest.raises(BulkWriteError) as raised:
        store.batch(puts)
    store.collections.update(inner)
    assert calls[("store", "bulk_write")] + calls[("$client", "bulk_write")] == 2
    (error,) = raised.value.details["writeErrors"]
    assert error["code"] == 11000
    assert store.get(("b",), "p").value == {"email": "x@example.com"}
    assert store.get(("b",), "n3") is None
    assert [store.get(("b",), f"n{i}") is not None for i in range(4)] == [True] * 3 + [False]
    assert store.list_namespaces() == [("b",)]


def test_a_write_concern_error_with_a_refused_insert_is_raised_without_a_retry(
    sync_store: Any,
) -> None:
    store = sync_store(client_bulk_write=False)  # the error comes from the items' write
    inner = store.collections["store"]
    calls: list[Any] = []

    class Failing:
        def __getattr__(self, attr: str) -> Any:
            if attr != "bulk_write":
                return getattr(inner, attr)

            def bulk_write(requests: Any, **kwargs: Any) -> Any:
                calls.append(requests)
                raise BulkWriteError(
                    {
                        "writeErrors": [{"index": 2, "code": 11000, "errmsg": "dup"}],
                        "writeConcernErrors": [{"code": 64, "errmsg": "wtimeout"}],
                        "nInserted": 2,
                    }
                )

            return bulk_write

    store.collections["store"] = Failing()
    with pytest.raises(BulkWriteError):
        store.batch([PutOp(("w",), f"k{i}", {"i": i}) for i in range(documents.INSERTS_FROM)])
    store.collections["store"] = inner
    assert len(calls) == 1


def test_refused_insert_reads_only_one_duplicate_among_the_inserts() -> None:
    def error(errors: list[dict[str, Any]], **more: Any) -> BulkWriteError:
        return BulkWriteError({"writeErrors": errors, **more})

    inserts = range(3, 11)
    assert documents.refused_insert(error([{"index": 3, "code": 11000}]), inserts) == 0
    assert documents.refused_insert(error([{"index": 10, "code": 11000}]), inserts) == 7
    assert documents.refused_insert(error([{"index": 2, "code": 11000}]), inserts) is None
    assert documents.refused_insert(error([{"index": 11, "code": 11000}]), inserts) is None
    assert documents.refused_insert(error([{"index": 4, "code": 121}]), inserts) is None
    two = [{"index": 4, "code": 11000}, {"index": 5, "code": 11000}]
    assert documents.refused_insert(error(two), inserts) is None


STORE_KINDS = {
    "plain": {},
    "serde": {"serde": ENCRYPTED},
    "vectors": {
        "index": {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]},
        "exact_search": True,
    },
}


def _expire(store: Any, key: str) -> None:
    """The stored copy of ``key`` expired an hour ago (the TTL monitor has not run)."""
    past = documents.utc_now() - timedelta(hours=1)
    store.collections["store"].update_one({"key": key}, {"$set": {"expires_at": past}})


@pytest.mark.parametrize("kind", list(STORE_KINDS))
@pytest.mark.parametrize("stored", ["every_other", "first", "last", "all"])
def test_stored_live_and_expired_items_among_an_insert_first_batch(
    sync_store: Any, kind: str, stored: str
) -> None:
    """Ten puts (plus a delete and a refreshed get) over items some of which are stored:
    every value as put, ``created_at`` kept over live copies and renewed over expired
    ones, no field of the earlier form left, results and listing as ``InMemoryStore``."""
    store = sync_store(**STORE_KINDS[kind])
    keep_expired(store)
    ns = ("t", "x")
    memory = InMemoryStore()
    keys = [f"k{i}" for i in range(10)]
    which = {
        "every_other": keys[::2],
        "first": keys[:1],
        "last": keys[-1:],
        "all": keys,
    }[stored]
    expired = set(which[1::2])  # every other stored copy is expired
    for key in which:
        value = {"text": f"old {key}", "old": True, "key": key}
        store.put(ns, key, value, ttl=30 if key in expired or key == "k9" else None)
        if key not in expired:
            memory.put(ns, key, value)
    for key in expired:
        _expire(store, key)
    store.put(ns, "ttl_read", {"text": "read me", "key": "ttl_read"}, ttl=30)
    memory.put(ns, "ttl_read", {"text": "read me", "key": "ttl_read"})
    store.put(("del",), "d", {"v": 1})
    before = {item.key: item for item in store.search(ns, limit=100)}
    ops: list[Any] = [GetOp(ns, "ttl_read", refresh_ttl=True), PutOp(("del",), "d", None)]
    ops += [
        PutOp(ns, key, {"text": f"new {key}", "key": key, "i": i}) for i, key in enumerate(keys)
    ]
    assert len(ops) - 2 >= documents.INSERTS_FROM
    store.batch(ops)
    memory.batch([PutOp(("del",), "d", None), *ops[2:]])
    after = {item.key: item for item in store.search(ns, limit=100)}
    assert {k: i.value for k, i in after.items()} == {
        i.key: i.value for i in memory.search(ns, limit=100)
    }
    for key in keys:
        item = after[key]
        if key in before:  # live copy
            assert item.created_at == before[key].created_at, key
            assert item.updated_at > before[key].updated_at, key
        else:  # new or over an expired copy
            assert item.created_at == item.updated_at, key
    docs = {d["key"]: d for d in store.collections["store"].find({"ns": "t\x00x"})}
    shapes = {frozenset(d) for key, d in docs.items() if key in keys}
    assert len(shapes) == 1, shapes  # inserted and upserted items: one form
    assert "expires_at" not in next(iter(shapes))
    assert store.list_namespaces() == [ns]  # InMemoryStore keeps ("del",) listed empty
    assert _truth(store) == [ns]


def test_several_puts_to_one_item_in_an_insert_first_batch_the_last_wins(
    sync_store: Any,
) -> None:
    store = sync_store()
    ns = ("dup",)
    ops = [PutOp(ns, "a", {"v": 1}), *(PutOp(ns, f"k{i}", {"v": i}) for i in range(8))]
    ops += [PutOp(ns, "a", {"v": 2}), PutOp(ns, "k3", None), PutOp(ns, "k3", {"v": 33})]
    store.batch(ops)
    memory = InMemoryStore()
    memory.batch(ops)
    got = {i.key: i.value for i in store.search(ns, limit=100)}
    assert got == {i.key: i.value for i in memory.search(ns, limit=100)}


def test_ttl_puts_in_an_insert_first_batch_flag_the_entry(sync_store: Any) -> None:
    """An item that never expires overwritten, with the rest of the namespace, by puts
    with a TTL: the entry is flagged and a listing after those items expire is empty."""
    store = sync_store()
    keep_expired(store)
    ns = ("ttl",)
    store.put(ns, "k4", {"v": 0})
    assert store.list_namespaces() == [ns]
    store.batch([PutOp(ns, f"k{i}", {"v": i}, ttl=30) for i in range(10)])
    entry = store.collections["registry"].find_one({"_id": registry.entry_id("ttl")})
    assert entry.get("recheck") is True
    for i in range(10):
        _expire(store, f"k{i}")
    assert store.list_namespaces() == [] == _truth(store)


async def test_async_insert_first_batch_over_stored_items(store_api: Any) -> None:
    """The same shape through ``abatch`` (wire: PyMongo's AsyncMongoClient)."""
    ns = ("a", "sync")
    await store_api.put(ns, "k2", {"v": "old"})
    await store_api.put(ns, "k7", {"v": "old"})
    first = await store_api.get(ns, "k7")
    ops = [PutOp(ns, f"k{i}", {"v": i}) for i in range(10)]
    await store_api.batch(ops)
    items = {i.key: i for i in await store_api.search(ns, limit=100)}
    assert {k: i.value for k, i in items.items()} == {f"k{i}": {"v": i} for i in range(10)}
    assert items["k7"].created_at == first.created_at
    assert await store_api.list_namespaces() == [ns]


def test_threaded_insert_first_writers_in_opposite_orders_on_wire() -> None:
    """Two writers put the same ten keys in opposite orders, a third deletes some of them
    and lists: no error, each item whole (its value names its key) and the listing equals
    the items afterwards."""
    client = sync_client("wire")
    db_name = f"t_{uuid.uuid4().hex[:12]}"
    store = MongoDBStore(client, db_name)
    store.setup()
    keys = [f"k{i}" for i in range(10)]
    names = [("race", "a"), ("race", "b")]
    errors: list[BaseException] = []

    def writer(seed: int, order: list[str]) -> None:
        try:
            for round_ in range(12):
                ns = names[round_ % 2]
                store.batch([PutOp(ns, k, {"key": k, "by": seed, "r": round_}) for k in order])
        except BaseException as exc:  # reported below
            errors.append(exc)

    def deleter() -> None:
        rng = random.Random(7)
        try:
            for _ in range(12):
                ns = rng.choice(names)
                store.batch([PutOp(ns, k, None) for k in rng.sample(keys, 5)])
                store.list_namespaces(prefix=("race",))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(1, keys)),
        threading.Thread(target=writer, args=(2, keys[::-1])),
        threading.Thread(target=deleter),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        for ns in names:
            for item in store.search(ns, limit=100):
                assert item.value["key"] == item.key
                assert item.created_at <= item.updated_at
        assert store.list_namespaces(limit=100) == _truth(store)
        docs = list(store.collections["store"].find({"key": {"$exists": True}}))
        assert len(docs) == len({(d["ns"], d["key"]) for d in docs})
    finally:
        client.drop_database(db_name)
        client.close()


# -- Pre-existing (not introduced by 9b4c483, but the insert-first shape keeps it) --------


@pytest.mark.parametrize("put_shape", ["pipeline", "insert"], indirect=True)
def test_a_value_bson_cannot_encode_is_refused_before_the_batch_deletes(
    sync_store: Any, put_shape: str
) -> None:
    """``StoreOperations.plan`` raises before any I/O on bad input. A value BSON cannot
    encode (a ``Decimal``, an integer past 64 bits; ``InMemoryStore`` takes both) is
    refused by the plan, with the namespace and key: before, the plan let it through, and
    the batch's delete was applied before the put failed to encode."""
    store = sync_store()
    store.put(("keep",), "a", {"v": 1})
    store.put(("keep",), "b", {"v": 1})
    assert store.list_namespaces() == [("keep",)]  # settles the entry
    for bad, error, text in [
        ({"price": Decimal("1.5")}, TypeError, "cannot be stored as BSON"),
        ({"n": [2**64]}, ValueError, "holds an integer outside BSON's 64-bit range"),
    ]:
        ops = [PutOp(("keep",), "a", None)]
        ops += [PutOp(("new",), f"k{i}", {"v": i}) for i in range(MANY - 1)]
        ops.append(PutOp(("new",), "bad", bad))
        with pytest.raises(error, match=f"key 'bad' {text}"):
            store.batch(ops)
        assert store.get(("keep",), "a") is not None
        assert store.search(("new",)) == []
        assert store.list_namespaces() == _truth(store) == [("keep",)]



@pytest.mark.parametrize("client_bulk_write", [None, False], ids=["one command", "two"])
def test_a_put_refused_with_a_write_concern_error_still_flags_the_emptied_namespace(
    monkeypatch: pytest.MonkeyPatch, db_name: str, client_bulk_write: bool | None
) -> None:
    """As above, with the write error reported beside a write concern error (what
    ``w: "majority"`` with a ``wtimeout`` answers on a replica set): the client-level bulk
    write raises it whole, and the registry's flags are still sent after it."""
    from pymongo import MongoClient
    from pymongo.collection import Collection
    from pymongo.errors import ClientBulkWriteException

    concern = [{"code": 64, "errmsg": "waiting for replication timed out"}]
    whole, per_collection = MongoClient.bulk_write, Collection.bulk_write

    def client_bulk_write_(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return whole(self, *args, **kwargs)
        except ClientBulkWriteException as error:
            details = {**error.details, "writeConcernErrors": concern}
            raise ClientBulkWriteException(details, error.verbose) from None

    def bulk_write_(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return per_collection(self, *args, **kwargs)
        except BulkWriteError as error:
            raise BulkWriteError({**error.details, "writeConcernErrors": concern}) from None

    monkeypatch.setattr(MongoClient, "bulk_write", client_bulk_write_)
    monkeypatch.setattr(Collection, "bulk_write", bulk_write_)
    client = sync_client("wire")
    store = MongoDBStore(client, db_name, client_bulk_write=client_bulk_write)
    store.setup()
    assert store.uses_client_bulk_write == (client_bulk_write is None)
    _user_unique_index(store)
    store.put(("gone",), "only", {"v": 1})
    store.put(("b",), "p", {"email": "x@example.com"})
    assert store.list_namespaces() == [("b",), ("gone",)]
    with pytest.raises(OperationFailure):
        store.batch(
            [PutOp(("gone",), "only", None), PutOp(("c",), "k", {"email": "x@example.com"})]
        )
    assert store.get(("gone",), "only") is None
    assert store.list_namespaces() == _truth(store) == [("b",)]
    client.drop_database(db_name)
