"""A long ``MessagesState`` conversation stored with list deltas: interrupts, replay, a
fork with ``update_state``, ``RemoveMessage`` and ``REMOVE_ALL_MESSAGES``; every state of
``get_state_history`` equals the one LangGraph's in-memory saver keeps."""

from __future__ import annotations

import math
from typing import Any

import mongomock
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.graph.state import CompiledStateGraph

from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from tests.graphs import thread
from tests.saver_support import Api


def agent_builder() -> StateGraph:
    """START -> agent -> (tools -> agent when the human asks for a tool) -> END."""

    def agent(state: MessagesState) -> dict:
        messages = state["messages"]
        text = f"#{len(messages)} after {messages[-1].content}" if messages else "#0"
        return {"messages": [AIMessage(text, id=f"ai-{len(messages)}")]}

    def tools(state: MessagesState) -> dict:
        return {"messages": [HumanMessage("tool result", id=f"tool-{len(state['messages'])}")]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1:]
        asks = last and last[0].content.startswith("#") and "use tool" in last[0].content
        return "tools" if asks else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", END)
    return builder


async def converse(run: Api, graph: CompiledStateGraph, thread_id: str, turns: int) -> None:
    """A scripted conversation with deterministic ids: interrupts (every tenth turn asks for
    a tool), then, at 30%, 50%, 70% and 80% of the turns, a replay, a fork with
    ``update_state``, a removal in the middle and a removal of everything."""
    config = thread(thread_id)
    for turn in range(turns):
        text = f"use tool {turn}" if turn % 10 == 3 else f"hello {turn}"
        await run.invoke(graph, {"messages": [HumanMessage(text, id=f"h-{turn}")]}, config)
        if turn % 10 == 3:
            await run.invoke(graph, None, config)  # resume after the interrupt
        if turn == turns * 3 // 10:  # replay from the input checkpoint five turns back
            inputs = [s for s in await run.history(graph, config) if s.next == ("agent",)]
            await run.invoke(graph, None, inputs[5].config)
        if turn == turns // 2:  # fork from an older checkpoint with update_state
            older = (await run.history(graph, config))[12]
            edited = HumanMessage("edited", id=f"h-{turn - 5}")
            await run.update(graph, older.config, {"messages": [edited]})
        if turn == turns * 7 // 10:  # remove a message in the middle
            middle = (await run.state(graph, config)).values["messages"][turn // 3]
            await run.update(graph, config, {"messages": [RemoveMessage(id=middle.id)]})
        if turn == turns * 8 // 10:
            await run.update(graph, config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})


def snapshot(states: list[Any]) -> list[tuple]:
    return [(s.values, s.next, s.metadata["step"], s.metadata["source"]) for s in states]


async def check_long_conversation(run: Api, turns: int) -> None:
    """Every state of the history equals the one LangGraph's in-memory saver keeps."""
    graph = run.compile(agent_builder(), interrupt_before=["tools"])
    reference = agent_builder().compile(checkpointer=InMemorySaver(), interrupt_before=["tools"])
    await converse(run, graph, "deltas", turns)
    await converse(Api(reference.checkpointer), reference, "deltas", turns)

    ours = await run.history(graph, thread("deltas"))
    theirs = await run.history(reference, thread("deltas"))
    assert len(ours) > 3 * turns
    assert snapshot(ours) == snapshot(theirs)
    api = run
    assert await api.count(BLOBS, {"thread_id": "deltas", "base": {"$exists": True}}) > turns
    # Every state is rebuilt from at most floor(log2(versions)) + 2 blob documents.
    bound = math.floor(math.log2(await api.count(BLOBS, {"channel": "messages"}))) + 2
    for doc in await api.docs(CHECKPOINTS, {"thread_id": "deltas"}):
        assert len([v for v in doc["values"] if v["channel"] == "messages"]) <= bound


@pytest.mark.mock_by_default
async def test_long_conversation(api: Api) -> None:
    # 100 turns through the real sync driver; mongomock (slow on long threads) runs a
    # shorter one, and so does the async saver (the same operations, written once).
    if api.is_async:
        turns = 30
    else:
        turns = 40 if isinstance(api.saver.client, mongomock.MongoClient) else 100
    await check_long_conversation(api, turns)
