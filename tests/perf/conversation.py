"""The measured conversation: a chat graph, its savers, and how their storage is weighed.

Shared by ``tests/perf/bench_checkpointer.py`` and ``tests/test_storage_footprint.py`` so
the benchmark and the storage assertions measure the same thing.
"""

import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import bson
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.mongodb import MongoDBSaver as OfficialSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from typing_extensions import TypedDict

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import CountingCollection
from tests.prose import prose

MESSAGE_BYTES = 1024
SNAPSHOT_FREQUENCY = 100
MONGO_CKPT, OFFICIAL = "mongo-ckpt", "langgraph-checkpoint-mongodb"
MONGO_CKPT_WHOLE = "mongo-ckpt, list_deltas=False"
MONGO_CKPT_TWO_COMMANDS = "mongo-ckpt, client_bulk_write=False"
SAVERS = (MONGO_CKPT, MONGO_CKPT_WHOLE, OFFICIAL)
PLAIN, DELTA = "add_messages", "DeltaChannel"
VARIANTS = (PLAIN, DELTA)
def message_text(role: str, turn: int) -> str:
    """A deterministic message body of exactly ``MESSAGE_BYTES`` ASCII characters, of its
    own for every message (``tests.prose``: compressed values gain on it about what they
    gain on text, less if anything)."""
    return prose(f"{role}-{turn}", MESSAGE_BYTES, head=f"{role} turn {turn}:")


def human_message(turn: int) -> HumanMessage:
    return HumanMessage(content=message_text("human", turn), id=f"human-{turn}")


class PlainState(TypedDict):
    messages: Annotated[list, add_messages]


def _delta_state(snapshot_frequency: int) -> type:
    channel = DeltaChannel(_messages_delta_reducer, snapshot_frequency=snapshot_frequency)

    class DeltaState(TypedDict):
        messages: Annotated[list, channel]

    return DeltaState


def _reply(state: dict[str, Any]) -> dict[str, Any]:
    turn = len(state["messages"]) // 2
    return {"messages": [AIMessage(content=message_text("ai", turn), id=f"ai-{turn}")]}


def chat_graph(
    checkpointer: BaseCheckpointSaver,
    variant: str = PLAIN,
    snapshot_frequency: int = SNAPSHOT_FREQUENCY,
) -> Any:
    """``START -> reply -> END``; ``reply`` answers the last human message deterministically."""
    state = PlainState if variant == PLAIN else _delta_state(snapshot_frequency)
    builder = StateGraph(state)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=checkpointer)


def run_turn(graph: Any, thread_id: str, turn: int) -> dict[str, Any]:
    """One turn: a ~1 KB human message in, a ~1 KB AI reply out (``graph.invoke``)."""
    config = {"configurable": {"thread_id": thread_id}}
    return graph.invoke({"messages": [human_message(turn)]}, config)


def takes_client_bulk_write() -> bool:
    """Whether this mongo-ckpt's saver takes ``client_bulk_write`` (``False`` forces the put
    path of one command per collection where the server has MongoDB 8.0's ``bulkWrite``)."""
    return "client_bulk_write" in inspect.signature(MongoDBSaver).parameters


def make_saver(name: str, client: Any, db_name: str) -> BaseCheckpointSaver:
    """A ready saver of kind ``name`` (one of ``SAVERS``, or ``MONGO_CKPT_TWO_COMMANDS``
    where ``takes_client_bulk_write()``) on ``client[db_name]``."""
    if name in (MONGO_CKPT, MONGO_CKPT_WHOLE, MONGO_CKPT_TWO_COMMANDS):
        options: dict[str, Any] = {"list_deltas": name != MONGO_CKPT_WHOLE}
        if name == MONGO_CKPT_TWO_COMMANDS:
            options["client_bulk_write"] = False
        saver = MongoDBSaver(client, db_name, **options)
        saver.setup()
        return saver
    if name == OFFICIAL:
        return OfficialSaver(client, db_name)
    raise ValueError(f"unknown saver {name!r}; expected one of {SAVERS}")


# The official saver keeps its two collections as attributes.
_OFFICIAL_COLLECTIONS = {"checkpoints": "checkpoint_collection", "writes": "writes_collection"}


def saver_collections(saver: BaseCheckpointSaver) -> dict[str, Any]:
    """Logical name -> collection object of every collection ``saver`` stores checkpoints
    into (mongo-ckpt's layout-version document is per database, not per thread)."""
    if isinstance(saver, MongoDBSaver):
        return {name: saver.collections[name] for name in (CHECKPOINTS, BLOBS, WRITES)}
    return {name: getattr(saver, attr) for name, attr in _OFFICIAL_COLLECTIONS.items()}


def wrap_collections(saver: BaseCheckpointSaver, wrap: Callable[[str, Any], Any]) -> None:
    """Replace each collection ``c`` of ``saver`` (logical name ``n``) by ``wrap(n, c)``."""
    if isinstance(saver, MongoDBSaver):
        for name, coll in list(saver.collections.items()):
            saver.collections[name] = wrap(name, coll)
        return
    for name, attr in _OFFICIAL_COLLECTIONS.items():
        setattr(saver, attr, wrap(name, getattr(saver, attr)))


def count_saver_calls(saver: BaseCheckpointSaver) -> Counter:
    """Wrap the collections of ``saver`` in place; the counter fills as they are called."""
    counter: Counter = Counter()
    wrap_collections(saver, lambda name, coll: CountingCollection(coll, name, counter))
    return counter


@dataclass(frozen=True)
class Footprint:
    """Stored size of one collection: sum of ``len(bson.encode(doc))`` over its documents."""

    docs: int
    bytes: int
    largest: int


def footprint(collection: Any, query: dict[str, Any] | None = None) -> Footprint:
    sizes = [len(bson.encode(doc)) for doc in collection.find(query or {})]
    return Footprint(len(sizes), sum(sizes), max(sizes, default=0))


def saver_footprint(
    saver: BaseCheckpointSaver, thread_id: str | None = None
) -> dict[str, Footprint]:
    """Footprint per logical collection of ``saver`` (of one thread, if given)."""
    query = None if thread_id is None else {"thread_id": thread_id}
    return {name: footprint(coll, query) for name, coll in saver_collections(saver).items()}


def total_bytes(footprints: dict[str, Footprint]) -> int:
    return sum(f.bytes for f in footprints.values())


def converse(
    saver: BaseCheckpointSaver,
    turns: int,
    variant: str = PLAIN,
    thread_id: str = "conversation",
    snapshot_frequency: int = SNAPSHOT_FREQUENCY,
) -> Any:
    """Run ``turns`` turns on one thread; returns the compiled graph."""
    graph = chat_graph(saver, variant, snapshot_frequency)
    for turn in range(turns):
        run_turn(graph, thread_id, turn)
    return graph
