"""Optional OpenTelemetry tracing: one span per saver and store operation.

A saver or store decides once, when it is created, whether to trace: only when
``opentelemetry-api`` is installed and a tracer provider is configured (passed in
``Tracing``, or set globally with ``trace.set_tracer_provider``). Otherwise it gets
no ``OperationTracer`` and runs its operations unwrapped.

A traced operation sits between the driver and the operation generator: it relays
each step (``calls.Relay``: each result sent back, each failed call's error thrown back
in), counting calls and BSON bytes on the way.

A failed operation's span carries the error's message and traceback, which may name
threads and store namespaces (``MissingValueError``, ``StaleParentError``, a server's
duplicate-key report...). With ``identifiers="hash"`` or ``"omit"`` every thread id and
namespace the operation or the error names is replaced there as in the attributes (by its
hash, or by ``<omitted>``), and every MongoDB URI loses its credentials.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args

import bson

from mongo_ckpt.calls import Call, NextBatch, Operation, Relay
from mongo_ckpt.redaction import redacted

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

T = TypeVar("T")
Identifiers = Literal["plain", "hash", "omit"]
IDENTIFIERS_ENV = "MONGO_CKPT_OTEL_IDENTIFIERS"
HASH_KEY_ENV = "MONGO_CKPT_OTEL_HASH_KEY"
HASH_DIGITS = 16
OMITTED = "<omitted>"
_WRITE_METHODS = ("bulk_write", "update_one")


@dataclass(frozen=True)
class Tracing:
    """How a saver or store traces its operations (the ``tracing=`` argument).

    ``tracer_provider``: where spans go; default OpenTelemetry's global provider.
    ``identifiers``: how thread ids and store namespaces appear in spans: ``"plain"``,
    ``"hash"`` (HMAC-SHA256 with ``hash_key``, first 16 hex digits: the same id always
    gives the same value) or ``"omit"``. Defaults: ``$MONGO_CKPT_OTEL_IDENTIFIERS``
    (else ``"plain"``) and ``$MONGO_CKPT_OTEL_HASH_KEY`` (else no key: plain SHA-256).
    """

    tracer_provider: TracerProvider | None = None
    identifiers: Identifiers | None = None
    hash_key: bytes | str | None = None

    def __post_init__(self) -> None:
        choice = self.identifiers or os.environ.get(IDENTIFIERS_ENV) or "plain"
        if choice not in get_args(Identifiers):
            source = "identifiers" if self.identifiers else f"${IDENTIFIERS_ENV}"
            raise ValueError(
                f"{source} must be one of {', '.join(get_args(Identifiers))}; got {choice!r}"
            )
        object.__setattr__(self, "identifiers", choice)
        key = self.hash_key if self.hash_key is not None else os.environ.get(HASH_KEY_ENV, "")
        object.__setattr__(self, "hash_key", key.encode() if isinstance(key, str) else key)

    def tracer(self, db_name: str) -> OperationTracer | None:
        """The tracer for a saver or store on ``db_name``; ``None`` when spans would go nowhere."""
        try:
            from opentelemetry import trace
        except ImportError:
            return None
        provider = self.tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None  # no provider configured: every span would be dropped
        tracer = provider.get_tracer("mongo_ckpt")
        if isinstance(tracer, trace.NoOpTracer):  # e.g. the SDK with OTEL_SDK_DISABLED=true
            return None
        return OperationTracer(tracer, self, db_name)


def operation_tracer(tracing: Tracing | None, db_name: str) -> OperationTracer | None:
    """The tracer of a saver or store created with ``tracing=`` on ``db_name``, if it traces."""
    if tracing is None:
        tracing = Tracing()
    elif not isinstance(tracing, Tracing):
        raise TypeError(
            "tracing must be a mongo_ckpt.telemetry.Tracing, e.g. Tracing(tracer_provider); "
            f"got {type(tracing).__name__}"
        )
    return tracing.tracer(db_name)


@dataclass(frozen=True)
class SpanInfo:
    """What the caller of an operation says its span shows: the name (``get_tuple``,
    ``store.search``...), the thread and namespace it works on, the other threads it
    names (a copy's target, a prune's threads) and the store namespaces."""

    name: str
    thread_id: Any = None
    checkpoint_ns: Any = None
    thread_ids: Sequence[Any] = ()
    namespaces: Iterable[Sequence[str]] = ()

    @classmethod
    def of_config(cls, name: str, config: Any) -> SpanInfo:
        """The span of an operation on ``config`` (an invalid one too: the operation
        itself refuses it)."""
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        if not isinstance(configurable, Mapping) or not configurable:
            return cls(name)
        return cls(name, configurable.get("thread_id"), configurable.get("checkpoint_ns", ""))


class OperationTracer:
    """Wraps operations in spans; made by ``Tracing.tracer``."""

    def __init__(self, tracer: Tracer, tracing: Tracing, db_name: str) -> None:
        self._tracer = tracer
        self._tracing = tracing
        self._db_name = db_name

    def identifier(self, value: Any) -> str | None:
        """A thread id or namespace as ``Tracing.identifiers`` says spans show it."""
        if self._tracing.identifiers == "omit":
            return None
        if self._tracing.identifiers == "hash":
            key, data = cast(bytes, self._tracing.hash_key), str(value).encode()
            digest = hmac.new(key, data, hashlib.sha256) if key else hashlib.sha256(data)
            return digest.hexdigest()[:HASH_DIGITS]
        return str(value)

    def scrubbed(
        self, text: str, thread_ids: Iterable[Any], namespaces: Iterable[Sequence[str]]
    ) -> str:
        """``text`` (an error message, a traceback) without credentials and, unless
        identifiers are ``"plain"``, with each of ``thread_ids`` and ``namespaces`` (as
        written, quoted, escaped, joined or label by label) replaced as spans show them."""
        text = redacted(text)
        if self._tracing.identifiers == "plain":
            return text
        shown: dict[str, str] = {}
        for namespace in namespaces:
            labels = [str(label) for label in namespace]
            whole = self.identifier(".".join(labels)) or OMITTED
            for form in (repr(tuple(labels)), repr(labels), json.dumps(labels), ".".join(labels)):
                shown[form] = whole
            for label in labels:
                shown.update(dict.fromkeys(_forms(label), self.identifier(label) or OMITTED))
        for thread_id in thread_ids:
            replacement = self.identifier(thread_id) or OMITTED
            shown.update(dict.fromkeys(_forms(str(thread_id)), replacement))
        shown.pop("", None)
        if not shown:
            return text
        # One pass, longest first: a replacement is never searched again.
        pattern = re.compile("|".join(map(re.escape, sorted(shown, key=len, reverse=True))))
        return pattern.sub(lambda match: shown[match.group()], text)

    def traced(
        self,
        name: str,
        operation: Operation[T],
        *,
        thread_id: Any = None,
        checkpoint_ns: Any = None,
        namespaces: Iterable[Sequence[str]] = (),
        thread_ids: Iterable[Any] = (),
    ) -> Operation[T]:
        """``operation`` in a span named ``name`` (started when the driver starts it).

        ``thread_ids``: further threads the operation names (a copy's target, a prune's
        threads), which its error messages may quote."""
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "db.system.name": "mongodb",
            "db.namespace": self._db_name,
            "db.operation.name": name.rsplit(".", 1)[-1],
        }
        if thread_id is not None and (shown := self.identifier(thread_id)) is not None:
            attributes["mongo_ckpt.thread_id"] = shown
        if checkpoint_ns is not None:
            attributes["mongo_ckpt.checkpoint_ns"] = str(checkpoint_ns)
        namespaces = [tuple(namespace) for namespace in namespaces]
        labels = {self.identifier(".".join(namespace)) for namespace in namespaces} - {None}
        if labels:
            attributes["mongo_ckpt.store.namespaces"] = sorted(str(label) for label in labels)
        named = [t for t in (thread_id, *thread_ids) if t is not None]

        def scrub(text: str, error: BaseException) -> str:
            return self.scrubbed(text, [*named, *_threads_named(error)], namespaces)

        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        counts = _Counts()
        relay = Relay(operation)
        try:
            while (step := relay.next_step()) is not None:
                counts.sent(step)
                try:
                    result = yield step
                except Exception as exc:  # the call failed: the operation may handle it
                    relay.failed(exc)
                else:
                    counts.received(step, result)
                    relay.returned(result)
            return relay.value
        except Exception as exc:
            _failed(span, exc, scrub)
            raise
        finally:
            operation.close()  # an abandoned iteration (GeneratorExit) closes the operation
            span.set_attributes(counts.attributes())
            span.end()


class _Counts:
    """What an operation cost: calls, cursor batches and BSON bytes each way."""

    def __init__(self) -> None:
        self.round_trips = self.batches = self.written = self.read = 0

    def sent(self, step: Any) -> None:
        if isinstance(step, Call):
            self.round_trips += 1
            if step.method in _WRITE_METHODS:
                self.written += _written(step)
        elif isinstance(step, NextBatch):
            self.batches += 1

    def received(self, step: Any, result: Any) -> None:
        if isinstance(step, NextBatch) or (
            isinstance(step, Call) and step.method in ("find", "aggregate") and not step.stream
        ):
            self.read += sum(len(bson.encode(doc)) for doc in result)

    def attributes(self) -> dict[str, int]:
        return {
            "mongo_ckpt.round_trips": self.round_trips,
            "mongo_ckpt.cursor_batches": self.batches,
            "mongo_ckpt.bytes_written": self.written,
            "mongo_ckpt.bytes_read": self.read,
        }


def _written(call: Call) -> int:
    """BSON bytes of the documents and updates a write call sends."""
    if call.method == "update_one":
        return _size(call.args[1])
    # PyMongo's write models keep their document or update in ``_doc`` (no public accessor);
    # deletes have none.
    return sum(_size(getattr(request, "_doc", None)) for request in call.args[0])


def _size(document: Any) -> int:
    if isinstance(document, Mapping):
        return len(bson.encode(document))
    if isinstance(document, Sequence) and not isinstance(document, str):  # pipeline update
        return len(bson.encode({str(i): stage for i, stage in enumerate(document)}))
    return 0


def _forms(identifier: str) -> list[str]:
    """How a message may write ``identifier``: as is, escaped by ``repr``, by JSON."""
    return [identifier, repr(identifier)[1:-1], json.dumps(identifier)[1:-1]]


def _threads_named(error: BaseException) -> list[str]:
    """Thread ids carried by ``error`` and the errors it was raised from: the library's
    errors' ``thread_id``, the ``keyValue`` of a server's duplicate-key report."""
    found: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        thread_id = getattr(current, "thread_id", None)
        if thread_id is not None:
            found.append(str(thread_id))
        details = getattr(current, "details", None)
        reports = [details] if isinstance(details, Mapping) else []
        for report in list(reports):
            reports += [e for e in report.get("writeErrors") or () if isinstance(e, Mapping)]
        for report in reports:
            key = report.get("keyValue")
            if isinstance(key, Mapping) and key.get("thread_id") is not None:
                found.append(str(key["thread_id"]))
        pending += [current.__cause__, current.__context__]
    return found


def _failed(span: Span, error: Exception, scrub: Callable[[str, BaseException], str]) -> None:
    """Mark ``span`` failed with ``error``: the ``exception`` event (as the SDK's
    ``record_exception`` writes it) and the status, their text passed through ``scrub``."""
    from opentelemetry.trace import Status, StatusCode

    stacktrace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    span.add_event(
        "exception",
        {
            "exception.type": type(error).__name__,
            "exception.message": scrub(str(error), error),
            "exception.stacktrace": scrub(stacktrace, error),
            "exception.escaped": "False",
        },
    )
    span.set_attribute("error.type", f"{type(error).__module__}.{type(error).__qualname__}")
    span.set_status(Status(StatusCode.ERROR, scrub(f"{type(error).__name__}: {error}", error)))
