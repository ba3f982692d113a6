"""A ``put`` as one client-level ``bulkWrite`` (MongoDB 8.0+): when the saver uses it
(``client_bulk_write``, decided at setup by one ``hello`` per client), what the command
carries and reports, and the retry that finds a value stored already."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
)
from pymongo import InsertOne, MongoClient, UpdateOne, monitoring
from pymongo.errors import BulkWriteError, OperationFailure
from pymongo.results import BulkWriteResult

from mongo_ckpt import (
    AsyncMongoDBSaver,
    ClientBulkWriteUnavailable,
    ConflictingValueError,
    MongoDBSaver,
)
from mongo_ckpt.calls import CLIENT, client_bulk_write
from mongo_ckpt.client_bulk import NO_SUCH_COMMAND
from mongo_ckpt.connection import DEFAULT_WRITE_CONCERN
from mongo_ckpt.drivers import run
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from tests.backends import (
    aclose,
    async_client,
    count_calls,
    failing_bulk_write,
    sync_client,
    wire_uri,
)
from tests.bulk_write_support import chat_turn, put_one
from tests.graphs import chat_builder, thread
from tests.saver_support import Api, put_write_calls


class Commands(monitoring.CommandListener):
    """The commands a client sent, by name."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def named(self, name: str) -> list[dict[str, Any]]:
        return [command for sent, command in self.sent if sent == name]


@pytest.fixture
def wire_client() -> Any:
    """A new client of the wire server, which has the client-level bulk write (wire 27),
    recording its commands in ``client.commands``."""
    commands = Commands()
    client: Any = MongoClient(wire_uri(), directConnection=True, event_listeners=[commands])
    client.commands = commands
    yield client
    client.close()


def test_the_wire_server_decides_once_per_client(wire_client: Any, db_name: str) -> None:
    first = MongoDBSaver(wire_client, db_name)
    counter = count_calls(first.collections)
    first.setup()
    assert first.uses_client_bulk_write
    assert counter[(CLIENT, "command")] == 1  # the hello
    again = MongoDBSaver(wire_client, db_name)
    later = count_calls(again.collections)
    again.setup()
    put_one(again, "t")
    put_one(first, "u")
    assert later[(CLIENT, "command")] == 0 and counter[(CLIENT, "command")] == 1
    assert dict(later) == {("schema", "find_one"): 1, (CLIENT, "bulk_write"): 1}
    # The command carries the saver's write concern and the put's requests on two
    # collections, in order: value, checkpoint.
    [bulk, _] = wire_client.commands.named("bulkWrite")
    assert bulk["writeConcern"] == DEFAULT_WRITE_CONCERN.document
    names = [ns["ns"] for ns in bulk["nsInfo"]]
    assert names == [f"{db_name}.checkpoint_blobs", f"{db_name}.checkpoints"]
    assert [op["update"] for op in bulk["ops"]] == [0, 1]
    wire_client.drop_database(db_name)


def test_false_keeps_one_bulk_write_per_collection(wire_client: Any, db_name: str) -> None:
    saver = MongoDBSaver(wire_client, db_name, client_bulk_write=False)
    counter = count_calls(saver.collections)
    saver.setup()
    stored = put_one(saver, "t")
    put_one(saver, "t", "y", parent=stored)
    assert not saver.uses_client_bulk_write
    assert counter[(CLIENT, "command")] == 0  # not even asked
    assert counter[(BLOBS, "bulk_write")] == 2 and counter[(CHECKPOINTS, "bulk_write")] == 2
    assert wire_client.commands.named("bulkWrite") == []
    wire_client.drop_database(db_name)


