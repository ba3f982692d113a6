"""``get_tuple`` of a thread's latest checkpoint, read from the newest checkpoint id the
saver knows there (the one it wrote last, or the latest it found): the key index bounds
the read, so a server that sorts what it matched reads a few documents, not the thread.
When that checkpoint is gone (deleted by another instance), one more read of the whole
thread finds the latest, and the saver remembers it."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import HumanMessage

from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import count_calls, record_first_arguments
from tests.graphs import chat_builder, thread
from tests.saver_support import Api

AGGREGATE = (CHECKPOINTS, "aggregate")


def record_pipelines(api: Api) -> list[Any]:
    """The pipelines of the saver's ``aggregate`` calls on ``checkpoints``, as sent."""
    return record_first_arguments(api.saver.collections, (CHECKPOINTS,), "aggregate")


def lower_bound(pipeline: Any) -> Any:
    """The lower bound of ``checkpoint_id`` the pipeline's first ``$match`` sets, if any."""
    first = pipeline[0]["$match"].get("checkpoint_id")
    return first.get("$gte") if isinstance(first, dict) else None


async def run_turn(api: Api, graph: Any, text: str, thread_id: str = "t") -> str:
    """A turn of the chat graph under a run id of its own, returned."""
    run_id = str(uuid.uuid4())
    config = {**thread(thread_id), "metadata": {"run_id": run_id}}
    await api.invoke(graph, {"messages": [HumanMessage(text)]}, config)
    return run_id


async def test_a_known_thread_is_read_from_the_newest_id_known(api: Api) -> None:
    graph = api.compile(chat_builder())
    for n in range(3):
        await run_turn(api, graph, f"hi {n}")
    cold = api.reopened()
    for saver in (api, cold):
        sent = record_pipelines(saver)
        latest = await saver.get_tuple(thread("t"))
        again = await saver.get_tuple(thread("t"))
        assert latest is not None and again is not None
        assert again.config == latest.config
        assert len(sent) == 2
        # Warm: bounded from the first read on; cold: from the second, by what it found.
        first_bound = latest.checkpoint["id"] if saver is api else None
        assert [lower_bound(p) for p in sent] == [first_bound, latest.checkpoint["id"]]
    state = await api.state(graph, thread("t"))
    assert [m.content for m in state.values["messages"][::2]] == ["hi 0", "hi 1", "hi 2"]


async def test_a_newer_checkpoint_of_another_writer_is_found_in_one_read(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "mine")
    other = api.reopened()
    await run_turn(other, other.compile(chat_builder()), "theirs")
    counter = count_calls(api.saver.collections)
    latest = await api.get_tuple(thread("t"))
    assert counter[AGGREGATE] == 1
    assert latest is not None and latest.config == (await other.get_tuple(thread("t"))).config
    assert [m.content for m in latest.checkpoint["channel_values"]["messages"][::2]] == [
        "mine",
        "theirs",
    ]


async def test_a_latest_deleted_elsewhere_costs_one_more_read_once(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "kept")
    last_run = await run_turn(api, graph, "deleted")
    other = api.reopened()
    await other.delete_for_runs([last_run])
    counter = count_calls(api.saver.collections)
    latest = await api.get_tuple(thread("t"))
    assert counter[AGGREGATE] == 2  # the bounded read finds nothing, the whole one finds it
    expected = await api.reopened().get_tuple(thread("t"))
    assert latest is not None and expected is not None and latest.config == expected.config
    counter.clear()
    assert (await api.get_tuple(thread("t"))).config == expected.config
    assert counter[AGGREGATE] == 1  # remembered: bounded from there
    await run_turn(api, graph, "after")
    state = await api.state(graph, thread("t"))
    assert [m.content for m in state.values["messages"][::2]] == ["kept", "after"]


async def test_a_thread_deleted_elsewhere_reads_as_none_and_is_forgotten(api: Api) -> None:
    graph = api.compile(chat_builder())
    await run_turn(api, graph, "hello")
    await api.reopened().delete_thread("t")
    counter = count_calls(api.saver.collections)
    assert await api.get_tuple(thread("t")) is None
    assert counter[AGGREGATE] == 2
    counter.clear()
    assert await api.get_tuple(thread("t")) is None
    assert counter[AGGREGATE] == 1
    await run_turn(api, graph, "again")
    state = await api.state(graph, thread("t"))
    assert [m.content for m in state.values["messages"][::2]] == ["again"]
