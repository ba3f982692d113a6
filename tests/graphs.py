"""Graphs and a sync/async runner shared by the graph-level tests (tests/test_graph_*.py).

Each scenario is written once as ``async def check_...(run: Runner)`` and run twice: with
``SyncRunner(saver)`` (the sync graph API on ``MongoDBSaver``) and ``AsyncRunner(asaver)``
(the async graph API on ``AsyncMongoDBSaver``).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from operator import add
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot
from typing_extensions import TypedDict

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.base import MongoSaverBase


def thread(thread_id: str, **configurable: Any) -> RunnableConfig:
    """A run config for ``thread_id`` (plus e.g. ``checkpoint_ns``/``checkpoint_id``)."""
    return {"configurable": {"thread_id": thread_id, **configurable}}


class Runner(ABC):
    """One async interface over a compiled graph's sync or async API and its saver."""

    def __init__(self, saver: MongoSaverBase) -> None:
        self.saver = saver

    def compile(self, builder: StateGraph, **kwargs: Any) -> CompiledStateGraph:
        return builder.compile(checkpointer=self.saver, **kwargs)

    def reopened(self, **saver_options: Any) -> Runner:
        """A runner on a new saver over the same database, as after a process restart."""
        saver = type(self.saver)(self.saver.client, self.saver.db.name, **saver_options)
        return type(self)(saver)

    @abstractmethod
    async def invoke(
        self, graph: CompiledStateGraph, input: Any, config: RunnableConfig, **kwargs: Any
    ) -> Any: ...

    @abstractmethod
    async def state(
        self, graph: CompiledStateGraph, config: RunnableConfig, *, subgraphs: bool = False
    ) -> StateSnapshot: ...

    @abstractmethod
    async def history(
        self, graph: CompiledStateGraph, config: RunnableConfig
    ) -> list[StateSnapshot]:
        """``get_state_history``, newest first."""

    @abstractmethod
    async def update(
        self,
        graph: CompiledStateGraph,
        config: RunnableConfig,
        values: Any,
        as_node: str | None = None,
    ) -> RunnableConfig: ...

    @abstractmethod
    async def checkpoints(self, config: RunnableConfig) -> list[CheckpointTuple]:
        """What the saver itself lists for ``config``, newest first."""


class SyncRunner(Runner):
    """The sync graph API, called in a worker thread so concurrent runs really overlap."""

    saver: MongoDBSaver

    async def invoke(
        self, graph: CompiledStateGraph, input: Any, config: RunnableConfig, **kwargs: Any
    ) -> Any:
        return await asyncio.to_thread(graph.invoke, input, config, **kwargs)

    async def state(
        self, graph: CompiledStateGraph, config: RunnableConfig, *, subgraphs: bool = False
    ) -> StateSnapshot:
        return await asyncio.to_thread(graph.get_state, config, subgraphs=subgraphs)

    async def history(
        self, graph: CompiledStateGraph, config: RunnableConfig
    ) -> list[StateSnapshot]:
        return await asyncio.to_thread(lambda: list(graph.get_state_history(config)))

    async def update(
        self,
        graph: CompiledStateGraph,
        config: RunnableConfig,
        values: Any,
        as_node: str | None = None,
    ) -> RunnableConfig:
        return await asyncio.to_thread(graph.update_state, config, values, as_node)

    async def checkpoints(self, config: RunnableConfig) -> list[CheckpointTuple]:
        return await asyncio.to_thread(lambda: list(self.saver.list(config)))


class AsyncRunner(Runner):
    """The async graph API."""

    saver: AsyncMongoDBSaver

    async def invoke(
        self, graph: CompiledStateGraph, input: Any, config: RunnableConfig, **kwargs: Any
    ) -> Any:
        return await graph.ainvoke(input, config, **kwargs)

    async def state(
        self, graph: CompiledStateGraph, config: RunnableConfig, *, subgraphs: bool = False
    ) -> StateSnapshot:
        return await graph.aget_state(config, subgraphs=subgraphs)

    async def history(
        self, graph: CompiledStateGraph, config: RunnableConfig
    ) -> list[StateSnapshot]:
        return [snapshot async for snapshot in graph.aget_state_history(config)]

    async def update(
        self,
        graph: CompiledStateGraph,
        config: RunnableConfig,
        values: Any,
        as_node: str | None = None,
    ) -> RunnableConfig:
        return await graph.aupdate_state(config, values, as_node)

    async def checkpoints(self, config: RunnableConfig) -> list[CheckpointTuple]:
        return [item async for item in self.saver.alist(config)]


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
