"""Collection names and the indexes the checkpointer relies on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pymongo import ASCENDING, IndexModel

from mongo_ckpt.errors import MongoCkptError

CHECKPOINTS, BLOBS, WRITES, THREADS = "checkpoints", "blobs", "writes", "threads"
SCHEMA = "schema"  # logical name of the layout-version collection (``schema.py``)
SCHEMA_COLLECTION = "mongo_ckpt_schema"
STORE = "store"  # logical name of the store's collection (``mongo_ckpt.store``)
REGISTRY = "registry"  # logical name of the store's namespace registry (``store/registry.py``)
# How the saver constructors name each collection; the CLI and the platform pass their own.
ARGUMENTS = {
    CHECKPOINTS: "checkpoint_collection_name",
    BLOBS: "blobs_collection_name",
    WRITES: "writes_collection_name",
    THREADS: "threads_collection_name",
}


class CollectionNameClash(MongoCkptError, ValueError):
    """Two of the saver's collections, or one and the layout-version collection, share a
    name: a checkpoint's documents would overwrite or delete each other."""

    def __init__(self, roles: tuple[str, str], name: str, labels: Mapping[str, str] = ARGUMENTS):
        self.roles, self.name = roles, name
        super().__init__(self.describe(labels))

    def describe(self, labels: Mapping[str, str]) -> str:
        """The message, naming each collection as ``labels`` does (an argument, an option...)."""
        first, second = self.roles
        if second == SCHEMA:
            return (
                f"{labels[first]} is {self.name!r}, the name of mongo-ckpt's layout-version "
                f"collection: pass another name for {labels[first]}"
            )
        if set(self.roles) == {STORE, REGISTRY}:
            return (
                f"{labels[first]} and {labels[second]} are both {self.name!r}: the store's "
                "items and its namespace registry need a collection each; pass another name "
                f"for {labels[REGISTRY]}"
            )
        if {STORE, REGISTRY} & set(self.roles):
            ours = second if second in (STORE, REGISTRY) else first
            return (
                f"{labels[first]} and {labels[second]} are both {self.name!r}: the store needs "
                f"a collection of its own, apart from the checkpointer's; pass another name "
                f"for {labels[ours]}"
            )
        return (
            f"{labels[first]} and {labels[second]} are both {self.name!r}: checkpoints, values, "
            "pending writes and thread settings need a collection each (maintenance of one "
            f"would delete the others' documents); pass another name for {labels[first]} or "
            f"{labels[second]}"
        )


def check_names(names: Mapping[str, str], labels: Mapping[str, str] = ARGUMENTS) -> None:
    """Raise ``CollectionNameClash`` unless the collections ``names`` (by logical name) and
    the layout-version collection all have names of their own."""
    seen: dict[str, str] = {SCHEMA_COLLECTION: SCHEMA}
    for logical, name in names.items():
        if name in seen:
            first, second = (logical, seen[name]) if seen[name] == SCHEMA else (seen[name], logical)
            raise CollectionNameClash((first, second), name, labels)
        seen[name] = logical


@dataclass(frozen=True)
class Layout:
    """Names of the four checkpointer collections; four names of their own, none the
    layout-version collection's (else ``CollectionNameClash``). ``threads`` holds a
    document only for a thread with settings of its own (``threads.py``)."""

    checkpoints: str = "checkpoints"
    blobs: str = "checkpoint_blobs"
    writes: str = "checkpoint_writes"
    threads: str = "checkpoint_threads"

    def __post_init__(self) -> None:
        check_names(self.by_logical())

    def by_logical(self) -> dict[str, str]:
        """Collection name per logical name (the keys of ``saver.collections``)."""
        return {
            CHECKPOINTS: self.checkpoints,
            BLOBS: self.blobs,
            WRITES: self.writes,
            THREADS: self.threads,
        }


CHECKPOINT_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id")
# Set on a checkpoint a ``put`` inserts with a parent, unset by the same bulk write once its
# parent probe ran: a write cut before the probe leaves it invisible to reads.
PENDING = "pending"
NOT_PENDING = {PENDING: {"$ne": True}}
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
        layout.threads: [
            _unique(("thread_id",), "thread_key"),
            # The sweep finds the threads whose own ttl is shorter than the saver's.
            IndexModel([("ttl", ASCENDING)], name="thread_ttl", sparse=True),
        ],
    }
