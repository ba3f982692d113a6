"""List deltas under real graphs: several saver instances on one thread, deletion under
a running graph, and maintenance that keeps every base a survivor needs."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from mongo_ckpt import StaleParentError, maintenance
from mongo_ckpt.layout import CHECKPOINTS
from tests.graphs import thread
from tests.saver_support import Api, assert_no_orphans


def chat() -> StateGraph:
    def bot(state: MessagesState) -> dict:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"#{n}", id=f"ai-{n}")]}

    return StateGraph(MessagesState).add_node("bot", bot).add_edge(START, "bot")


async def say(
    run: Api, graph: CompiledStateGraph, thread_id: str, *texts: str, run_id: str = ""
) -> None:
    config = thread(thread_id, **({"run_id": run_id} if run_id else {}))
    for text in texts:
        await run.invoke(graph, {"messages": [HumanMessage(text, id=f"h-{text}")]}, config)


def contents(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


async def test_two_instances_on_one_thread(api: Api) -> None:
    other = api.reopened()
    graphs = [api.compile(chat()), other.compile(chat())]
    for turn in range(12):
        side = turn % 3 % 2  # two turns on one instance, one on the other
        await say([api, other][side], graphs[side], "shared", f"m{turn}")
    expected = [x for turn in range(12) for x in (f"m{turn}", f"#{2 * turn + 1}")]
    for r, g in ((api, graphs[0]), (other, graphs[1])):
        assert contents(await r.state(g, thread("shared"))) == expected
        history = await r.history(g, thread("shared"))
        assert [len(s.values.get("messages", [])) for s in history] == [
            n for turn in range(11, -1, -1) for n in (2 * turn + 2, 2 * turn + 1, 2 * turn)
        ]



async def test_thread_reused_after_delete(api: Api) -> None:
    other = api.reopened()
    graph, other_graph = api.compile(chat()), other.compile(chat())
    await say(api, graph, "reused", "a", "b", "c", "d")
    await other.delete_thread("reused")
    await say(other, other_graph, "reused", "x", "y")
    await say(api, graph, "reused", "z")  # this instance wrote the old thread's chains
    expected = ["x", "#1", "y", "#3", "z", "#5"]
    assert contents(await api.state(graph, thread("reused"))) == expected
    assert contents(await other.state(other_graph, thread("reused"))) == expected
    await assert_no_orphans(api)



async def test_run_continues_after_delete(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    other = api.reopened()

    def first(state: MessagesState) -> dict:
        return {"messages": [AIMessage("first", id="first")]}

    def deleting(state: MessagesState) -> dict:
        other.saver.delete_thread("doomed")  # another process deletes the running thread
        return {"messages": [AIMessage("second", id="second")]}

    builder = StateGraph(MessagesState).add_node("first", first).add_node("deleting", deleting)
    graph = api.compile(builder.add_edge(START, "first").add_edge("first", "deleting"))
    await say(api, api.compile(chat()), "doomed", "a", "b", "c")
    # Its parent (and the list-delta bases it would name) went with the thread: refused.
    with pytest.raises(StaleParentError) as raised:
        await api.invoke(graph, {"messages": [HumanMessage("d", id="h-d")]}, thread("doomed"))
    assert raised.value.thread_id == "doomed"
    assert "doomed" in str(raised.value) and "deleted" in str(raised.value)
    assert (await api.state(graph, thread("doomed"))).values == {}
    # What the run wrote after the delete (the refused put's values, a task's writes to
    # a deleted checkpoint) is left for maintenance; counted as old, one prune collects it.
    monkeypatch.setattr(maintenance, "STRAY_AGE", timedelta(seconds=-5))
    await api.prune(["doomed"])
    await assert_no_orphans(api)



async def all_states(run: Api, graph: CompiledStateGraph, thread_id: str) -> list[tuple]:
    states = await run.history(graph, thread(thread_id))
    return [(s.values, s.next, s.metadata["step"]) for s in states]


async def test_maintenance_keeps_bases(api: Api) -> None:
    graph = api.compile(chat())
    texts = [f"m{i}" for i in range(12)]
    await say(api, graph, "kept", *texts)
    await say(api, graph, "runs", *texts[:6], run_id="first")
    await say(api, graph, "copied", *texts)
    latest = await api.state(graph, thread("kept"))

    await api.copy_thread("copied", "copy")
    assert await all_states(api, graph, "copy") == await all_states(api, graph, "copied")

    await api.prune(["kept"])
    after = await api.state(graph, thread("kept"))
    assert after.values == latest.values
    doc = (await api.docs(CHECKPOINTS, {"thread_id": "kept"}))[0]
    assert any(v.get("base") for v in doc["values"])  # its bases outlived their checkpoints
    other = api.reopened()
    await say(other, other.compile(chat()), "kept", "after prune")
    await say(api, graph, "kept", "and again")
    assert contents(await api.state(graph, thread("kept")))[-4:] == [
        "after prune", "#25", "and again", "#27",
    ]  # fmt: skip

    await say(api, graph, "runs", *texts[6:], run_id="second")
    before = await all_states(api, graph, "runs")
    await api.delete_for_runs(["first"])
    survivors = await all_states(api, graph, "runs")
    assert survivors and set(map(repr, survivors)) <= set(map(repr, before))
    assert survivors[0] == before[0]

    await assert_no_orphans(api)

    expiring = api.reopened(ttl=0.05)
    await asyncio.sleep(0.1)
    await expiring.sweep_expired()  # its first call sweeps before it runs
    assert await api.counts() == {"checkpoints": 0, "blobs": 0, "writes": 0}

