"""Slim checkpoint documents (layout version 5): the metadata once when its plain copy
reads back exactly, optional fields only when set, the checkpoint id once.

Every rule is checked where it matters: what reads back, and every other reader of
checkpoint documents (``copy_thread``, ``prune``, ``delete_thread``, the DeltaChannel
history walk) understands them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from typing_extensions import TypedDict

from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from tests.saver_support import Api

VALUES = {"count": 7, "word": "short", "items": [1, 2]}


def _checkpoint(values: dict[str, Any], version: str = "1") -> Any:
    return generate_checkpoint(
        channel_values=values, channel_versions=dict.fromkeys(values, version)
    )


async def _put(api: Api, thread_id: str, values: dict[str, Any], **metadata: Any) -> Any:
    checkpoint = _checkpoint(values)
    return await api.put(
        generate_config(thread_id), checkpoint, metadata, checkpoint["channel_versions"]
    )


async def _document(api: Api, config: Any) -> dict[str, Any]:
    (doc,) = await api.docs(CHECKPOINTS, dict(config["configurable"]))
    return doc


async def test_the_checkpoint_reads_back_with_its_id(api: Api) -> None:
    config = await _put(api, "t", VALUES)
    doc = await _document(api, config)
    # The serialized checkpoint leaves its id to the document's ``checkpoint_id``.
    assert doc["checkpoint_id"].encode() not in bytes(doc["checkpoint"]["data"])
    loaded = await api.get_tuple(config)
    assert loaded.checkpoint["id"] == doc["checkpoint_id"]
    assert loaded.checkpoint["channel_values"] == VALUES
    (listed,) = await api.list(generate_config("t"))
    assert listed.checkpoint == loaded.checkpoint


async def test_optional_fields_are_written_only_when_set(api: Api) -> None:
    doc = await _document(api, await _put(api, "t", VALUES))
    assert {"replay", "run_id", "metadata_typed"}.isdisjoint(doc)
    doc = await _document(api, await _put(api, "u", VALUES, run_id="r1"))
    assert doc["run_id"] == "r1"
    assert [t.config for t in await api.list(None, filter={"run_id": "r1"})] == [
        (await api.get_tuple(generate_config("u"))).config
    ]
    # An empty run id is a run id: kept, so delete_for_runs([""]) finds it.
    doc = await _document(api, await _put(api, "v", VALUES, run_id=""))
    assert doc["run_id"] == ""


@pytest.mark.parametrize(
    "metadata",
    [
        {"source": "loop", "step": 3, "parents": {}, "tags": ["a", "b"], "score": 0.5},
        {"source": "input", "step": -1, "flags": [True, False, None], "nested": {"k": {}}},
        # The serializer gives a tuple back as a list, as BSON does.
        {"source": "loop", "step": 2, "counters": {"messages": (1, 2)}},
    ],
)
async def test_metadata_that_reads_back_exactly_is_stored_once(
    api: Api, metadata: dict[str, Any]
) -> None:
    config = await _put(api, "t", {"count": 1}, **metadata)
    doc = await _document(api, config)
    assert "metadata_typed" not in doc
    loaded = (await api.get_tuple(config)).metadata
    expected = api.saver.serde.loads_typed(api.saver.serde.dumps_typed(metadata))
    assert loaded == expected
    assert repr(loaded) == repr(expected)  # the same types, down to the leaves


@pytest.mark.parametrize(
    "extra",
    [
        {"big": 2**40},  # an int64: BSON gives ``bson.Int64`` back
        {"when": datetime(2026, 1, 2, tzinfo=timezone.utc)},  # no plain copy
        {"odd": {"$key": 1}},  # a key the plain copy cannot hold
    ],
)
async def test_metadata_that_plain_bson_would_change_keeps_its_serialized_copy(
    api: Api, extra: dict[str, Any]
) -> None:
    metadata = {"source": "loop", "step": 1, **extra}
    config = await _put(api, "t", {"count": 1}, **metadata)
    assert "metadata_typed" in await _document(api, config)
    loaded = (await api.get_tuple(config)).metadata
    expected = api.saver.serde.loads_typed(api.saver.serde.dumps_typed(metadata))
    assert loaded == expected
    assert repr(loaded) == repr(expected)


async def test_a_rewritten_checkpoint_keeps_nothing_of_the_earlier_document(api: Api) -> None:
    parent = generate_config("t")
    checkpoint = _checkpoint(VALUES)
    versions = checkpoint["channel_versions"]
    await api.put(parent, checkpoint, {"when": datetime(2026, 1, 2), "run_id": "r"}, versions)
    # The same checkpoint again, its metadata plain now.
    config = await api.put(parent, checkpoint, {"step": 2}, versions)
    doc = await _document(api, config)
    assert {"metadata_typed", "run_id"}.isdisjoint(doc)
    assert (await api.get_tuple(config)).metadata == {"step": 2}


async def test_slim_documents_are_copied_kept_by_prune_and_deleted_with_the_thread(
    api: Api,
) -> None:
    first = await _put(api, "t", VALUES, source="input", step=-1)
    second = _checkpoint({**VALUES, "count": 8, "flag": None}, "2")
    second["channel_versions"].update(word="1", items="1")  # unchanged
    new = {"count": "2", "flag": "2"}
    latest = await api.put(first, second, {"source": "loop", "step": 0}, new)
    assert await api.count(CHECKPOINTS, {"metadata_typed": {"$exists": True}}) == 0
    latest_values = {**VALUES, "count": 8, "flag": None}

    await api.copy_thread("t", "copy")
    copied = {**latest["configurable"], "thread_id": "copy"}
    loaded = await api.get_tuple({"configurable": copied})
    assert loaded.checkpoint["channel_values"] == latest_values
    assert loaded.metadata == {"source": "loop", "step": 0}

    await api.prune(["t"])
    (kept,) = await api.list(generate_config("t"))
    assert kept.checkpoint["channel_values"] == latest_values
    assert kept.metadata == {"source": "loop", "step": 0}
    assert len(await api.list(generate_config("copy"))) == 2

    await api.delete_thread("copy")
    assert await api.docs(CHECKPOINTS, {"thread_id": "copy"}) == []
    assert await api.docs(BLOBS, {"thread_id": "copy"}) == []


_MESSAGES = DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)


class DeltaState(TypedDict):
    messages: Annotated[list, _MESSAGES]
    turns: int


def _delta_graph(checkpointer: Any) -> Any:
    """A chat on a DeltaChannel beside a plain channel and the branch to the reply: the
    messages rebuilt from history through slim documents (``replay`` only where a
    DeltaChannel has no stored value)."""

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        seen = len(state["messages"])
        return {"messages": [AIMessage(f"seen {seen}", id=f"ai-{seen}")], "turns": seen // 2 + 1}

    builder = StateGraph(DeltaState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


async def test_delta_channel_history_through_slim_documents(api: Api) -> None:
    ours, reference = _delta_graph(api.saver), _delta_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    for turn in range(7):
        update = {"messages": [HumanMessage(f"turn {turn}", id=f"h-{turn}")]}
        await api.invoke(ours, update, config)
        reference.invoke(update, config)
    docs = await api.docs(CHECKPOINTS)
    assert not [d for d in docs if "metadata_typed" in d]
    stored = {d["checkpoint_id"] for d in docs if "messages" in {v["channel"] for v in d["values"]}}
    replayed = {d["checkpoint_id"] for d in docs if "replay" in d}
    assert stored and replayed and not stored & replayed

    history = await api.history(ours, config)
    expected = list(reference.get_state_history(config))
    assert [s.values for s in history] == [s.values for s in expected]
    assert [s.next for s in history] == [s.next for s in expected]
