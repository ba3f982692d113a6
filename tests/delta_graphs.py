"""DeltaChannel graphs, generated thread scenarios and the checks the tests/test_delta_*.py share.

A scenario is a graph ``Shape`` plus a list of ``Step``s drawn from a seeded ``random.Random``,
so every generated thread is reproducible from its seed. The same scenario runs on a graph
whose ``messages`` channel is a ``DeltaChannel`` and on a twin whose channel is a plain
``add_messages`` reducer; both must go through the same checkpoints with the same state.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from mongo_ckpt import AsyncMongoDBSaver
from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.graphs import thread
from tests.saver_support import Api

CHANNEL = "messages"
NO_SUCH_CHANNEL = "no_such_channel"
DURABILITIES = ("exit", "async", "sync")


def messages_state(delta: bool, snapshot_frequency: int) -> type:
    """A state with one ``messages`` list: a ``DeltaChannel`` or a plain ``add_messages``."""
    if delta:
        reducer: Any = DeltaChannel(_messages_delta_reducer, snapshot_frequency=snapshot_frequency)
    else:
        reducer = add_messages
    return TypedDict("State", {CHANNEL: Annotated[list, reducer]})


@dataclass(frozen=True)
class Shape:
    """A graph: ``head`` fans out to ``writers`` parallel nodes, then an optional subgraph.

    Every node appends one message to ``messages``; the subgraph (node ``sub``) has its
    own ``messages`` channel of the same kind, checkpointed under its own namespace.
    """

    snapshot_frequency: int
    writers: int
    subgraph: bool
    durability: str

    def nodes(self) -> list[str]:
        return ["head", *self.writer_names(), *(["sub"] if self.subgraph else [])]

    def writer_names(self) -> list[str]:
        return [f"w{i}" for i in range(self.writers)]


def _appender(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A node that appends a message whose id says who wrote it after how many messages."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        seen = state["messages"]
        last = seen[-1].content if seen else "nothing"
        return {"messages": [AIMessage(f"{name} after {last!r}", id=f"{name}-{len(seen)}")]}

    return node


def builder(shape: Shape, delta: bool) -> StateGraph:
    """The graph of ``shape`` with a DeltaChannel (``delta``) or a plain ``messages`` channel."""
    state = messages_state(delta, shape.snapshot_frequency)
    graph = StateGraph(state)
    graph.add_node("head", _appender("head"))
    graph.add_edge(START, "head")
    last = shape.writer_names()
    for name in last:
        graph.add_node(name, _appender(name))
        graph.add_edge("head", name)
    if shape.subgraph:
        inner = StateGraph(state)
        inner.add_node("s1", _appender("s1"))
        inner.add_node("s2", _appender("s2"))
        inner.add_edge(START, "s1")
        inner.add_edge("s1", "s2")
        inner.add_edge("s2", END)
        graph.add_node("sub", inner.compile())
        graph.add_edge(last, "sub")
        last = ["sub"]
    for name in last:
        graph.add_edge(name, END)
    return graph


@dataclass(frozen=True)
class Step:
    """One action on the thread.

    ``kind``: "invoke" (new input at the latest checkpoint), "resume" (run pending tasks),
    "fork" (new input at an older checkpoint), "update" (``update_state`` at a checkpoint).
    ``at``: which checkpoint of the root history, as a fraction of its length (oldest
    first); ``None`` means the latest. ``as_node`` and ``remove`` are for "update":
    ``remove`` also deletes the first message of the state being updated.
    """

    kind: str
    number: int
    at: float | None = None
    as_node: str | None = None
    remove: bool = False


def generate(seed: int) -> tuple[Shape, list[Step]]:
    """The scenario of ``seed``: a shape and 2 to 4 steps, starting with an invoke (at most
    3 with a subgraph, whose every run adds a namespace of four checkpoints)."""
    rng = random.Random(seed)
    shape = Shape(
        snapshot_frequency=rng.randint(1, 10),
        writers=rng.randint(1, 3),
        subgraph=rng.random() < 0.4,
        durability=DURABILITIES[seed % len(DURABILITIES)],
    )
    steps = [Step("invoke", 0)]
    for number in range(1, rng.randint(3, 4 if shape.subgraph else 5)):
        kind = rng.choice(["invoke", "invoke", "fork", "update", "update", "resume"])
        at = None if kind in ("invoke", "resume") else rng.choice([None, rng.random()])
        if kind == "fork" and at is None:
            at = rng.random()
        as_node = None
        if kind == "update":
            # Without as_node LangGraph needs one last writer to attribute the update to.
            choices = shape.nodes() + ([None] if shape.writers == 1 else [])
            as_node = rng.choice(choices)
        remove = kind == "update" and rng.random() < 0.3
        steps.append(Step(kind, number, at, as_node, remove))
    return shape, steps


async def play(
    api: Api, graph: CompiledStateGraph, shape: Shape, steps: Sequence[Step], thread_id: str
) -> None:
    """Run ``steps`` on ``thread_id``; step ``n`` is run ``run_id(thread_id, n)``."""
    latest = thread(thread_id)
    for step in steps:
        config = latest
        if step.at is not None:
            history = [s for s in await api.history(graph, latest) if not is_stub(s.metadata)]
            config = history[::-1][int(step.at * len(history))].config
        # LangGraph's server passes each run's id this way; it lands in checkpoint metadata.
        config = {**config, "metadata": {"run_id": run_id(thread_id, step.number)}}
        if step.kind == "resume":
            await api.invoke(graph, None, config, durability=shape.durability)
        elif step.kind in ("invoke", "fork"):
            message = HumanMessage(f"input {step.number}", id=f"in{step.number}")
            await api.invoke(graph, {"messages": [message]}, config, durability=shape.durability)
        else:
            number = step.number
            update: list[AnyMessage] = [HumanMessage(f"update {number}", id=f"up{number}")]
            if step.remove:
                current = (await api.state(graph, config)).values.get(CHANNEL, [])
                if current:
                    update.append(RemoveMessage(id=current[0].id))
            await api.update(graph, config, {CHANNEL: update}, as_node=step.as_node)


def run_id(thread_id: str, number: int) -> str:
    return f"{thread_id}/run-{number}"


def is_stub(metadata: Any) -> bool:
    """Whether a checkpoint is the empty stub LangGraph saves (only with a DeltaChannel)
    before the first run's final checkpoint under ``durability="exit"``."""
    return metadata.get("step") == -2


