"""Quiet puts: a put into a namespace whose registry entry needs no change leaves the entry
as it was, and moves its ``version`` only when a listing has claimed it; ``mongo-ckpt
upgrade --store`` on a store. The races of puts and listings are in
``tests/test_store_registry.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.monitoring import CommandListener

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.schema import SCHEMA_COLLECTION, STORE_SCHEMA_VERSION, read_version, store_key
from mongo_ckpt.store import MongoDBStore, registry
from mongo_ckpt.store.namespaces import joined, prefixes
from tests.backends import uri_for
from tests.cli_support import invoke
from tests.store_stepping import LISTING, Stepper, operation

NS = ("users", "u1", "memories")


def _entry(store: MongoDBStore) -> dict[str, Any]:
    entry = store.collections["registry"].find_one({"_id": registry.entry_id(joined(NS))})
    assert entry is not None
    return dict(entry)


def test_a_put_into_a_settled_namespace_leaves_its_entry_as_it_was(make_store: Any) -> None:
    store = make_store()
    store.put(NS, "a", {"v": 1})
    assert store.list_namespaces() == [NS]  # settles the new entry
    before = _entry(store)
    store.put(NS, "b", {"v": 2})
    store.put(NS, "a", {"v": 3})
    assert _entry(store) == before
    assert store.list_namespaces() == [NS]


def test_a_quiet_put_moves_the_version_of_a_claimed_entry(make_store: Any) -> None:
    """A listing claims the flagged entry; a put lands before its probe: the put's new
    ``version`` stops the listing's settle, and the next listing settles the entry."""
    store = make_store()
    store.setup()
    store.put(NS, "a", {"v": 1})
    lister = Stepper(operation(store, [LISTING]))
    lister.step(store.collections)  # the page: the entry is flagged
    lister.step(store.collections)  # the claim
    claimed = _entry(store)
    assert claimed["claimed"] is True and claimed["recheck"] is True
    store.put(NS, "b", {"v": 2})
    moved = _entry(store)
    assert moved["version"] != claimed["version"] and moved["claimed"] is False
    while not lister.done:
        lister.step(store.collections)
    assert lister.result[0] == [NS]
    assert _entry(store)["recheck"] is True  # the settle did not land
    assert store.list_namespaces() == [NS]
    assert _entry(store)["recheck"] is False


class Replies(CommandListener):
    """The ``nModified`` of every ``update`` and ``bulkWrite`` command."""

    def __init__(self) -> None:
        self.modified: list[int] = []

    def started(self, event: Any) -> None:
        pass

    def succeeded(self, event: Any) -> None:
        if event.command_name in ("update", "bulkWrite"):
            self.modified.append(event.reply["nModified"])

    def failed(self, event: Any) -> None:
        pass


@pytest.fixture
def wire_store(db_name: str) -> Iterator[tuple[MongoDBStore, Replies]]:
    replies = Replies()
    client: MongoClient[Any] = MongoClient(
        uri_for("wire"), directConnection=True, event_listeners=[replies]
    )
    store = MongoDBStore(client, db_name)
    store.setup()
    yield store, replies
    client.drop_database(db_name)
    client.close()


def test_the_server_writes_one_document_for_a_quiet_put(
    wire_store: tuple[MongoDBStore, Replies],
) -> None:
    """On the wire server: a put over an item of a settled namespace modifies the item
    only (its registry statement, in the same command, modifies nothing)."""
    store, replies = wire_store
    store.put(NS, "a", {"v": 1})
    store.list_namespaces()
    replies.modified.clear()
    store.put(NS, "a", {"v": 2})
    assert store.uses_client_bulk_write
    assert replies.modified == [1]


def test_mongo_ckpt_upgrade_store_records_the_version_and_changes_nothing(
    client: Any, db_name: str
) -> None:
    store = MongoDBStore(client, db_name, collection_name="memories")
    store.put(NS, "a", {"v": 1})
    stored = list(store.collections["store"].find({}))
    refused = invoke(client, "upgrade", "--db", db_name, "--store", "system.x")
    assert refused.exit_code == 2 and "is not a MongoDB collection name" in refused.output
    result = invoke(client, "upgrade", "--db", db_name, "--store", "memories")
    assert result.exit_code == 0, result.output
    expected = f"{db_name}.memories: layout version {STORE_SCHEMA_VERSION} -> version " + str(
        STORE_SCHEMA_VERSION
    )
    assert result.output.strip() == expected
    assert list(store.collections["store"].find({})) == stored
    again = invoke(client, "upgrade", "--db", db_name, "--store", "memories", "--json")
    assert json.loads(again.output) == {
        "command": "upgrade", "db": db_name, "status": "done", "collection": "memories",
        "before": STORE_SCHEMA_VERSION, "after": STORE_SCHEMA_VERSION,
    }
    later = MongoDBStore(client, db_name, collection_name="memories")
    later.setup()
    assert later.list_namespaces() == [NS]
    client.drop_database(db_name)


def test_mongo_ckpt_upgrade_store_refuses_what_is_not_a_store(client: Any, db_name: str) -> None:
    """A collection name with a typo, the checkpointer's collection, a newer layout: a
    message and nothing written."""
    saver = MongoDBSaver(client, db_name)
    saver.setup()
    saver.collections["checkpoints"].insert_one({"thread_id": "t", "checkpoint_id": "1"})
    typo = invoke(client, "upgrade", "--db", db_name, "--store", "memries", "--json")
    assert typo.exit_code == 3
    assert json.loads(typo.output)["collection"] == "memries"
    assert "memries" not in client[db_name].list_collection_names()
    foreign = invoke(client, "upgrade", "--db", db_name, "--store", "checkpoints")
    assert foreign.exit_code == 1 and "Traceback" not in foreign.output
    assert "holds the checkpoints of the mongo-ckpt checkpointer" in foreign.output
    assert read_version(client[db_name], store_key("checkpoints")) is None
    store = MongoDBStore(client, db_name)
    store.put(NS, "a", {"v": 1})
    client[db_name][SCHEMA_COLLECTION].update_one(
        {"_id": store_key("store")}, {"$set": {"version": 9}}
    )
    newer = invoke(client, "upgrade", "--db", db_name, "--store", "store")
    assert newer.exit_code == 1 and "layout version 9" in newer.output
    assert read_version(client[db_name], store_key("store")) == 9
    client.drop_database(db_name)


@pytest.mark.parametrize("namespace", [("$users", "a"), ("users", "$a", "$$b"), ("a$", "b")])
def test_labels_that_read_as_field_paths_are_stored_as_given(
    make_store: Any, namespace: tuple[str, ...]
) -> None:
    """The entry's pipeline writes a label starting with ``$`` as a string, not as the
    field it would name in an expression."""
    store = make_store()
    store.put(namespace, "k", {"v": 1})
    store.put(namespace, "j", {"v": 2})
    assert store.list_namespaces() == [namespace]
    entry = store.collections["registry"].find_one({"_id": registry.entry_id(joined(namespace))})
    assert entry["namespace"] == list(namespace)
    assert entry[registry.LEVELS] == prefixes(namespace)
    assert entry[registry.LISTED] == joined(namespace)
