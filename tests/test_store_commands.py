"""Commands on the wire per store operation: a single put, delete or get is one command
where the server has the client-level ``bulkWrite`` (the wire server), two (the items, then
the registry) elsewhere.

Counted with a PyMongo command listener on the wire backend, with and without the
client-level bulk write, and on mongomock from the requests each ``bulk_write`` carries (an
ordered bulk write sends each run of one kind of request as one command).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp
from pymongo import DeleteMany, DeleteOne, InsertOne
from pymongo.monitoring import CommandListener

from mongo_ckpt import ClientBulkWriteUnavailable
from mongo_ckpt.store import MongoDBStore, registry
from mongo_ckpt.store import documents as store_documents
from tests.backends import count_calls, failing_bulk_write, sync_client, uri_for

STORE_COMMANDS = {"find", "aggregate", "update", "delete", "insert", "bulkWrite"}


class Commands(CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: Any) -> None:
        if event.command_name in STORE_COMMANDS:
            self.names.append(event.command_name)

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


def _runs(requests: list[Any]) -> list[str]:
    kinds = [
        "delete"
        if isinstance(r, (DeleteOne, DeleteMany))
        else "insert"
        if isinstance(r, InsertOne)
        else "update"
        for r in requests
    ]
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


@pytest.fixture(params=["mock", "wire", "wire, two commands"])
def counted(request: Any, db_name: str) -> Iterator[tuple[MongoDBStore, Any]]:
    if request.param.startswith("wire"):
        from pymongo import MongoClient

        listener = Commands()
        client = MongoClient(uri_for("wire"), directConnection=True, event_listeners=[listener])
        one = None if request.param == "wire" else False
        store = MongoDBStore(client, db_name, client_bulk_write=one)
        store.setup()
        assert store.uses_client_bulk_write == (one is None)
        yield store, listener
    else:
        client = sync_client("mock")
        store = MongoDBStore(client, db_name)
        yield store, None
    client.drop_database(db_name)
    client.close()


def _written(store: MongoDBStore, *commands: str) -> list[str]:
    """The commands of one write of a batch: ``commands``, or one ``bulkWrite``."""
    return ["bulkWrite"] if store.uses_client_bulk_write else list(commands)


def _commands(store: MongoDBStore, listener: Any, action: Any) -> list[str]:
    if listener is None:
        counter = MockCommandsWrapper(store)
        action()
        return counter.names
    listener.names.clear()
    action()
    return list(listener.names)


class MockCommandsWrapper:
    """Wraps the store's collections so calls are recorded by kind of command."""

    def __init__(self, store: MongoDBStore) -> None:
        self.names: list[str] = []
        for logical in ("store", "registry"):
            store.collections[logical] = self._recording(store.collections[logical])

    def _recording(self, inner: Any) -> Any:
        names = self.names

        class Recording:
            def __getattr__(self, attr: str) -> Any:
                method = getattr(inner, attr)
                if attr == "bulk_write":

                    def bulk_write(requests: list[Any], *args: Any, **kwargs: Any) -> Any:
                        names.extend(_runs(list(requests)))
                        return method(requests, *args, **kwargs)

                    return bulk_write
                if attr in STORE_COMMANDS:
                    names.append(attr)
                return method

        return Recording()


def test_the_commands_of_single_operations(counted: tuple[MongoDBStore, Any]) -> None:
    """A put is one command, or two: its item, then its namespace's registry entry; a
    get, a search and a settled listing one each."""
    store, listener = counted
    store.put(("users", "1"), "a", {"v": 0})
    put = _written(store, "update", "update")
    assert _commands(store, listener, lambda: store.put(("users", "1"), "new", {"v": 1})) == put
    assert _commands(store, listener, lambda: store.put(("users", "1"), "a", {"v": 2})) == put
    assert _commands(store, listener, lambda: store.get(("users", "1"), "a")) == ["find"]
    settling = ["aggregate", "update", "aggregate", "update"]
    # The first listing claims the new namespace's entry, probes it once and writes the
    # entry back settled; the probe is its answer.
    assert _commands(store, listener, lambda: store.list_namespaces()) == settling
    assert _commands(store, listener, lambda: store.list_namespaces()) == ["aggregate"]
    # The delete flags the namespace's registry entry after it.
    assert _commands(store, listener, lambda: store.delete(("users", "1"), "a")) == _written(
        store, "delete", "update"
    )
    assert _commands(store, listener, lambda: store.search(("users",), filter={"v": 1})) == ["find"]
    # So the next listing probes it again.
    assert _commands(store, listener, lambda: store.list_namespaces()) == settling
    assert _commands(store, listener, lambda: store.list_namespaces()) == ["aggregate"]
    mixed = [
        GetOp(("users", "1"), "new"),
        PutOp(("users", "2"), "b", {"v": 3}),
        PutOp(("users", "1"), "new", None),
        SearchOp(("users",)),
    ]
    assert _commands(store, listener, lambda: store.batch(mixed)) == [
        "find",
        "find",
        *_written(store, "delete", "update", "update"),
    ]