def checkpoint_id(config: RunnableConfig) -> str:
    return config["configurable"]["checkpoint_id"]


def namespace(config: RunnableConfig) -> str:
    return config["configurable"]["checkpoint_ns"]


def by_namespace(tuples: Sequence[CheckpointTuple]) -> list[list[CheckpointTuple]]:
    """Checkpoints but stubs grouped by namespace, oldest first, namespaces in order of creation.

    Checkpoint ids are time-ordered, so this order matches between two runs of one
    scenario even though their ids and subgraph namespaces differ.
    """
    groups: dict[str, list[CheckpointTuple]] = {}
    for t in sorted(tuples, key=lambda t: checkpoint_id(t.config)):
        if is_stub(t.metadata):
            continue
        groups.setdefault(namespace(t.config), []).append(t)
    return list(groups.values())


def message_summary(messages: Sequence[AnyMessage]) -> list[tuple[str, str | None, Any]]:
    """``(type, id, content)`` of each message."""
    return [(m.type, m.id, m.content) for m in messages]


async def rebuilt(api: Api, graph: CompiledStateGraph, config: RunnableConfig) -> tuple:
    """The state the graph rebuilds at ``config`` (any namespace): messages and next nodes."""
    snapshot = await api.state(graph, config)
    return message_summary(snapshot.values.get(CHANNEL, [])), snapshot.next


async def all_states(
    api: Api, graph: CompiledStateGraph, thread_id: str
) -> dict[tuple[str, str], tuple]:
    """``rebuilt`` state of every checkpoint of every namespace, by (namespace, checkpoint id)."""
    return {
        (namespace(t.config), checkpoint_id(t.config)): await rebuilt(api, graph, t.config)
        for t in await api.list(thread(thread_id))
    }


class DefaultWalk:
    """``BaseCheckpointSaver``'s own ``get_delta_channel_history``: its walk over the
    saver's checkpoints, each read once (the thread must not change while it is
    compared), so walking from every checkpoint of a thread stays cheap. They are read
    with ``list`` of the checkpoint's own config, the same tuple as ``get_tuple``: the
    saver's ``get_tuple`` may read a history along (``delta.range_history_pipeline(whole=True)``),
    which the walk must neither pay for nor leave to the override it is compared with."""

    def __init__(self, saver: MongoSaverBase) -> None:
        self.saver = saver
        self.tuples: dict[tuple[str, str, str], CheckpointTuple | None] = {}

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        key = _checkpoint_key(config)
        if key not in self.tuples:
            self.tuples[key] = next(iter(self.saver.list(config, limit=1)), None)
        return self.tuples[key]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        key = _checkpoint_key(config)
        if key not in self.tuples:
            found = [t async for t in self.saver.alist(config, limit=1)]
            self.tuples[key] = found[0] if found else None
        return self.tuples[key]

    async def histories(self, config: RunnableConfig, channels: Sequence[str]) -> tuple[Any, Any]:
        """``(saver's override, base class's walk)`` of the delta history at ``config``."""
        base: Any = BaseCheckpointSaver
        if isinstance(self.saver, AsyncMongoDBSaver):
            return (
                await self.saver.aget_delta_channel_history(config=config, channels=channels),
                await base.aget_delta_channel_history(self, config=config, channels=channels),
            )
        return (
            self.saver.get_delta_channel_history(config=config, channels=channels),
            base.get_delta_channel_history(self, config=config, channels=channels),
        )


