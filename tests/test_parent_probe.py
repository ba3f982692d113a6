"""The parent probe of a ``put`` names the parent's stored document by its ``_id`` where the
saver has seen it (read with ``get_tuple``/``list``, or inserted by its own last ``put``),
so a server reads that one document to check its tombstone. A parent stored again under
another ``_id`` (a restored export, a second migration) is a miss the put then accepts,
and a tombstoned one is refused as before."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from bson import ObjectId
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance.test_utils import generate_metadata

from mongo_ckpt import StaleParentError
from mongo_ckpt.clock import server_now
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.maintenance import DOOMED, DOOMED_AT
from tests.backends import count_calls, maybe_await
from tests.graphs import chat_builder, thread
from tests.probe_support import _updates, probes, record_requests
from tests.saver_support import BOTH_PUT_PATHS, Api

pytestmark = BOTH_PUT_PATHS


def pending_inserts(sent: list[Any]) -> int:
    """The checkpoint upserts with a parent (inserted pending) among the requests ``sent``."""
    return sum(1 for r in _updates(sent) if "pending" in r._doc.get("$setOnInsert", {}))


async def turn(api: Api, graph: Any, text: str, thread_id: str = "t") -> Any:
    return await api.invoke(graph, {"messages": [HumanMessage(text)]}, thread(thread_id))


async def stored_ids(api: Api, thread_id: str = "t") -> dict[str, Any]:
    docs = await api.docs(CHECKPOINTS, {"thread_id": thread_id})
    return {d["checkpoint_id"]: d["_id"] for d in docs}


async def test_every_probe_names_the_parent_document(api: Api) -> None:
    graph = api.compile(chat_builder())
    sent = record_requests(api)
    for n in range(3):
        await turn(api, graph, f"hi {n}")
    # A cold instance learns the parent's ``_id`` from the read a run starts with.
    cold = api.reopened()
    await cold.setup()
    sent_cold = record_requests(cold)
    cold_graph = cold.compile(chat_builder())
    for n in range(2):
        await turn(cold, cold_graph, f"again {n}")

    ids = await stored_ids(api)
    for recorded in (sent, sent_cold):
        found = probes(recorded)
        assert found and len(found) == pending_inserts(recorded)
        for probe in found:
            # First: a server that plans one predicate's index reads the one document.
            assert next(iter(probe)) == "_id"
            assert probe["_id"] == ids[probe["checkpoint_id"]]
    state = await api.state(graph, thread("t"))
    assert len(state.values["messages"]) == 10


async def _restore_under_new_ids(api: Api, thread_id: str) -> None:
    """Store the thread's checkpoints again under new ``_id``s, as a restored export does."""
    raw = api.raw(CHECKPOINTS)
    for doc in await api.docs(CHECKPOINTS, {"thread_id": thread_id}):
        await maybe_await(raw.delete_one({"_id": doc["_id"]}))
        await maybe_await(raw.insert_one({**doc, "_id": ObjectId()}))


async def test_a_run_after_a_restore_costs_what_a_run_costs(api: Api) -> None:
    graph = api.compile(chat_builder())
    await turn(api, graph, "one")
    counter = count_calls(api.saver.collections)
    await turn(api, graph, "two")
    usual = Counter(counter)

    await _restore_under_new_ids(api, "t")
    before = await stored_ids(api)
    counter.clear()
    await turn(api, graph, "three")
    # The run's first read learns the restored ``_id``: no probe misses, nothing extra.
    extra = Counter(counter)
    extra.subtract(usual)
    state = await api.state(graph, thread("t"))
    assert [m.content for m in state.values["messages"][::2]] == ["one", "two", "three"]
    assert await api.count(CHECKPOINTS, {"pending": True}) == 0
    assert set(before) < set(await stored_ids(api))
    assert +extra == Counter(), extra


async def test_the_probe_misses_once_when_the_remembered_parent_was_restored(api: Api) -> None:
    """A put on the checkpoint this saver wrote last, restored meanwhile under a new
    ``_id``: one more ``find`` (the parent, untombstoned), the confirmation, and one
    ``find`` of the parent and the checkpoint after it (still untombstoned: no value is
    unmarked)."""
    graph = api.compile(chat_builder())
    await turn(api, graph, "one")
    latest = await api.get_tuple(thread("t"))
    # The saver's memory names the latest checkpoint by the ``_id`` its get_tuple read.
    await _restore_under_new_ids(api, "t")
    counter = count_calls(api.saver.collections)
    child_id = str(uuid6())
    await api.put(latest.config, {**latest.checkpoint, "id": child_id}, generate_metadata(), {})
    assert counter[(CHECKPOINTS, "find")] == 2, counter
    assert counter[(BLOBS, "update_many")] == 0, counter
    assert await api.count(CHECKPOINTS, {"pending": True}) == 0
    stored = await api.get_tuple(thread("t"))
    assert stored.checkpoint["id"] == child_id
    assert stored.parent_config == latest.config


async def test_a_tombstoned_parent_named_by_its_id_is_refused(api: Api) -> None:
    graph = api.compile(chat_builder())
    await turn(api, graph, "one")
    latest = await api.get_tuple(thread("t"))
    now = await api.run(server_now())
    raw = api.raw(CHECKPOINTS)
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest.checkpoint["id"]}
    await maybe_await(raw.update_one(key, {"$set": {DOOMED: ObjectId(), DOOMED_AT: now}}))
    sent = record_requests(api)
    child_id = str(uuid6())
    with pytest.raises(StaleParentError):
        await api.put(latest.config, {**latest.checkpoint, "id": child_id}, generate_metadata(), {})
    assert [p.get("_id") for p in probes(sent)] == [(await stored_ids(api))[key["checkpoint_id"]]]
    assert await api.count(CHECKPOINTS, {"checkpoint_id": child_id}) == 0
