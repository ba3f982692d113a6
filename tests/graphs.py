"""Graphs shared by the graph-level tests (tests/test_graph_*.py).

Each scenario is one ``async def test_...(api: Api)``: the ``api`` fixture runs it with the
sync graph API on ``MongoDBSaver`` and the async one on ``AsyncMongoDBSaver``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from operator import add
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.pregel._runner import PregelRunner
from typing_extensions import TypedDict


def thread(thread_id: str, **configurable: Any) -> RunnableConfig:
    """A run config for ``thread_id`` (plus e.g. ``checkpoint_ns``/``checkpoint_id``)."""
    return {"configurable": {"thread_id": thread_id, **configurable}}


def committed(monkeypatch: Any, node: str) -> threading.Event:
    """Set once LangGraph has committed a successful run of ``node`` (its writes are the
    loop's): a sibling failing after that cannot cancel it. Returning from the node is not
    enough: on a loaded machine its thread may wait long before LangGraph takes its result."""
    event = threading.Event()
    commit = PregelRunner.commit

    def committing(runner: PregelRunner, task: Any, exception: BaseException | None) -> None:
        commit(runner, task, exception)
        if task.name == node and exception is None:
            event.set()

    monkeypatch.setattr(PregelRunner, "commit", committing)
    return event


# -- the persistence docs' example: START -> node_a -> node_b -> END ----------


class SeedState(TypedDict):
    foo: str
    bar: Annotated[list[str], add]


SEED_INPUT: SeedState = {"foo": "", "bar": []}
SEED_FINAL: SeedState = {"foo": "b", "bar": ["a", "b"]}


def seed_builder(
    calls: Counter, observe: Callable[[str, RunnableConfig], None] | None = None
) -> StateGraph:
    """The docs' two-node graph; ``calls`` counts executions per node, ``observe`` sees each."""

    def node(name: str) -> Callable[[SeedState, RunnableConfig], dict]:
        def run(state: SeedState, config: RunnableConfig) -> dict:
            calls[name] += 1
            if observe is not None:
                observe(name, config)
            letter = name[-1]
            return {"foo": letter, "bar": [letter]}

        return run

    builder = StateGraph(SeedState)
    builder.add_node("node_a", node("node_a"))
    builder.add_node("node_b", node("node_b"))
    builder.add_edge(START, "node_a")
    builder.add_edge("node_a", "node_b")
    builder.add_edge("node_b", END)
    return builder


# -- a chat bot with conversation memory (add_messages) -----------------------


def reply(messages: list[AnyMessage]) -> str:
    """What the bot answers after ``messages``: how many it saw and the last one's text."""
    return f"#{len(messages)}: {messages[-1].content}"


def chat_builder() -> StateGraph:
    """START -> bot -> END on ``MessagesState``; the bot answers with ``reply``."""

    def bot(state: MessagesState) -> dict:
        return {"messages": [AIMessage(reply(state["messages"]))]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder


def contents(messages: list[AnyMessage]) -> list[tuple[str, Any]]:
    """``(type, content)`` of each message."""
    return [(m.type, m.content) for m in messages]
