"""How langgraph-checkpoint-mongodb (0.5.x and earlier) stores checkpoints, read back.

Its ``checkpoints`` documents hold the whole checkpoint, channel values included, as one
serialized ``(type, checkpoint)`` pair, and the metadata as a BSON document whose leaves
are serialized one by one: ``[type, bytes]`` pairs since 0.2.2, bare JSON bytes before
(the format its 0.3 upgrade stopped reading). Its ``checkpoint_writes`` documents hold
one pending write each (``type``, ``value``). Nothing here writes to those collections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, PendingWrite
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt.errors import MongoCkptError

DEFAULT_CHECKPOINTS = "checkpoints"
DEFAULT_WRITES = "checkpoint_writes"
# The official unique index, (thread_id, checkpoint_ns, checkpoint_id desc): this order
# lets a migration stream the collection thread by thread on it.
THREAD_ORDER = [("thread_id", 1), ("checkpoint_ns", 1), ("checkpoint_id", -1)]


def migrate_command(db_name: str) -> str:
    """The command that converts the official collections of ``db_name`` into a new
    database."""
    return f"mongo-ckpt migrate --from-official --source-db {db_name} --db <new database>"


class OfficialFormatError(MongoCkptError, ValueError):
    """A document that is not in any layout of langgraph-checkpoint-mongodb."""


@dataclass(frozen=True)
class OfficialCheckpoint:
    """One checkpoint of the official layout, decoded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: Checkpoint
    metadata: CheckpointMetadata


@dataclass(frozen=True)
class OfficialWrite:
    """One pending write of the official layout, decoded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any

    @property
    def pending(self) -> PendingWrite:
        return (self.task_id, self.channel, self.value)


def load_metadata(serde: SerializerProtocol, stored: Any, path: str = "metadata") -> Any:
    """Decode official metadata: nested documents of ``[type, bytes]`` leaves (0.2.2 and
    later) or of JSON bytes (earlier releases)."""
    if isinstance(stored, Mapping):
        return {k: load_metadata(serde, v, f"{path}.{k}") for k, v in stored.items()}
    if isinstance(stored, (bytes, bytearray)):
        return serde.loads_typed(("json", bytes(stored)))
    if (
        isinstance(stored, (list, tuple))
        and len(stored) == 2
        and isinstance(stored[0], str)
        and isinstance(stored[1], (bytes, bytearray))
    ):
        return serde.loads_typed((stored[0], bytes(stored[1])))
    raise OfficialFormatError(
        f"{path} is {type(stored).__name__}, neither a [type, bytes] pair nor JSON bytes: "
        "not metadata written by langgraph-checkpoint-mongodb"
    )


def load_checkpoint(serde: SerializerProtocol, doc: Mapping[str, Any]) -> OfficialCheckpoint:
    """Decode an official ``checkpoints`` document."""
    if not isinstance(doc.get("checkpoint"), (bytes, bytearray)) or "type" not in doc:
        raise OfficialFormatError(
            f"checkpoint {doc.get('checkpoint_id')!r} of thread {doc.get('thread_id')!r} has "
            "no serialized 'checkpoint' and 'type': not a langgraph-checkpoint-mongodb document"
        )
    return OfficialCheckpoint(
        thread_id=doc["thread_id"],
        checkpoint_ns=doc.get("checkpoint_ns", ""),
        checkpoint_id=doc["checkpoint_id"],
        parent_checkpoint_id=doc.get("parent_checkpoint_id") or None,
        checkpoint=serde.loads_typed((doc["type"], bytes(doc["checkpoint"]))),
        metadata=load_metadata(serde, doc.get("metadata") or {}),
    )


def load_write(serde: SerializerProtocol, doc: Mapping[str, Any]) -> OfficialWrite:
    """Decode an official ``checkpoint_writes`` document."""
    if not isinstance(doc.get("value"), (bytes, bytearray)) or "type" not in doc:
        raise OfficialFormatError(
            f"write {doc.get('idx')!r} of task {doc.get('task_id')!r} in thread "
            f"{doc.get('thread_id')!r} has no serialized 'value' and 'type': not a "
            "langgraph-checkpoint-mongodb document"
        )
    return OfficialWrite(
        thread_id=doc["thread_id"],
        checkpoint_ns=doc.get("checkpoint_ns", ""),
        checkpoint_id=doc["checkpoint_id"],
        task_id=doc["task_id"],
        task_path=doc.get("task_path", ""),
        idx=int(doc["idx"]),
        channel=doc["channel"],
        value=serde.loads_typed((doc["type"], bytes(doc["value"]))),
    )


def writes_by_checkpoint(
    writes: Iterable[OfficialWrite],
) -> dict[tuple[str, str, str], list[OfficialWrite]]:
    """Writes grouped by the checkpoint they belong to, each group in ``idx`` order per task."""
    grouped: dict[tuple[str, str, str], list[OfficialWrite]] = {}
    for write in sorted(writes, key=lambda w: (w.task_path, w.task_id, w.idx)):
        key = (write.thread_id, write.checkpoint_ns, write.checkpoint_id)
        grouped.setdefault(key, []).append(write)
    return grouped


def thread_query(thread_ids: Sequence[str]) -> dict[str, Any]:
    return {"thread_id": {"$in": sorted(thread_ids)}}