@pytest.mark.parametrize("batched", [True, False], ids=["batch documents", "entry statements"])
def test_a_listing_settles_every_flagged_namespace_in_two_commands(
    counted: tuple[MongoDBStore, Any], batched: bool
) -> None:
    """Ten namespaces flagged (new ones, one emptied, TTL puts raising their entries): the
    listing claims them all in one ``update``, probes them in one ``aggregate`` and writes
    them back in one bulk write (an ``update`` and a ``delete`` command), whatever their
    number, and answers from the probe. A batch into that many namespaces writes its items
    and its batch document; the listing folds batch documents first (a ``find``, then one
    bulk write: the entries' ``update`` and the batch documents' ``delete``) and reads its
    page again. A batch into fewer than ``batch_from`` namespaces sends an entry statement
    per namespace instead, in the same registry write."""
    store, listener = counted
    store.setup()
    names = [("users", f"{i}") for i in range(10)]
    store.ops.batch_from = 1 if batched else len(names) + 1
    folding = ["aggregate", "find", "update", "delete"] if batched else []
    batch = [PutOp(ns, "k", {"v": 0}) for ns in names]
    assert _commands(store, listener, lambda: store.batch(batch)) == ["insert", "update"]
    assert _commands(store, listener, lambda: store.list_namespaces()) == [
        *folding,
        "aggregate",
        "update",
        "aggregate",
        "update",
    ]
    raising = [PutOp(ns, "t", {"v": 1}, ttl=5) for ns in names[:9]]
    store.batch([*raising, PutOp(names[9], "k", None)])
    assert _commands(store, listener, lambda: store.list_namespaces()) == [
        *folding,
        "aggregate",
        "update",
        "aggregate",
        "update",
        "delete",
    ]
    assert _commands(store, listener, lambda: store.list_namespaces()) == ["aggregate"]
    assert store.list_namespaces() == names[:9]


def test_put_over_an_expired_copy_is_one_command_and_a_new_item(
    counted: tuple[MongoDBStore, Any],
) -> None:
    store, listener = counted
    store.put(("t",), "k", {"v": 1}, ttl=1)
    store.put(("t",), "live", {"v": 1}, ttl=1)
    first = store.get(("t",), "live")
    # Expire "k" in place, as if the TTL monitor had not run yet.
    store.collections["store"].update_one(
        {"key": "k"},
        {
            "$set": {
                "expires_at": store_documents.utc_now() - timedelta(minutes=1),
                "created_at": store_documents.utc_now() - timedelta(days=1),
            }
        },
    )
    assert store.get(("t",), "k") is None
    assert _commands(store, listener, lambda: store.put(("t",), "k", {"v": 2})) == _written(
        store, "update", "update"
    )
    item = store.get(("t",), "k")
    assert item.value == {"v": 2}
    assert item.created_at == item.updated_at
    assert "expires_at" not in store.collections["store"].find_one({"key": "k"})
    store.put(("t",), "live", {"v": 2}, ttl=1)
    again = store.get(("t",), "live")
    assert again.created_at == first.created_at
    assert again.value == {"v": 2}


