"""A failed collection call is thrown back into the operation that issued it.

So its traceback names the library line that made the call (and the constructor of the
failing method in ``mongo_ckpt.calls``), and an operation can catch it.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pymongo import InsertOne
from pymongo.errors import AutoReconnect, BulkWriteError

from mongo_ckpt import ClientClosedError, MongoDBSaver
from mongo_ckpt.calls import Operation, bulk_write, find
from mongo_ckpt.drivers import arun, run
from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import sync_client
from tests.faults import Fault, Faults, issuing_line
from tests.graphs import chat_builder, thread
from tests.saver_support import Api
from tests.store_support import DIMS, FakeEmbeddings, StoreApi


async def test_every_failing_call_of_a_graph_run_names_its_operation(api: Api) -> None:
    graph = api.compile(chat_builder())
    faults = Faults(api.saver.collections)
    await api.invoke(graph, {"messages": [HumanMessage("hi")]}, thread("clean"))
    calls = faults.calls
    assert {m for _, m, _ in calls} >= {"aggregate", "bulk_write"}
    for number in range(len(calls)):
        faults.arm(Fault(number, "before"))
        with pytest.raises(AutoReconnect) as raised:
            await api.invoke(graph, {"messages": [HumanMessage("hi")]}, thread(f"t{number}"))
        _check_issuer(raised.value, faults, number)


def _check_issuer(exc: BaseException, faults: Faults, number: int) -> None:
    """The traceback goes through the library line that issued the call and the
    constructor of the method that failed, and only one line issued it."""
    assert faults.fired
    method = faults.calls[number][1]
    line = issuing_line(exc)
    assert f'"{method}"' in line, (method, line)


# -- an operation handles an error and goes on ---------------------------------------


def _insert_twice(collection: str) -> Operation[tuple[str, list[dict[str, Any]]]]:
    yield from bulk_write(collection, [InsertOne({"_id": 1, "n": 1})], ordered=True)
    try:
        yield from bulk_write(collection, [InsertOne({"_id": 1, "n": 2})], ordered=True)
        outcome = "inserted twice"
    except BulkWriteError as exc:
        outcome = f"refused: {exc.details['writeErrors'][0]['code']}"
    return outcome, (yield from find(collection, {}))


async def test_an_operation_catches_a_failed_call(api: Api) -> None:
    collections = {CHECKPOINTS: api.saver.db["dup"]}
    operation = _insert_twice(CHECKPOINTS)
    outcome = await arun(collections, operation) if api.is_async else run(collections, operation)
    assert outcome == ("refused: 11000", [{"_id": 1, "n": 1}])


async def test_store_setup_falls_back_to_exact_search(store_api: StoreApi) -> None:
    """The server refuses ``$listSearchIndexes`` (no Atlas); ``setup`` catches it."""
    plain = store_api.store
    store = StoreApi(type(plain)(plain.client, plain.db.name, index={
        "dims": DIMS, "embed": FakeEmbeddings()
    }))
    await store.setup()
    assert store.store.ops.vector_search is False
    await store.put(("docs",), "a", {"text": "red apples"})
    await store.put(("docs",), "b", {"text": "blue sky"})
    assert [i.key for i in await store.search(("docs",), query="apples")][0] == "a"


@pytest.mark.parametrize("backend", ["wire", pytest.param("mongodb", marks=pytest.mark.mongodb)])
def test_a_closed_client_error_names_the_operation(backend: str, db_name: str) -> None:
    client = sync_client(backend)
    saver = MongoDBSaver(client, db_name)
    saver.setup()
    client.close()
    with pytest.raises(ClientClosedError, match="client was closed") as raised:
        saver.get_tuple(thread("t"))
    line = issuing_line(raised.value)
    assert '"aggregate"' in line
