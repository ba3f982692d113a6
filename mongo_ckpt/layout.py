"""Collection names and the indexes the checkpointer relies on."""

from __future__ import annotations

from dataclasses import dataclass

from pymongo import ASCENDING, IndexModel

CHECKPOINTS, BLOBS, WRITES = "checkpoints", "blobs", "writes"


@dataclass(frozen=True)
class Layout:
    """Names of the three checkpointer collections."""

    checkpoints: str = "checkpoints"
    blobs: str = "checkpoint_blobs"
    writes: str = "checkpoint_writes"

    def by_logical(self) -> dict[str, str]:
        """Collection name per logical name (the keys of ``saver.collections``)."""
        return {CHECKPOINTS: self.checkpoints, BLOBS: self.blobs, WRITES: self.writes}


CHECKPOINT_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id")
BLOB_KEY = ("thread_id", "checkpoint_ns", "channel", "version")
WRITE_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")


# Separates the fields of a join key; identifiers never contain it in practice, and
# every join is filtered by thread and namespace again, so a collision costs bytes only.
JOIN_SEP = "\x1f"


def write_join(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The ``join`` field of a ``checkpoint_writes`` document."""
    return JOIN_SEP.join((thread_id, checkpoint_ns, checkpoint_id))


def blob_join(thread_id: str, checkpoint_ns: str, channel: str, version: object) -> str:
    """The ``join`` field of a ``checkpoint_blobs`` document."""
    return JOIN_SEP.join((thread_id, checkpoint_ns, channel, str(version)))


def _unique(fields: tuple[str, ...], name: str) -> IndexModel:
    return IndexModel([(f, ASCENDING) for f in fields], unique=True, name=name)


# Maintenance marks the documents it is about to delete; sparse, so it holds only those.
_DOOMED = IndexModel([("doomed", ASCENDING)], name="doomed", sparse=True)


def index_models(layout: Layout) -> dict[str, list[IndexModel]]:
    """Indexes per collection name. ``part`` numbers the chunks of a large payload."""
    return {
        layout.checkpoints: [
            _unique(CHECKPOINT_KEY, "checkpoint_key"),
            IndexModel([("run_id", ASCENDING)], name="run_id", sparse=True),
            IndexModel([("thread_id", ASCENDING), ("created_at", ASCENDING)], name="activity"),
        ],
        layout.blobs: [
            _unique((*BLOB_KEY, "part"), "blob_key"),
            # Joins from checkpoints match (thread, namespace, channel, version).
            IndexModel([("join", ASCENDING)], name="join"),
            _DOOMED,
        ],
        layout.writes: [
            _unique((*WRITE_KEY, "part"), "write_key"),
            # Joins from checkpoints match (thread, namespace, checkpoint id).
            IndexModel([("join", ASCENDING)], name="join"),
            _DOOMED,
        ],
    }
