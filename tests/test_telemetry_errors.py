"""With ``Tracing(identifiers="omit")`` or ``"hash"``, a failed operation's span names no
thread and no store namespace in clear: not in its attributes, not in its ``exception``
event (message and traceback), not in its status. Every error the library raises with a
thread id or namespace in its message is raised under each mode, and every span scanned."""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timezone
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import InvalidNamespaceError
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from mongo_ckpt import MissingHistoryError, MongoDBSaver
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.maintenance import DOOMED, DOOMED_AT, StaleParentError
from mongo_ckpt.reading import MissingValueError
from mongo_ckpt.store import MongoDBStore
from mongo_ckpt.telemetry import OMITTED, Tracing
from tests.delta_graphs import CHANNEL, Shape, builder
from tests.graphs import thread

THREAD = "alice@example.com/42"
OTHER = "bob's \x1b thread"  # quoted and escaped differently by repr and by JSON
LABEL = "carol-secret-label"
KEY = "k"
PASSWORD = "s3cr3t-pw"
SHAPE = Shape(snapshot_frequency=100, writers=1, subgraph=False, durability="sync")


class Name(str):
    """A str subclass: refused as a thread id, with the id in the message."""


def _hash(value: str) -> str:
    return hmac.new(KEY.encode(), value.encode(), hashlib.sha256).hexdigest()[:16]


def _put(saver: MongoDBSaver, thread_id: str, parent: str | None = None, **metadata: Any) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": "value"}
    checkpoint["channel_versions"] = {"v": saver.get_next_version(None, None)}
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent
    return saver.put(config, checkpoint, {"step": 0, **metadata}, checkpoint["channel_versions"])


