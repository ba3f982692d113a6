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


def _unique(fields: tuple[str, ...], name: str) -> IndexModel:
    return IndexModel([(f, ASCENDING) for f in fields], unique=True, name=name)


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
            # The delta-history pipeline looks seed values up by version alone.
            IndexModel([("version", ASCENDING)], name="version"),
        ],
        layout.writes: [
            _unique((*WRITE_KEY, "part"), "write_key"),
            # The delta-history pipeline looks writes up by checkpoint id alone.
            IndexModel([("checkpoint_id", ASCENDING)], name="checkpoint_id"),
        ],
    }
