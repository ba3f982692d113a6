"""A put whose client-level ``bulkWrite`` the server refuses (``client_bulk.PutPath``):
after a failover to an older primary, a refusal after part of the command ran, refusals
meeting cuts, clones and shared clients, refused puts whose parent is missing. The put
then goes on in two commands and stores what two commands store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pymongo.errors import AutoReconnect, OperationFailure

from mongo_ckpt import (
    AsyncMongoDBSaver,
    ClientBulkWriteUnavailable,
    ConflictingValueError,
    MongoDBSaver,
)
from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from tests.backends import aclose, async_client, failing_bulk_write
from tests.bulk_write_support import chat_turn, put_one
from tests.delta_graphs import Shape, builder, message_summary
from tests.faults import Fault, Faults
from tests.graphs import chat_builder, thread


def texts(graph: Any, thread_id: str) -> list[Any]:
    return [m.content for m in graph.get_state(thread(thread_id)).values["messages"]]


# -- 1. A real primary without the command: PyMongo never sends it ----------------------


@contextmanager
def older_primary(monkeypatch: pytest.MonkeyPatch, wire_version: int = 21) -> Iterator[None]:
    """Every connection PyMongo holds reports ``wire_version`` (21: MongoDB 7.0), as after a
    failover to a primary of an older release during a rolling upgrade. PyMongo checks the
    connection's wire version before it sends a client-level ``bulkWrite``."""
    from pymongo.asynchronous.pool import AsyncConnection
    from pymongo.synchronous.pool import Connection

    def getter(self: Any) -> int:
        return wire_version

    def setter(self: Any, value: int) -> None:
        self.__dict__["max_wire_version"] = value

    with monkeypatch.context() as patch:
        for cls in (Connection, AsyncConnection):
            patch.setattr(cls, "max_wire_version", property(getter, setter), raising=False)
        yield


