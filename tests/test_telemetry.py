"""OpenTelemetry spans of real graph runs: one per saver and store operation, with the
thread, namespace, round trips and bytes; error spans; and no wrapping without a provider."""

from __future__ import annotations

import hashlib
import hmac
import sys
from collections.abc import Iterator
from operator import add
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, PutOp
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pymongo.errors import AutoReconnect

from mongo_ckpt import MongoDBSaver, telemetry
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from mongo_ckpt.telemetry import Tracing
from tests.backends import count_calls, total
from tests.faults import ByteCounter, Fault, Faults, issuing_line
from tests.graphs import thread
from tests.prose import prose
from tests.saver_support import Api
from tests.store_support import DIMS, FakeEmbeddings

NOTE = prose("note", 10_000)  # a value big enough to see in the byte counts, even compressed


class Turn(TypedDict, total=False):
    user: str
    text: str
    notes: int


def take_note(state: Turn, runtime: Runtime) -> dict[str, Any]:
    """Stores the turn's text under the user and answers with how many notes there are."""
    assert runtime.store is not None
    namespace = ("users", state["user"])
    runtime.store.put(namespace, str(len(state["text"])), {"text": state["text"]})
    return {"notes": len(runtime.store.search(namespace))}


def note_graph() -> StateGraph:
    builder = StateGraph(Turn)
    builder.add_node("take_note", take_note)
    builder.add_edge(START, "take_note")
    builder.add_edge("take_note", END)
    return builder


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider)


def traced(api: Api, tracing: Tracing) -> tuple[Api, Any]:
    """``api`` on a saver, and a store on the same database, tracing to ``tracing``."""
    api = api.reopened(tracing=tracing)
    store_class = AsyncMongoDBStore if api.is_async else MongoDBStore
    return api, store_class.from_saver(api.saver, tracing=tracing)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def values(exporter: InMemorySpanExporter, name: str, attribute: str) -> list[Any]:
    return [span.attributes[attribute] for span in named(exporter, name)]


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = named(exporter, name)
    return span


# -- a graph run: names, attributes, round trips ------------------------------


async def test_graph_run_spans(api: Api, tracing: Tracing, exporter: InMemorySpanExporter) -> None:
    api, store = traced(api, tracing)
    saver_calls = count_calls(api.saver.collections)
    store_calls = count_calls(store.collections)
    graph = api.compile(note_graph(), store=store)
    for text in ("first", NOTE):
        result = await api.invoke(graph, {"user": "ada", "text": text}, thread("t1"))
    assert result["notes"] == 2

    spans = exporter.get_finished_spans()
    assert {span.name for span in spans} == {
        "mongo_ckpt.get_tuple",
        "mongo_ckpt.put",
        "mongo_ckpt.put_writes",
        "mongo_ckpt.store.put",
        "mongo_ckpt.store.search",
    }
    for span in spans:
        assert span.attributes["db.system.name"] == "mongodb"
        assert span.attributes["db.namespace"] == api.saver.db.name
        assert span.name.endswith("." + span.attributes["db.operation.name"])
        assert span.status.status_code is StatusCode.UNSET
        if span.name.startswith("mongo_ckpt.store."):
            assert span.attributes["mongo_ckpt.store.namespaces"] == ("users.ada",)
        else:
            assert span.attributes["mongo_ckpt.thread_id"] == "t1"
            assert span.attributes["mongo_ckpt.checkpoint_ns"] == ""
    # Every call the collections saw is counted once, in the span of its operation.
    saver_spans = [s for s in spans if not s.name.startswith("mongo_ckpt.store.")]
    assert sum(s.attributes["mongo_ckpt.round_trips"] for s in saver_spans) == total(saver_calls)
    store_spans = [s for s in spans if s.name.startswith("mongo_ckpt.store.")]
    assert sum(s.attributes["mongo_ckpt.round_trips"] for s in store_spans) == total(store_calls)

    # The note itself went out in the put that stored it, and came back in the search. A
    # put also sends its namespace's registry entry: an update pipeline of about 400 bytes.
    put_bytes = [
        s.attributes["mongo_ckpt.bytes_written"] for s in named(exporter, "mongo_ckpt.store.put")
    ]
    assert put_bytes[0] < 1_500 < len(NOTE) < put_bytes[1] < len(NOTE) + 1_500
    search_bytes = [
        s.attributes["mongo_ckpt.bytes_read"] for s in named(exporter, "mongo_ckpt.store.search")
    ]
    assert search_bytes[0] < 1_000 < len(NOTE) < search_bytes[1] < len(NOTE) + 2_000
    # The graph's state holds the text too: the checkpoint of the second turn carries it,
    # compressed, which leaves more than half of words like these.
    assert max(
        s.attributes["mongo_ckpt.bytes_written"] for s in named(exporter, "mongo_ckpt.put")
    ) > len(NOTE) // 2

    # Once set up, one span's round trips are exactly the calls its operation made.
    for name, call in (
        ("get_tuple", api.get_tuple(thread("t1"))),
        ("list", api.list(thread("t1"))),
    ):
        exporter.clear()
        saver_calls.clear()
        await call
        span = only(exporter, f"mongo_ckpt.{name}")
        assert span.attributes["mongo_ckpt.round_trips"] == total(saver_calls) > 0
    assert span.attributes["mongo_ckpt.cursor_batches"] >= 1
    assert span.attributes["mongo_ckpt.bytes_read"] > len(NOTE)


