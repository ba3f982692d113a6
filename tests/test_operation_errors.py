"""A failed collection call is thrown back into the operation that issued it.

So its traceback names the line of ``operations.py`` that made the call (and the
``calls.py`` constructor of the failing method), and an operation can catch it.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pymongo import InsertOne
from pymongo.errors import AutoReconnect, BulkWriteError

from mongo_ckpt import AsyncMongoDBSaver, ClientClosedError, MongoDBSaver
from mongo_ckpt.calls import Operation, bulk_write, find
from mongo_ckpt.drivers import arun, run
from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import sync_client
from tests.faults import Fault, Faults
from tests.graphs import chat_builder, thread
from tests.store_support import DIMS, FakeEmbeddings

PACKAGE = Path(__file__).resolve().parents[1]


def _issuing_frames(exc: BaseException) -> list[tuple[str, str, str]]:
    """``(operation, constructor, constructor's line)`` for each operation frame of the
    traceback that is directly followed by a ``calls.py`` frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    found = []
    for outer, inner in zip(frames, frames[1:]):
        if Path(outer.filename).name == "operations.py" and inner.filename == str(
            PACKAGE / "mongo_ckpt" / "calls.py"
        ):
            found.append((outer.name, inner.name, inner.line or ""))
    return found


def test_every_failing_call_of_a_graph_run_names_its_operation_sync(saver: MongoDBSaver) -> None:
    graph = chat_builder().compile(checkpointer=saver)
    faults = Faults(saver.collections)
    graph.invoke({"messages": [HumanMessage("hi")]}, thread("clean"))
    calls = faults.calls
    assert {m for _, m, _ in calls} >= {"aggregate", "bulk_write", "update_one"}
    for number in range(len(calls)):
        faults.arm(Fault(number, "before"))
        with pytest.raises(AutoReconnect) as raised:
            graph.invoke({"messages": [HumanMessage("hi")]}, thread(f"t{number}"))
        _check_issuer(raised.value, faults, number)


async def test_every_failing_call_of_a_graph_run_names_its_operation_async(
    asaver: AsyncMongoDBSaver,
) -> None:
    graph = chat_builder().compile(checkpointer=asaver)
    faults = Faults(asaver.collections)
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, thread("clean"))
    calls = faults.calls
    assert {m for _, m, _ in calls} >= {"aggregate", "bulk_write", "update_one"}
    for number in range(len(calls)):
        faults.arm(Fault(number, "before"))
        with pytest.raises(AutoReconnect) as raised:
            await graph.ainvoke({"messages": [HumanMessage("hi")]}, thread(f"t{number}"))
        _check_issuer(raised.value, faults, number)


def _check_issuer(exc: BaseException, faults: Faults, number: int) -> None:
    """The traceback goes through the operation's line and the constructor of the
    method that failed, and only one operation issued it."""
    assert faults.fired
    method = faults.calls[number][1]
    [(issuer, _, line)] = _issuing_frames(exc)
    assert f'"{method}"' in line, (method, line)
    expected = {
        "aggregate": {"get_tuple"},
        "find": {"get_tuple"},
        "update_one": {"put"},
        "bulk_write": {"_write_values"},  # of put and put_writes
    }
    assert issuer in expected[method], (method, issuer)


# -- an operation handles an error and goes on ---------------------------------------


def _insert_twice(collection: str) -> Operation[tuple[str, list[dict[str, Any]]]]:
    yield from bulk_write(collection, [InsertOne({"_id": 1, "n": 1})], ordered=True)
    try:
        yield from bulk_write(collection, [InsertOne({"_id": 1, "n": 2})], ordered=True)
        outcome = "inserted twice"
    except BulkWriteError as exc:
        outcome = f"refused: {exc.details['writeErrors'][0]['code']}"
    return outcome, (yield from find(collection, {}))


def test_an_operation_catches_a_failed_call_sync(client: Any, db_name: str) -> None:
    collections = {CHECKPOINTS: client[db_name]["dup"]}
    assert run(collections, _insert_twice(CHECKPOINTS)) == ("refused: 11000", [{"_id": 1, "n": 1}])


async def test_an_operation_catches_a_failed_call_async(aclient: Any, db_name: str) -> None:
    collections = {CHECKPOINTS: aclient[db_name]["dup"]}
    outcome = await arun(collections, _insert_twice(CHECKPOINTS))
    assert outcome == ("refused: 11000", [{"_id": 1, "n": 1}])


def test_store_setup_falls_back_to_exact_search_sync(make_store: Any) -> None:
    """The server refuses ``$listSearchIndexes`` (no Atlas); ``setup`` catches it."""
    store = make_store(index={"dims": DIMS, "embed": FakeEmbeddings()})
    store.setup()
    assert store.ops.vector_search is False
    store.put(("docs",), "a", {"text": "red apples"})
    store.put(("docs",), "b", {"text": "blue sky"})
    assert [i.key for i in store.search(("docs",), query="apples")][0] == "a"


async def test_store_setup_falls_back_to_exact_search_async(make_astore: Any) -> None:
    store = make_astore(index={"dims": DIMS, "embed": FakeEmbeddings()})
    await store.setup()
    assert store.ops.vector_search is False
    await store.aput(("docs",), "a", {"text": "red apples"})
    await store.aput(("docs",), "b", {"text": "blue sky"})
    assert [i.key for i in await store.asearch(("docs",), query="apples")][0] == "a"


@pytest.mark.parametrize("backend", ["wire", pytest.param("mongodb", marks=pytest.mark.mongodb)])
def test_a_closed_client_error_names_the_operation(backend: str, db_name: str) -> None:
    client = sync_client(backend)
    saver = MongoDBSaver(client, db_name)
    saver.setup()
    client.close()
    with pytest.raises(ClientClosedError, match="client was closed") as raised:
        saver.get_tuple(thread("t"))
    [(issuer, constructor, _)] = _issuing_frames(raised.value)
    assert (issuer, constructor) == ("get_tuple", "aggregate")