def test_true_is_refused_at_setup_where_there_is_none(db_name: str) -> None:
    client = sync_client("mock")
    saver = MongoDBSaver(client, db_name, client_bulk_write=True)
    counter = count_calls(saver.collections)
    with pytest.raises(ClientBulkWriteUnavailable, match="mongomock.MongoClient has no"):
        saver.setup()
    assert dict(counter) == {}  # before anything is read or written
    assert MongoDBSaver(client, db_name).uses_client_bulk_write is False
    detected = MongoDBSaver(client, db_name)
    detected.setup()
    assert not detected.uses_client_bulk_write
    assert dict(count_calls(detected.collections)) == {}


def test_true_on_the_wire_server(wire_client: Any, db_name: str) -> None:
    saver = MongoDBSaver(wire_client, db_name, client_bulk_write=True)
    saver.setup()
    assert saver.uses_client_bulk_write
    assert Api(saver).reopened().saver.client_bulk_write is True
    wire_client.drop_database(db_name)


def test_each_collections_outcome_as_its_own_bulk_write_reports_it(
    wire_client: Any, db_name: str
) -> None:
    """An ``E11000`` in the middle of an ordered client bulk write: the requests before it
    applied (their upserted ids by index within their collection), none after it."""
    db = wire_client[db_name]
    db.b.insert_one({"_id": 1})
    namespaces = {"a": f"{db_name}.a", "b": f"{db_name}.b", "c": f"{db_name}.c"}
    collections = {CLIENT: MongoDBSaver(wire_client, db_name).collections[CLIENT]}
    writes: list[tuple[str, list[Any]]] = [
        ("a", [UpdateOne({"k": 1}, {"$set": {"n": 1}}, upsert=True), InsertOne({"k": 2})]),
        ("b", [UpdateOne({"k": 3}, {"$set": {"n": 3}}, upsert=True), InsertOne({"_id": 1})]),
        ("c", [InsertOne({"k": 4})]),
    ]
    a, b, c = run(collections, client_bulk_write(writes, namespaces))
    assert isinstance(a, BulkWriteResult) and list(a.upserted_ids or {}) == [0]
    assert isinstance(b, BulkWriteError)
    assert [(e["index"], e["code"]) for e in b.details["writeErrors"]] == [(1, 11000)]
    assert [u["index"] for u in b.details["upserted"]] == [0]
    assert c is None
    assert db.c.count_documents({}) == 0 and db.b.count_documents({}) == 2
    # No error: every collection's result.
    again = run(collections, client_bulk_write([("c", [InsertOne({"k": 5})])], namespaces))
    assert [type(r) for r in again] == [BulkWriteResult]
    wire_client.drop_database(db_name)


def test_a_value_stored_already_is_adopted_before_any_checkpoint_names_it(
    wire_client: Any, db_name: str
) -> None:
    """The same put again: its command stops at the stored head, before the checkpoint;
    the values are written again on their own (touched, unmarked), the stored one adopted,
    then the checkpoint. The same put with a different value is refused, changing
    nothing readable."""
    saver = MongoDBSaver(wire_client, db_name)
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    first = put_one(saver, "t", checkpoint=checkpoint)
    counter = count_calls(saver.collections)
    assert put_one(saver, "t", checkpoint=checkpoint) == first
    assert dict(counter) == {
        (CLIENT, "bulk_write"): 1,
        **put_write_calls(MongoDBSaver(wire_client, db_name, client_bulk_write=False)),
        (BLOBS, "find"): 1,  # the stored value, adopted
    }
    other = {**checkpoint, "channel_values": {"a": "other"}}
    with pytest.raises(ConflictingValueError):
        put_one(saver, "t", checkpoint=other)
    assert saver.collections[CHECKPOINTS].count_documents({"thread_id": "t"}) == 1
    found = saver.get_tuple(generate_config("t"))
    assert found is not None and found.checkpoint["channel_values"] == {"a": "x"}
    wire_client.drop_database(db_name)