def test_bytes_read_are_the_documents_returned(
    saver: MongoDBSaver, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    api, store = traced(Api(saver), tracing)
    graph = api.compile(note_graph(), store=store)
    graph.invoke({"user": "ada", "text": NOTE}, thread("t1"))
    saver_bytes, store_bytes = ByteCounter(api.saver.collections), ByteCounter(store.collections)
    exporter.clear()
    graph.get_state(thread("t1"))
    store.get(("users", "ada"), str(len(NOTE)))
    assert only(exporter, "mongo_ckpt.get_tuple").attributes["mongo_ckpt.bytes_read"] == (
        saver_bytes.bytes
    )
    assert only(exporter, "mongo_ckpt.store.get").attributes["mongo_ckpt.bytes_read"] == (
        store_bytes.bytes
    )
    # The checkpointer's copy is compressed, the store's is not.
    assert saver_bytes.bytes > len(NOTE) // 2 and store_bytes.bytes > len(NOTE)


def test_every_store_method_names_its_span(
    make_store: Any, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    store = make_store(tracing=tracing)
    store.setup()
    store.put(("users", "ada"), "a", {"x": 1})
    store.get(("users", "ada"), "a")
    store.search(("users",))
    store.list_namespaces(prefix=("users",))
    store.delete(("users", "ada"), "a")
    store.batch([GetOp(("users", "ada"), "a"), PutOp(("docs",), "d", {"y": 2})])
    spans = exporter.get_finished_spans()
    assert [span.name.removeprefix("mongo_ckpt.store.") for span in spans] == [
        "setup",
        "put",
        "get",
        "search",
        "list_namespaces",
        "delete",
        "batch",
    ]
    assert [span.attributes.get("mongo_ckpt.store.namespaces") for span in spans] == [
        None,
        ("users.ada",),
        ("users.ada",),
        ("users",),
        None,
        ("users.ada",),
        ("docs", "users.ada"),
    ]


def test_every_saver_method_names_its_span(
    saver: MongoDBSaver, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    api = Api(saver).reopened(tracing=tracing)
    calls = count_calls(api.saver.collections)
    api.saver.setup()
    setup = only(exporter, "mongo_ckpt.setup")
    assert setup.attributes["mongo_ckpt.round_trips"] == total(calls) > 0
    api.compile(_counter_graph()).invoke({"count": 1}, thread("t1"))
    exporter.clear()
    api.saver.copy_thread("t1", "t2")
    api.saver.get_delta_channel_history(config=thread("t2"), channels=["count"])
    api.saver.prune(["t2"], strategy="keep_latest")
    api.saver.delete_for_runs(["no-such-run"])
    api.saver.delete_thread("t2")
    spans = exporter.get_finished_spans()
    assert [(s.name, s.attributes.get("mongo_ckpt.thread_id")) for s in spans] == [
        ("mongo_ckpt.copy_thread", "t1"),
        ("mongo_ckpt.get_delta_channel_history", "t2"),
        ("mongo_ckpt.prune", None),
        ("mongo_ckpt.delete_for_runs", None),
        ("mongo_ckpt.delete_thread", "t2"),
    ]


# -- errors -------------------------------------------------------------------


async def test_failed_call_span(api: Api, tracing: Tracing, exporter: InMemorySpanExporter) -> None:
    api = api.reopened(tracing=tracing)
    graph = api.compile(_counter_graph())
    await api.invoke(graph, {"count": 1}, thread("t1"))
    faults = Faults(api.saver.collections)
    faults.arm(Fault(call=0, mode="before"))
    exporter.clear()
    with pytest.raises(AutoReconnect, match="injected") as failure:
        await api.invoke(graph, {"count": 1}, thread("t1"))
    # Thrown back through the span into the operation: the traceback still names its line.
    line = issuing_line(failure.value)
    assert '"aggregate"' in line
    span = exporter.get_finished_spans()[0]
    assert span.name == "mongo_ckpt.get_tuple"
    assert span.status.status_code is StatusCode.ERROR
    assert "AutoReconnect" in span.status.description
    assert span.attributes["error.type"] == "pymongo.errors.AutoReconnect"
    assert span.attributes["mongo_ckpt.round_trips"] == 1
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes["exception.type"].endswith("AutoReconnect")

    faults.arm(None)  # the thread goes on where it was
    assert (await api.invoke(graph, {"count": 1}, thread("t1")))["count"] == 2


class Count(TypedDict):
    count: Annotated[int, add]


def _counter_graph() -> StateGraph:
    builder = StateGraph(Count)
    builder.add_node("keep", lambda state: {})
    builder.add_edge(START, "keep")
    builder.add_edge("keep", END)
    return builder


async def test_an_error_the_operation_handles_leaves_the_span_ok(
    make_astore: Any, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    # Asking for a vector index fails without Atlas Search; setup catches that (thrown
    # back into it through the span) and goes on with exact search.
    store = make_astore(index={"dims": DIMS, "embed": FakeEmbeddings()}, tracing=tracing)
    await store.aput(("docs",), "a", {"text": "hello"})
    assert (await store.asearch(("docs",), query="hi"))[0].key == "a"
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["mongo_ckpt.store.put", "mongo_ckpt.store.search"]
    assert all(span.status.status_code is StatusCode.UNSET for span in spans)
    assert store.ops.vector_search is False


def test_bad_input_span(saver: MongoDBSaver, tracing: Tracing, exporter: Any) -> None:
    traced_saver = MongoDBSaver(saver.client, saver.db.name, tracing=tracing)
    with pytest.raises(ValueError, match="checkpoint_id"):
        traced_saver.put_writes(thread("t1"), [("a", 1)], "task")
    span = only(exporter, "mongo_ckpt.put_writes")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "builtins.ValueError"
    assert span.attributes["mongo_ckpt.bytes_written"] == 0


def test_an_abandoned_listing_ends_its_span(
    saver: MongoDBSaver, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    api = Api(saver).reopened(tracing=tracing)
    graph = api.compile(_counter_graph())
    for _ in range(3):
        graph.invoke({"count": 1}, thread("t1"))
    exporter.clear()
    listing = api.saver.list(thread("t1"))
    assert next(listing).checkpoint["channel_values"]["count"] == 3
    assert not exporter.get_finished_spans()
    listing.close()
    span = only(exporter, "mongo_ckpt.list")
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes["mongo_ckpt.cursor_batches"] == 1


# -- identifiers --------------------------------------------------------------

# Letters outside hexadecimal, so neither can turn up by chance inside a
# checkpoint id or a hash among the attributes.
THREAD = "thread-quokka"
USER = "wombat"


def names_in(spans: Any) -> set[str]:
    """The identifiers of the traced invocation that some span attribute shows."""
    shown = " ".join(str(value) for s in spans for value in (s.attributes or {}).values())
    return {name for name in (THREAD, USER) if name in shown}


@pytest.mark.parametrize("source", ["argument", "environment"])
def test_hashed_identifiers(
    saver: MongoDBSaver,
    exporter: InMemorySpanExporter,
    tracing: Tracing,
    source: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if source == "argument":
        hashing = Tracing(tracing.tracer_provider, identifiers="hash", hash_key="k")
    else:
        monkeypatch.setenv(telemetry.IDENTIFIERS_ENV, "hash")
        monkeypatch.setenv(telemetry.HASH_KEY_ENV, "k")
        hashing = Tracing(tracing.tracer_provider)
    api, store = traced(Api(saver), hashing)
    api.compile(note_graph(), store=store).invoke({"user": USER, "text": "x"}, thread(THREAD))
    spans = exporter.get_finished_spans()
    expected = hmac.new(b"k", THREAD.encode(), hashlib.sha256).hexdigest()[:16]
    assert {s.attributes.get("mongo_ckpt.thread_id") for s in spans} == {expected, None}
    namespace = hmac.new(b"k", f"users.{USER}".encode(), hashlib.sha256).hexdigest()[:16]
    assert {s.attributes.get("mongo_ckpt.store.namespaces") for s in spans} == {
        (namespace,),
        None,
    }
    assert not names_in(spans)


def test_hashed_identifiers_without_a_key_are_sha256(
    saver: MongoDBSaver, exporter: InMemorySpanExporter, tracing: Tracing
) -> None:
    traced_saver = MongoDBSaver(
        saver.client, saver.db.name, tracing=Tracing(tracing.tracer_provider, identifiers="hash")
    )
    traced_saver.delete_thread("t1")
    expected = hashlib.sha256(b"t1").hexdigest()[:16]
    assert only(exporter, "mongo_ckpt.delete_thread").attributes["mongo_ckpt.thread_id"] == (
        expected
    )


def test_omitted_identifiers(
    saver: MongoDBSaver, exporter: InMemorySpanExporter, tracing: Tracing
) -> None:
    api, store = traced(Api(saver), Tracing(tracing.tracer_provider, identifiers="omit"))
    api.compile(note_graph(), store=store).invoke({"user": USER, "text": "x"}, thread(THREAD))
    spans = exporter.get_finished_spans()
    assert spans
    assert not names_in(spans)


def test_bad_identifiers_setting(monkeypatch: pytest.MonkeyPatch, client: Any) -> None:
    with pytest.raises(ValueError, match="identifiers must be one of plain, hash, omit"):
        Tracing(identifiers="hashed")  # type: ignore[arg-type]
    monkeypatch.setenv(telemetry.IDENTIFIERS_ENV, "secret")
    with pytest.raises(ValueError, match="MONGO_CKPT_OTEL_IDENTIFIERS must be one of"):
        MongoDBSaver(client)


def test_a_provider_in_place_of_tracing_is_refused(
    client: Any, tracing: Tracing, make_store: Any
) -> None:
    with pytest.raises(TypeError, match=r"Tracing\(tracer_provider\); got TracerProvider"):
        MongoDBSaver(client, tracing=tracing.tracer_provider)
    with pytest.raises(TypeError, match="tracing must be a mongo_ckpt.telemetry.Tracing"):
        make_store(tracing=tracing.tracer_provider)


# -- no cost without a provider or without OpenTelemetry ----------------------


@pytest.fixture
def no_wrapping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fails any test in which an operation gets wrapped in a span."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an operation was wrapped for tracing")

    monkeypatch.setattr(telemetry.OperationTracer, "traced", refuse)
    yield


async def check_untraced_graph_run(api: Api) -> None:
    api, store = traced(api, Tracing())
    assert api.saver._tracer is None and store._tracer is None
    graph = api.compile(note_graph(), store=store)
    result = await api.invoke(graph, {"user": "ada", "text": "x"}, thread("t1"))
    assert result["notes"] == 1


async def test_no_provider_no_wrapping(api: Api, no_wrapping: None) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    await check_untraced_graph_run(api)


async def test_without_opentelemetry_no_wrapping(
    saver: MongoDBSaver, no_wrapping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails as if not installed
    await check_untraced_graph_run(Api(saver))


async def test_a_disabled_sdk_no_wrapping(
    saver: MongoDBSaver, no_wrapping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    api, store = traced(Api(saver), Tracing(TracerProvider()))
    assert api.saver._tracer is None and store._tracer is None
    await api.invoke(api.compile(_counter_graph()), {"count": 1}, thread("t"))


def test_the_global_provider_is_used_when_set(
    saver: MongoDBSaver,
    tracing: Tracing,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracing.tracer_provider)
    api = Api(MongoDBSaver(saver.client, saver.db.name))
    api.compile(_counter_graph()).invoke({"count": 1}, thread("t1"))
    assert {span.name for span in exporter.get_finished_spans()} >= {
        "mongo_ckpt.get_tuple",
        "mongo_ckpt.put",
    }