def test_a_batch_of_new_items_is_inserted_and_one_stored_item_sends_the_rest_again(
    counted: tuple[MongoDBStore, Any],
) -> None:
    """A batch of ``INSERTS_FROM`` puts or more inserts its items, then writes their
    registry entries: an ``insert`` and an ``update``, also where the server has the
    client-level ``bulkWrite``. An item already stored stops the inserts; the puts from it
    on go again as upserts, with the entries (one ``bulkWrite`` where the server has it).
    Smaller batches are an ``update`` and the entries', or one ``bulkWrite``. Every item
    ends as put, and the stored one keeps its ``created_at``."""
    store, listener = counted
    inner = dict(store.collections)
    calls = count_calls(store.collections)
    items = ("store", "bulk_write")
    one = ("$client", "bulk_write")
    size = store_documents.INSERTS_FROM
    ns = ("users", "1")
    store.put(ns, "k5", {"v": "first"})
    stored = store.get(ns, "k5")
    calls.clear()
    new = [PutOp(ns, f"k{i}", {"v": i}) for i in range(10, 10 + size)]
    assert _commands(store, listener, lambda: store.batch(new)) == ["insert", "update"]
    assert calls[items] == 1
    calls.clear()
    again = [PutOp(ns, f"k{i}", {"v": -i}) for i in range(size)]  # k5 is stored
    assert _commands(store, listener, lambda: store.batch(again)) == [
        "insert",
        *_written(store, "update", "update"),
    ]
    assert (calls[items], calls[one]) == ((1, 1) if store.uses_client_bulk_write else (2, 0))
    calls.clear()
    small = [PutOp(ns, f"s{i}", {"v": i}) for i in range(size - 1)]
    assert _commands(store, listener, lambda: store.batch(small)) == _written(
        store, "update", "update"
    )
    assert calls[one if store.uses_client_bulk_write else items] == 1
    # Into BATCH_FROM namespaces: one batch document instead of their entries.
    wide = [PutOp(("wide", f"n{i}"), "k", {"v": i}) for i in range(registry.BATCH_FROM)]
    assert _commands(store, listener, lambda: store.batch(wide)) == ["insert", "update"]
    assert _commands(store, listener, lambda: store.batch(wide)) == [
        "insert",
        *_written(store, "update", "update"),
    ]
    assert store.list_namespaces(prefix=("wide",)) == [op.namespace for op in wide]
    store.collections.update(inner)
    items = {item.key: item for item in store.search(ns, limit=100)}
    expected = {f"k{i}": i for i in range(10, 10 + size)} | {f"k{i}": -i for i in range(size)}
    expected |= {f"s{i}": i for i in range(size - 1)}
    assert {key: item.value["v"] for key, item in items.items()} == expected
    assert items["k5"].created_at == stored.created_at
    assert items["k5"].updated_at > stored.updated_at
    assert items["k0"].created_at == items["k0"].updated_at
    assert store.list_namespaces() == [ns, *(op.namespace for op in wide)]


def test_a_refused_bulk_write_sends_the_writes_in_two_commands_from_then_on(
    wire_client: Any, db_name: str, caplog: Any
) -> None:
    """The server answers the client-level ``bulkWrite`` "no such command" (a failover to a
    primary of an older release): that batch, and every later one, goes as two bulk
    writes, and nothing is lost; with ``client_bulk_write=True`` the refusal raises
    ``ClientBulkWriteUnavailable`` instead, nothing written."""
    ns = ("users", "1")
    strict = MongoDBStore(wire_client, db_name, "strict", client_bulk_write=True)
    strict.setup()
    with failing_bulk_write(wire_client, 59), pytest.raises(ClientBulkWriteUnavailable):
        strict.put(ns, "a", {"v": 1})
    assert strict.collection.count_documents({}) == 0
    store = MongoDBStore(wire_client, db_name)
    store.put(ns, "a", {"v": 1})
    assert store.uses_client_bulk_write
    with failing_bulk_write(wire_client, 59):
        store.batch([PutOp(ns, "b", {"v": 2}), PutOp(ns, "a", None)])
    assert not store.uses_client_bulk_write
    assert "bulkWrite command was refused" in caplog.text
    calls = count_calls(store.collections)
    store.put(("users", "2"), "c", {"v": 3})
    assert dict(calls) == {("store", "bulk_write"): 1, ("registry", "bulk_write"): 1}
    found = [(i.key, i.value) for i in store.search(("users",))]
    assert found == [("c", {"v": 3}), ("b", {"v": 2})]
    assert store.list_namespaces() == [ns, ("users", "2")]


def test_client_bulk_write_true_needs_a_client_library_with_it(db_name: str) -> None:
    store = MongoDBStore(sync_client("mock"), db_name, client_bulk_write=True)
    with pytest.raises(ClientBulkWriteUnavailable, match="has no MongoClient.bulk_write"):
        store.setup()