@pytest.mark.parametrize("code", sorted(NO_SUCH_COMMAND))
def test_a_server_refusing_the_command_gets_the_put_in_two_commands(
    wire_client: Any, db_name: str, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A rolling upgrade falls back to a primary of an older release: its answer to the
    client-level ``bulkWrite`` ran none of it, so the put goes on per collection, and so do
    all later puts of the saver and the savers set up later on the client. Nothing is lost
    and every checkpoint reads back whole."""
    saver = MongoDBSaver(wire_client, db_name)
    graph = chat_builder().compile(checkpointer=saver)
    chat_turn(graph, "t", "one")
    assert saver.uses_client_bulk_write
    with failing_bulk_write(wire_client, code), caplog.at_level(logging.WARNING, "mongo_ckpt"):
        chat_turn(graph, "t", "two")
    assert not saver.uses_client_bulk_write
    assert "puts go as one bulk write per collection" in caplog.text
    sent = len(wire_client.commands.named("bulkWrite"))
    chat_turn(graph, "t", "three")
    later = MongoDBSaver(wire_client, db_name)
    later.setup()
    assert not later.uses_client_bulk_write
    assert len(wire_client.commands.named("bulkWrite")) == sent  # none since, nor a hello
    texts = [m.content for m in graph.get_state(thread("t")).values["messages"]]
    assert texts == ["one", "#1: one", "two", "#3: two", "three", "#5: three"]
    history = list(later.list(thread("t")))
    assert len(history) == 9  # three checkpoints a turn, each whole
    for stored in history:
        found = later.get_tuple(stored.config)
        assert found is not None and found.checkpoint == stored.checkpoint
    wire_client.drop_database(db_name)


def test_true_refused_by_the_server_raises_and_writes_nothing(
    wire_client: Any, db_name: str
) -> None:
    saver = MongoDBSaver(wire_client, db_name, client_bulk_write=True)
    stored = put_one(saver, "t")
    before = {name: saver.collections[name].count_documents({}) for name in (BLOBS, CHECKPOINTS)}
    with (
        failing_bulk_write(wire_client, 59),
        pytest.raises(ClientBulkWriteUnavailable, match="bulkWrite command was refused .code 59"),
    ):
        put_one(saver, "t", "y", parent=stored)
    after = {name: saver.collections[name].count_documents({}) for name in (BLOBS, CHECKPOINTS)}
    assert after == before
    assert saver.uses_client_bulk_write  # as asked: every put either goes in one command or fails
    wire_client.drop_database(db_name)


def test_another_failure_of_the_command_is_raised_and_keeps_the_path(
    wire_client: Any, db_name: str
) -> None:
    saver = MongoDBSaver(wire_client, db_name)
    stored = put_one(saver, "t")
    with failing_bulk_write(wire_client, 2), pytest.raises(OperationFailure) as raised:
        put_one(saver, "t", "y", parent=stored)
    assert raised.value.code == 2
    assert saver.uses_client_bulk_write
    counter = count_calls(saver.collections)
    again = put_one(saver, "t", "y", parent=stored)  # the same put, now in one command
    assert counter[(CLIENT, "bulk_write")] == 1
    assert [t.config for t in saver.list(generate_config("t"))] == [again, stored]
    wire_client.drop_database(db_name)


@pytest.mark.parametrize("driver", ["pymongo", "motor"])
async def test_the_async_saver_falls_back_alike(db_name: str, driver: str) -> None:
    client = async_client("wire", driver)
    saver = AsyncMongoDBSaver(client, db_name)
    graph = chat_builder().compile(checkpointer=saver)
    await graph.ainvoke({"messages": [HumanMessage("one")]}, thread("t"))
    assert saver.uses_client_bulk_write
    with failing_bulk_write(sync_client("wire"), 59):
        await graph.ainvoke({"messages": [HumanMessage("two")]}, thread("t"))
    assert not saver.uses_client_bulk_write
    state = await graph.aget_state(thread("t"))
    assert [m.content for m in state.values["messages"]] == ["one", "#1: one", "two", "#3: two"]
    await client.drop_database(db_name)
    await aclose(client)
