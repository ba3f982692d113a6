"""A graph compiled with the checkpointer and the store on one client remembers across threads."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from tests.store_support import DIMS, FakeEmbeddings


class Turn(TypedDict, total=False):
    user: str
    text: str
    answer: str
    turns: int


def remember(state: Turn) -> dict[str, Any]:
    """Sync node: stores a fact said as 'remember: ...' (the store from ``get_store()``)."""
    text = state["text"]
    if text.startswith("remember:"):
        fact = text.removeprefix("remember:").strip()
        get_store().put(("users", state["user"], "facts"), fact, {"fact": fact})
    return {"turns": state.get("turns", 0) + 1}


async def recall(state: Turn, runtime: Runtime) -> dict[str, Any]:
    """Async node: answers with the user's most relevant fact (the store from the runtime)."""
    assert runtime.store is not None
    found = await runtime.store.asearch(("users", state["user"], "facts"), query=state["text"])
    return {"answer": found[0].value["fact"] if found else "I don't know"}


def recall_sync(state: Turn, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    found = runtime.store.search(("users", state["user"], "facts"), query=state["text"])
    return {"answer": found[0].value["fact"] if found else "I don't know"}


def _graph(recall_node: Any) -> StateGraph:
    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder


INDEX = {"dims": DIMS, "fields": ["fact"]}


async def test_graph_remembers_a_user_fact_across_threads(asaver: AsyncMongoDBSaver) -> None:
    store = AsyncMongoDBStore.from_saver(
        asaver, index={**INDEX, "embed": FakeEmbeddings()}, exact_search=True
    )
    assert store.client is asaver.client and store.db.name == asaver.db.name
    graph = _graph(recall).compile(checkpointer=asaver, store=store)

    one = {"configurable": {"thread_id": "thread-1"}}
    two = {"configurable": {"thread_id": "thread-2"}}
    await graph.ainvoke({"user": "ada", "text": "remember: my favourite colour is teal"}, one)
    await graph.ainvoke({"user": "ada", "text": "remember: I live in Lisbon"}, one)
    other_user = await graph.ainvoke({"user": "bob", "text": "what is my favourite colour"}, two)
    assert other_user["answer"] == "I don't know"
    answer = await graph.ainvoke({"user": "ada", "text": "what is my favourite colour"}, two)
    assert answer["answer"] == "my favourite colour is teal"

    # the threads' state lives in the checkpointer, the fact in the store
    assert (await graph.aget_state(one)).values["turns"] == 2
    assert (await graph.aget_state(two)).values["turns"] == 2
    assert await store.alist_namespaces() == [("users", "ada", "facts")]


def test_sync_graph_remembers_a_user_fact_across_threads(saver: MongoDBSaver) -> None:
    store = MongoDBStore.from_saver(
        saver, index={**INDEX, "embed": FakeEmbeddings()}, exact_search=True
    )
    graph = _graph(recall_sync).compile(checkpointer=saver, store=store)
    graph.invoke(
        {"user": "ada", "text": "remember: my cat is called Miso"},
        {"configurable": {"thread_id": "a"}},
    )
    answer = graph.invoke(
        {"user": "ada", "text": "what is my cat called"}, {"configurable": {"thread_id": "b"}}
    )
    assert answer["answer"] == "my cat is called Miso"
    assert graph.get_state({"configurable": {"thread_id": "a"}}).values["turns"] == 1


def test_from_saver_refuses_a_mismatched_saver(saver: MongoDBSaver) -> None:
    with pytest.raises(TypeError, match="expects AsyncMongoDBSaver, got MongoDBSaver"):
        AsyncMongoDBStore.from_saver(saver)
