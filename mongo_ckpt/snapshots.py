"""Pure descriptions of stored checkpoints for the command line: the nodes a checkpoint
runs next, history rows with their stored size, channel diffs and JSON-safe values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from mongo_ckpt.checkpoint_fields import stored_checkpoint, stored_metadata
from mongo_ckpt.inspection import document_size
from mongo_ckpt.layout import BLOB_KEY
from mongo_ckpt.reading import Key, key_of

START = "__start__"
BRANCH_PREFIX = "branch:to:"


def next_nodes(checkpoint: Checkpoint, available: Collection[str]) -> list[str]:
    """The nodes LangGraph runs from ``checkpoint``: those whose trigger channel
    (``__start__``, ``branch:to:<node>``) holds a value (is in ``available``) of a version
    the node has not seen yet."""
    seen = checkpoint.get("versions_seen") or {}
    nodes = []
    for channel, version in (checkpoint.get("channel_versions") or {}).items():
        node = channel.removeprefix(BRANCH_PREFIX)  # ``__start__`` triggers itself
        if channel not in available or node == channel != START:
            continue
        last_seen = (seen.get(node) or {}).get(channel)
        if last_seen is None or _version_key(last_seen) < _version_key(version):
            nodes.append(node)
    return sorted(nodes)


def channel_values(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The state a checkpoint's stored ``channel_values`` hold: a DeltaChannel's snapshot
    (LangGraph's ``_DeltaSnapshot`` wrapper) as the value it wraps."""
    return {c: v.value if isinstance(v, _DeltaSnapshot) else v for c, v in stored.items()}


def is_internal_channel(channel: str) -> bool:
    """LangGraph's own channels: ``__start__``, ``__pregel_tasks``, ``branch:to:<node>``..."""
    return channel.startswith(("__", BRANCH_PREFIX))


def _version_key(version: Any) -> tuple[float, str]:
    # Versions are ints/floats or "<zero-padded number>.<random>" strings.
    if isinstance(version, (int, float)):
        return float(version), ""
    head = str(version).split(".")[0]
    return (float(head) if head.isdigit() else 0.0), str(version)


@dataclass(frozen=True)
class HistoryRow:
    """One checkpoint of ``mongo-ckpt history``."""

    checkpoint_id: str
    checkpoint_ns: str
    step: int | None
    source: str | None
    next: list[str]
    writes: int
    parent_id: str | None
    bytes: int


def history_rows(
    serde: SerializerProtocol,
    checkpoints: Sequence[Mapping[str, Any]],
    blobs: Sequence[Mapping[str, Any]],
    writes: Sequence[Mapping[str, Any]],
) -> list[HistoryRow]:
    """A row per checkpoint document, in the given order. ``bytes``: the checkpoint
    document, its pending writes and the channel values it stored first (those its
    parent does not name)."""
    blob_bytes: Counter[Key] = Counter()
    for doc in blobs:
        blob_bytes[key_of(doc, BLOB_KEY)] += document_size(doc)
    write_bytes: Counter[Key] = Counter()
    write_count: Counter[Key] = Counter()
    for doc in writes:
        write_bytes[key_of(doc)] += document_size(doc)
        write_count[key_of(doc)] += doc.get("part", 0) == 0
    refs = {key_of(doc): _refs(doc) for doc in checkpoints}
    rows = []
    for doc in checkpoints:
        key = key_of(doc)
        parent = doc.get("parent_checkpoint_id")
        inherited = refs.get((key[0], key[1], parent), set()) if parent else set()
        stored_first = sum(blob_bytes.get(ref, 0) for ref in refs[key] - inherited)
        metadata = stored_metadata(serde, doc)
        checkpoint = stored_checkpoint(serde, doc)
        rows.append(
            HistoryRow(
                checkpoint_id=key[2],
                checkpoint_ns=key[1],
                step=metadata.get("step"),
                source=metadata.get("source"),
                next=next_nodes(checkpoint, stored_channels(doc)),
                writes=write_count.get(key, 0),
                parent_id=parent,
                bytes=document_size(doc) + write_bytes.get(key, 0) + stored_first,
            )
        )
    return rows


def stored_channels(doc: Mapping[str, Any]) -> set[str]:
    """Channels with a value at the checkpoint ``doc``: stored, or rebuilt from history."""
    return {v["channel"] for v in doc.get("values", ())} | set(doc.get("replay", ()))


def _refs(doc: Mapping[str, Any]) -> set[Key]:
    return {
        (doc["thread_id"], doc["checkpoint_ns"], v["channel"], v["version"])
        for v in doc.get("values", ())
    }


def jsonable(value: Any) -> Any:
    """``value`` as JSON-safe data: messages as ``{type, content, ...}``, pydantic models
    and dataclasses by their fields, anything else without a JSON form by its ``repr``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, BaseMessage):
        out = {"type": value.type, "content": jsonable(value.content)}
        for extra in ("name", "id", "tool_calls", "tool_call_id"):
            item = getattr(value, extra, None)
            if item:
                out[extra] = jsonable(item)
        return out
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump())
    if hasattr(value, "__dataclass_fields__"):
        return {f: jsonable(getattr(value, f)) for f in value.__dataclass_fields__}
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def is_conversation(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of chat messages."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, BaseMessage) for m in value
    )


def message_line(message: BaseMessage) -> str:
    """``<type>> <content>`` (tool calls after the text)."""
    content = message.content if isinstance(message.content, str) else repr(message.content)
    calls = getattr(message, "tool_calls", None) or []
    tools = "".join(f" [tool call {c['name']}({c.get('args', {})})]" for c in calls)
    return f"{message.type}> {content}{tools}"


@dataclass(frozen=True)
class ChannelDiff:
    """How one channel differs between checkpoints A and B."""

    channel: str
    status: str  # "added", "removed", "changed", "appended", "unchanged", "not compared"
    before: Any
    after: Any
    appended: list[Any] | None = None


def diff_values(
    a: Mapping[str, Any], b: Mapping[str, Any], rebuilt: Collection[str] = ()
) -> list[ChannelDiff]:
    """Channel-by-channel difference from ``a`` to ``b``; a list that ``b`` extends
    (messages, for one) is ``appended`` with the new items. Channels in ``rebuilt``
    (DeltaChannels without a stored value at either checkpoint) are ``not compared``."""
    out = []
    for channel in sorted(set(a) | set(b) | set(rebuilt)):
        before, after, new = a.get(channel), b.get(channel), None
        if channel in rebuilt:
            status = "not compared"
        elif channel not in b:
            status = "removed"
        elif channel not in a:
            status = "added"
        elif before == after:
            status = "unchanged"
        elif (
            isinstance(before, list) and isinstance(after, list) and after[: len(before)] == before
        ):
            status, new = "appended", after[len(before) :]
        else:
            status = "changed"
        out.append(ChannelDiff(channel, status, before, after, new))
    return out