def raise_every_error(saver: MongoDBSaver, store: MongoDBStore) -> list[type[BaseException]]:
    """Each library error naming a thread, raised inside a span; their types."""
    raised: list[type[BaseException]] = []

    def expect(error: type[BaseException], call: Any, *args: Any) -> None:
        with pytest.raises(error):
            call(*args)
        raised.append(error)

    raw = saver.collections
    # A value's documents are missing: by thread, and listing every thread.
    config = _put(saver, THREAD)
    raw[BLOBS].delete_many({"thread_id": THREAD})
    expect(MissingValueError, saver.get_tuple, config)
    expect(MissingValueError, lambda: list(saver.list(None)))
    # A put continues from a checkpoint being deleted.
    parent = _put(saver, OTHER)
    parent_id = parent["configurable"]["checkpoint_id"]
    raw[CHECKPOINTS].update_one(
        {"thread_id": OTHER}, {"$set": {DOOMED: "token", DOOMED_AT: datetime.now(timezone.utc)}}
    )
    expect(StaleParentError, _put, saver, OTHER, parent_id)
    # The checkpoint document would be over the size limit.
    # (Stored twice: plain BSON would give the int64 back as ``bson.Int64``.)
    expect(ValueError, lambda: _put(saver, OTHER, blob="x" * (8 * 2**20), wide=2**40))
    # A str subclass as thread id.
    expect(TypeError, saver.put_writes, thread(Name(THREAD), checkpoint_id="c"), [("a", 1)], "t")
    # A DeltaChannel's history lost an ancestor.
    graph = builder(SHAPE, delta=True).compile(checkpointer=saver)
    for n in range(3):
        graph.invoke({CHANNEL: [HumanMessage(f"q{n}")]}, thread(OTHER + "-delta"))
    history = list(graph.get_state_history(thread(OTHER + "-delta")))
    middle = history[len(history) // 2].config["configurable"]["checkpoint_id"]
    raw[CHECKPOINTS].delete_one({"thread_id": OTHER + "-delta", "checkpoint_id": middle})
    expect(MissingHistoryError, graph.get_state, thread(OTHER + "-delta"))
    # Maintenance naming several threads, and a copy's target.
    expect(TypeError, saver.prune, [THREAD, Name(OTHER)])
    expect(TypeError, saver.copy_thread, THREAD, Name(OTHER))
    # Store namespaces are refused before a span starts: nothing to record.
    with pytest.raises(InvalidNamespaceError):
        store.put(("users", LABEL, ""), "k", {"a": 1})
    with pytest.raises(TypeError):
        store.put(("users", LABEL), "k", "not a dict")  # type: ignore[arg-type]
    return raised


def scanned(spans: list[ReadableSpan]) -> tuple[str, int]:
    """Everything the spans carry, as one text, and how many items that is."""
    items: list[str] = []
    for span in spans:
        items += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            items.append(event.name)
            items += [f"{k}={v}" for k, v in (event.attributes or {}).items()]
        items.append(str(span.status.description))
    return "\n".join(items), len(items)


@pytest.mark.parametrize("identifiers", ["omit", "hash"])
def test_failed_spans_name_no_thread_or_namespace(
    client: Any, db_name: str, identifiers: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider, identifiers=identifiers, hash_key=KEY)  # type: ignore[arg-type]
    saver = MongoDBSaver(client, db_name, tracing=tracing)
    store = MongoDBStore.from_saver(saver, tracing=tracing)
    try:
        raised = raise_every_error(saver, store)
    finally:
        client.drop_database(db_name)
    failed = [s for s in exporter.get_finished_spans() if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == len(raised) == 8
    assert {e.attributes["exception.type"] for s in failed for e in s.events} == {
        error.__name__ for error in raised
    }
    text, items = scanned(exporter.get_finished_spans())
    assert items > 100
    for secret in (THREAD, OTHER, repr(OTHER)[1:-1], LABEL, "alice@", "bob's"):
        assert secret not in text, secret
    replaced = OMITTED if identifiers == "omit" else _hash(THREAD)
    messages = [s.status.description or "" for s in failed]
    # named in the message, and replaced there: get_tuple, list, put_writes
    assert sum(replaced in m for m in messages) >= 3
    if identifiers == "hash":  # stale parent, document size, prune, copy_thread
        assert sum(_hash(OTHER) in m for m in messages) == 4


def test_plain_spans_keep_the_message_without_credentials(client: Any, db_name: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saver = MongoDBSaver(client, db_name, tracing=Tracing(provider, identifiers="plain"))
    uri = f"mongodb://admin:{PASSWORD}@db.example:27017/"
    try:
        with pytest.raises(TypeError):
            saver.put_writes(thread(Name(uri), checkpoint_id="c"), [("a", 1)], "t")
    finally:
        client.drop_database(db_name)
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert span.attributes["mongo_ckpt.thread_id"] == uri  # "plain" shows ids as they are
    for text in (span.status.description, *map(str, event.attributes.values())):
        assert PASSWORD not in text
    assert "mongodb://admin:***@db.example:27017/" in span.status.description


@pytest.mark.parametrize("identifiers", ["omit", "hash"])
def test_namespaces_and_threads_are_replaced_in_every_form(identifiers: str) -> None:
    provider = TracerProvider()
    tracer = Tracing(provider, identifiers=identifiers, hash_key=KEY).tracer("db")  # type: ignore[arg-type]
    assert tracer is not None
    namespace = ("users", LABEL)
    text = (
        f"namespace {namespace!r} / {list(namespace)!r} / users.{LABEL} / label {LABEL!r}; "
        f"thread {OTHER!r}, as JSON \"bob's \\u001b thread\", at mongodb://u:{PASSWORD}@h/"
    )
    out = tracer.scrubbed(text, [OTHER], [namespace])
    for secret in (LABEL, "bob's", PASSWORD):
        assert secret not in out, out
    if identifiers == "hash":
        whole = _hash(f"users.{LABEL}")
        assert out.count(whole) == 3 and _hash(LABEL) in out and out.count(_hash(OTHER)) == 2
    else:
        assert out.count(OMITTED) == 6
    assert "mongodb://u:***@h/" in out