def test_a_failover_to_a_7_0_primary_goes_on_in_two_commands(
    wire_client: Any, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real MongoDB 7.0 primary never answers 59/40415: PyMongo (4.9+) sees the
    connection's maxWireVersion < 25 and raises ``InvalidOperation`` itself, before sending.
    (Found by this file: the fallback used to catch only ``OperationFailure``, so every
    put failed from then on.)"""
    saver = MongoDBSaver(wire_client, db_name)
    graph = chat_builder().compile(checkpointer=saver)
    chat_turn(graph, "t", "one")
    assert saver.uses_client_bulk_write
    with older_primary(monkeypatch):
        chat_turn(graph, "t", "two")
        assert not saver.uses_client_bulk_write
        chat_turn(graph, "t", "three")
    assert texts(graph, "t") == ["one", "#1: one", "two", "#3: two", "three", "#5: three"]
    wire_client.drop_database(db_name)


@pytest.mark.parametrize("driver", ["pymongo", "motor"])
async def test_a_failover_to_a_7_0_primary_async(
    db_name: str, monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    """The same ``InvalidOperation``, from ``AsyncMongoClient`` and Motor."""
    client = async_client("wire", driver)
    saver = AsyncMongoDBSaver(client, db_name)
    graph = chat_builder().compile(checkpointer=saver)
    await graph.ainvoke({"messages": [HumanMessage("one")]}, thread("t"))
    assert saver.uses_client_bulk_write
    with older_primary(monkeypatch):
        await graph.ainvoke({"messages": [HumanMessage("two")]}, thread("t"))
    assert not saver.uses_client_bulk_write
    await client.drop_database(db_name)
    await aclose(client)


# -- 2. A 59 after part of the command ran (a retried or split command) ------------------


class PrefixThenRefused:
    """``ClientCalls.bulk_write`` that applies the first ``k`` models of the next call, then
    fails as a server without the command does (as PyMongo reports a retry of a command
    that ran, sent to a new primary, or the second batch of a split one)."""

    def __init__(self, saver: Any, k: int, code: int = 59, skip: int = 0) -> None:
        self.calls = saver.collections[CLIENT]
        self.real = self.calls.bulk_write
        self.k, self.code, self.skip, self.armed = k, code, skip, True
        self.calls.bulk_write = self

    def __call__(self, models: Any, **options: Any) -> Any:
        if not self.armed or self.skip:
            self.skip -= self.armed
            return self.real(models, **options)
        self.armed = False
        if self.k:
            self.real(list(models)[: self.k], **options)
        raise OperationFailure("no bulkWrite here", self.code, {"errmsg": "no bulkWrite here"})


@pytest.mark.parametrize("k", range(5))  # values 1 + checkpoint, probe, confirm: 4 models
def test_a_refusal_after_part_of_the_command_ran_still_stores_the_checkpoint_whole(
    wire_client: Any, db_name: str, k: int
) -> None:
    saver = MongoDBSaver(wire_client, db_name)
    first = put_one(saver, "t", "x", version="1")
    PrefixThenRefused(saver, k)
    second = put_one(saver, "t", "y", parent=first, version="2")
    assert not saver.uses_client_bulk_write
    for reader in (saver, MongoDBSaver(wire_client, db_name)):
        found = reader.get_tuple(generate_config("t"))
        assert found is not None and found.config["configurable"] == second["configurable"]
        assert found.checkpoint["channel_values"] == {"a": "y"}
        assert found.parent_config is not None
    assert saver.collections[CHECKPOINTS].count_documents({"pending": True}) == 0
    assert saver.collections[BLOBS].count_documents({}) == 2
    wire_client.drop_database(db_name)


def test_true_refused_after_the_command_ran_says_how_to_go_on(
    wire_client: Any, db_name: str
) -> None:
    """With ``client_bulk_write=True`` a 59 after the command ran (a retry sent to a new
    primary): the error claims nothing about what was written, and the put sent again
    stores the checkpoint whole."""
    saver = MongoDBSaver(wire_client, db_name, client_bulk_write=True)
    first = put_one(saver, "t", "x", version="1")
    PrefixThenRefused(saver, 4)
    with pytest.raises(ClientBulkWriteUnavailable, match="the put may be sent again") as raised:
        put_one(saver, "t", "y", parent=first, version="2")
    assert "nothing was written" not in str(raised.value)
    again = MongoDBSaver(wire_client, db_name)
    second = put_one(again, "t", "y", parent=first, version="2")
    for reader in (again, MongoDBSaver(wire_client, db_name)):
        found = reader.get_tuple(generate_config("t"))
        assert found is not None and found.config["configurable"] == second["configurable"]
        assert found.checkpoint["channel_values"] == {"a": "y"}
    assert saver.collections[CHECKPOINTS].count_documents({"pending": True}) == 0
    wire_client.drop_database(db_name)


def test_a_code_meaning_something_else_is_raised_and_keeps_the_path(
    wire_client: Any, db_name: str
) -> None:
    """Codes near 59/40415 (e.g. 40414 missing field, 9 FailedToParse) are not a missing command."""
    saver = MongoDBSaver(wire_client, db_name)
    first = put_one(saver, "t")
    for code in (9, 40414, 115, 13):
        PrefixThenRefused(saver, 0, code)
        with pytest.raises(OperationFailure) as raised:
            put_one(saver, "t", "y", parent=first, version="2")
        assert raised.value.code == code and not isinstance(
            raised.value, ClientBulkWriteUnavailable
        )
        assert saver.uses_client_bulk_write
    put_one(saver, "t", "y", parent=first, version="2")
    assert saver.uses_client_bulk_write
    wire_client.drop_database(db_name)


def test_an_error_of_the_two_commands_is_not_chained_to_the_refusal(
    wire_client: Any, db_name: str
) -> None:
    """The fallback's own error (a conflicting retry) is raised as itself: its traceback
    does not read as raised while handling the refusal, which was dealt with."""
    saver = MongoDBSaver(wire_client, db_name)
    checkpoint = generate_checkpoint(channel_values={"a": "one"}, channel_versions={"a": "1"})
    saver.put(generate_config("t"), checkpoint, generate_metadata(), {"a": "1"})
    assert saver.uses_client_bulk_write
    PrefixThenRefused(saver, 0)
    again = {**checkpoint, "channel_values": {"a": "two"}}
    with pytest.raises(ConflictingValueError) as raised:
        saver.put(generate_config("t"), again, generate_metadata(), {"a": "1"})
    assert raised.value.__context__ is None
    wire_client.drop_database(db_name)


# -- 3. Refusals meeting cuts, clones, shared clients --------------------------------------


@pytest.mark.parametrize("k", range(5))
def test_a_cut_command_then_a_refused_retry(wire_client: Any, db_name: str, k: int) -> None:
    """The first attempt's command is cut after ``k`` requests; the retry meets a primary
    without the command and goes on in two commands."""
    saver = MongoDBSaver(wire_client, db_name)
    first = put_one(saver, "t", "x", version="1")
    faults = Faults(saver.collections)
    faults.arm(Fault(0, "cut", k))
    with pytest.raises(AutoReconnect):
        put_one(saver, "t", "y", parent=first, version="2")
    faults.arm(None)
    with failing_bulk_write(wire_client, 59):
        second = put_one(saver, "t", "y", parent=first, version="2")
    assert not saver.uses_client_bulk_write
    found = MongoDBSaver(wire_client, db_name).get_tuple(generate_config("t"))
    assert found is not None and found.config["configurable"] == second["configurable"]
    assert found.checkpoint["channel_values"] == {"a": "y"}
    wire_client.drop_database(db_name)


@pytest.mark.parametrize(
    "fault",
    [
        Fault(1, "before"),
        Fault(1, "after"),
        Fault(1, "cut", 1),
        Fault(2, "before"),
        Fault(2, "cut", 1),
        Fault(2, "after"),
    ],
)
def test_a_refusal_then_a_cut_of_the_two_commands(
    wire_client: Any, db_name: str, fault: Fault
) -> None:
    """Refused (call 0), then a cut of the values' (call 1) or the checkpoint's (call 2)
    bulk write; the client sends the put again."""
    saver = MongoDBSaver(wire_client, db_name)
    first = put_one(saver, "t", "x", version="1")
    faults = Faults(saver.collections)
    faults.arm(fault)
    with failing_bulk_write(wire_client, 59), pytest.raises(AutoReconnect):
        put_one(saver, "t", "y", parent=first, version="2")
    assert faults.fired and not saver.uses_client_bulk_write
    faults.arm(None)
    second = put_one(saver, "t", "y", parent=first, version="2")
    assert CLIENT not in {c[0] for c in faults.calls}
    assert (CHECKPOINTS, "bulk_write") in [c[:2] for c in faults.calls]
    found = MongoDBSaver(wire_client, db_name).get_tuple(generate_config("t"))
    assert found is not None and found.config["configurable"] == second["configurable"]
    assert found.checkpoint["channel_values"] == {"a": "y"}
    wire_client.drop_database(db_name)


def test_an_allowlist_clone_and_its_saver_fall_back_together(
    wire_client: Any, db_name: str
) -> None:
    saver = MongoDBSaver(
        wire_client, db_name, serde=JsonPlusSerializer(allowed_msgpack_modules=None)
    )
    saver.setup()
    clone: Any = saver.with_allowlist([("tests", "Nothing")])
    assert clone is not saver and clone.uses_client_bulk_write
    first = put_one(clone, "t")
    with failing_bulk_write(wire_client, 59):
        second = put_one(clone, "t", "y", parent=first, version="2")
    assert not clone.uses_client_bulk_write and not saver.uses_client_bulk_write
    third = put_one(saver, "t", "z", parent=second, version="3")
    found = clone.get_tuple(generate_config("t"))
    assert found is not None and found.config["configurable"] == third["configurable"]
    wire_client.drop_database(db_name)


def test_a_clone_made_before_setup_stays_on_two_commands(wire_client: Any, db_name: str) -> None:
    saver = MongoDBSaver(
        wire_client, db_name, serde=JsonPlusSerializer(allowed_msgpack_modules=None)
    )
    clone: Any = saver.with_allowlist([("tests", "Nothing")])
    assert clone is not saver
    first = put_one(saver, "t")
    with failing_bulk_write(wire_client, 59):
        put_one(saver, "t", "y", parent=first, version="2")
    clone.setup()
    assert not clone.uses_client_bulk_write and not saver.uses_client_bulk_write
    wire_client.drop_database(db_name)


def test_another_saver_set_up_on_the_client_falls_back_on_its_own_refusal(
    wire_client: Any, db_name: str
) -> None:
    one = MongoDBSaver(wire_client, db_name)
    other = MongoDBSaver(
        wire_client,
        db_name,
        checkpoint_collection_name="c2",
        blobs_collection_name="b2",
        writes_collection_name="w2",
    )
    one.setup()
    other.setup()
    first = put_one(one, "t")
    with failing_bulk_write(wire_client, 59):
        put_one(one, "t", "y", parent=first, version="2")
    assert not one.uses_client_bulk_write and other.uses_client_bulk_write
    o1 = put_one(other, "t")  # the server came back: other goes on in one command
    with failing_bulk_write(wire_client, 40415):
        o2 = put_one(other, "t", "y", parent=o1, version="2")
    assert not other.uses_client_bulk_write
    found = other.get_tuple(generate_config("t"))
    assert found is not None and found.config["configurable"] == o2["configurable"]
    wire_client.drop_database(db_name)


@pytest.mark.parametrize("at_put", [0, 1, 2])
@pytest.mark.parametrize("subgraph", [False, True], ids=["flat", "subgraph"])
def test_a_delta_graph_with_a_refused_put_matches_the_memory_saver(
    wire_client: Any, db_name: str, at_put: int, subgraph: bool
) -> None:
    """A DeltaChannel graph (with a subgraph: namespaces) whose ``at_put``-th put of its
    second run meets a primary without the command, a 59 after that put's command ran:
    the state and history are those of ``InMemorySaver``, then a fork at an old
    checkpoint matches too."""
    shape = Shape(snapshot_frequency=3, writers=2, subgraph=subgraph, durability="sync")
    saver = MongoDBSaver(wire_client, db_name)
    graph = builder(shape, delta=True).compile(checkpointer=saver)
    reference = builder(shape, delta=True).compile(checkpointer=InMemorySaver())
    for n in range(4):
        message = {"messages": [HumanMessage(f"in{n}", id=f"in{n}")]}
        reference.invoke(message, thread("t"))
        if n != 1:
            graph.invoke(message, thread("t"))
            continue
        refusing = PrefixThenRefused(saver, 3 * (at_put % 2), skip=at_put)
        graph.invoke(message, thread("t"))
        assert not refusing.armed
    assert not saver.uses_client_bulk_write
    for g in (graph, reference):
        old = list(g.get_state_history(thread("t")))[-3].config
        g.invoke({"messages": [HumanMessage("fork", id="fork")]}, old)
    cold = builder(shape, delta=True).compile(checkpointer=MongoDBSaver(wire_client, db_name))
    for g in (graph, cold):
        got = [
            message_summary(s.values.get("messages", [])) for s in g.get_state_history(thread("t"))
        ]
        want = [
            message_summary(s.values.get("messages", []))
            for s in reference.get_state_history(thread("t"))
        ]
        assert got == want
    wire_client.drop_database(db_name)


@pytest.mark.parametrize("refused", [False, True])
def test_a_refused_put_whose_parent_was_never_stored(
    wire_client: Any, db_name: str, refused: bool
) -> None:
    """The parent probe misses (a parent never stored): accepted and confirmed, whether the
    put went in one command or fell back to two."""
    saver = MongoDBSaver(wire_client, db_name)
    missing = generate_config("t")
    missing["configurable"]["checkpoint_id"] = "1f000000-0000-6000-8000-000000000000"
    if refused:
        PrefixThenRefused(saver, 0)
    stored = put_one(saver, "t", "x", parent=missing)
    assert saver.uses_client_bulk_write is not refused
    found = MongoDBSaver(wire_client, db_name).get_tuple(generate_config("t"))
    assert found is not None and found.config["configurable"] == stored["configurable"]
    assert found.parent_config is not None
    assert saver.collections[CHECKPOINTS].count_documents({"pending": True}) == 0
    wire_client.drop_database(db_name)


def test_a_refused_put_whose_parent_was_deleted(wire_client: Any, db_name: str) -> None:
    """The parent deleted (its thread pruned) before the refused put: the put behaves as in
    two commands from the start."""
    outcomes = []
    for client_bulk_write in (False, None):
        name = f"{db_name}_{client_bulk_write}"
        saver = MongoDBSaver(wire_client, name, client_bulk_write=client_bulk_write)
        first = put_one(saver, "t", "x")
        saver.delete_thread("t")
        if client_bulk_write is None:
            PrefixThenRefused(saver, 0)
        try:
            put_one(saver, "t", "y", parent=first, version="2")
            outcomes.append(("stored", saver.get_tuple(generate_config("t")) is not None))
        except Exception as exc:  # noqa: BLE001 (compared across the two paths)
            outcomes.append((type(exc).__name__, saver.get_tuple(generate_config("t")) is not None))
        wire_client.drop_database(name)
    assert outcomes[0] == outcomes[1]


def test_after_a_failover_a_new_saver_on_the_client_goes_on_in_two_commands(
    wire_client: Any, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's answer is kept (``_SERVER_HAS``), so a saver set up after the failover
    sends the client-level write too; PyMongo refuses it, and that saver falls back too."""
    put_one(MongoDBSaver(wire_client, db_name), "t")
    with older_primary(monkeypatch):
        later = MongoDBSaver(wire_client, db_name)
        later.setup()
        put_one(later, "u")
    assert MongoDBSaver(wire_client, db_name).get_tuple(generate_config("u")) is not None
    wire_client.drop_database(db_name)


def stored_values(saver: Any) -> list[tuple[Any, ...]]:
    docs = saver.collections[BLOBS].find({}, {"_id": 0, "touched_at": 0})
    return sorted(
        (d["channel"], d["version"], str(d["part"]), d.get("vid"), "doomed" in d) for d in docs
    )


def test_a_multipart_conflict_leaves_what_two_commands_leave(
    wire_client: Any, db_name: str
) -> None:
    """The same checkpoint put again with another multi-part value: refused on both paths,
    and the value documents left are the same (the other value's parts dropped or marked)."""
    left = []
    for client_bulk_write in (False, None):
        saver = MongoDBSaver(
            wire_client, f"{db_name}_{client_bulk_write}", client_bulk_write=client_bulk_write
        )
        big_a, big_b = "a" * (20 * 1024 * 1024), "b" * (20 * 1024 * 1024)
        checkpoint = generate_checkpoint(channel_values={"a": big_a}, channel_versions={"a": "1"})
        stored = saver.put(generate_config("t"), checkpoint, generate_metadata(), {"a": "1"})
        again = {**checkpoint, "channel_values": {"a": big_b}}
        with pytest.raises(ConflictingValueError):
            saver.put(generate_config("t"), again, generate_metadata(), {"a": "1"})
        found = saver.get_tuple(stored)
        assert found is not None and found.checkpoint["channel_values"] == {"a": big_a}
        left.append(stored_values(saver))
        wire_client.drop_database(saver.db.name)
    assert left[0] == left[1]