class HistoryWalks:
    """Wraps a saver's ``checkpoints`` collection (``restore`` unwraps it) and keeps the
    ``$graphLookup`` ``maxDepth`` of every history walk sent to it, and the reading stages
    (``$match``, ``$sort``, ``$limit``) of every history range read (a ``get_tuple``'s
    among them: ``delta.range_history_pipeline(whole=True)``)."""

    def __init__(self, saver: MongoSaverBase) -> None:
        self.saver = saver
        self.inner = saver.collections[CHECKPOINTS]
        self.max_depths: list[int] = []
        self.ranges: list[list[dict[str, Any]]] = []
        saver.collections[CHECKPOINTS] = self

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def aggregate(self, pipeline: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        self.max_depths += [
            stage["$graphLookup"]["maxDepth"] for stage in pipeline if "$graphLookup" in stage
        ]
        if len(pipeline) > 3 and "$group" in pipeline[3]:  # delta.range_chain_stages
            self.ranges.append(pipeline[:3])
        return self.inner.aggregate(pipeline, *args, **kwargs)

    def clear(self) -> None:
        self.max_depths.clear()
        self.ranges.clear()

    def range_reads(self) -> list[int]:
        """The checkpoints each range read took (the target included)."""
        return [len(list(self.inner.aggregate(stages))) for stages in self.ranges]

    def restore(self) -> None:
        self.saver.collections[CHECKPOINTS] = self.inner


def _checkpoint_key(config: RunnableConfig) -> tuple[str, str, str]:
    configurable = config["configurable"]
    assert configurable.get("checkpoint_id"), "the walk reads checkpoints by id"
    return (
        configurable["thread_id"],
        configurable.get("checkpoint_ns", ""),
        configurable["checkpoint_id"],
    )


async def documents(saver: MongoSaverBase, thread_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every stored document of a thread, per checkpointer collection, in ``_id`` order."""
    out = {}
    for name in (CHECKPOINTS, BLOBS, WRITES):
        cursor = saver.collections[name].find({"thread_id": thread_id}, sort=[("_id", 1)])
        is_async = isinstance(saver, AsyncMongoDBSaver)
        out[name] = await cursor.to_list(None) if is_async else list(cursor)
    return out


def is_mock(saver: MongoSaverBase) -> bool:
    """Whether ``saver`` runs on the in-process mongomock backend."""
    return any(cls.__module__.startswith("mongomock") for cls in type(saver.client).__mro__)


class Recorder(InMemorySaver):
    """LangGraph's in-memory saver, recording every ``put`` and ``put_writes`` it receives.

    A long thread is produced quickly in memory, then ``replay`` makes exactly the same
    calls on the saver under test: what it stores is what the graph would have stored
    there (the graph's own loads between runs store nothing).
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple]] = []

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        metadata = get_serializable_checkpoint_metadata(config, metadata)
        args = (_key_config(config), checkpoint, metadata, dict(new_versions))
        self.calls.append(("put", copy.deepcopy(args)))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args = (_key_config(config), list(writes), task_id, task_path)
        self.calls.append(("put_writes", copy.deepcopy(args)))
        super().put_writes(config, writes, task_id, task_path)

    def stored(self, channel: str) -> list[str]:
        """Ids of the checkpoints put with a value of ``channel`` (for a DeltaChannel: its
        snapshots). ``get_tuple`` cannot tell: it also shows the value at descendants
        whose version of the channel is unchanged."""
        return [
            args[1]["id"]
            for method, args in self.calls
            if method == "put" and channel in args[1]["channel_values"]
        ]

    async def replay(self, api: Api) -> None:
        """Make the recorded calls, in order, on ``api``'s saver."""
        for method, args in self.calls:
            await api.call(method, *args)


def _key_config(config: RunnableConfig) -> RunnableConfig:
    configurable = config["configurable"]
    keys = ("thread_id", "checkpoint_ns", "checkpoint_id")
    return {"configurable": {k: configurable[k] for k in keys if k in configurable}}
