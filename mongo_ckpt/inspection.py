"""The queries behind the ``mongo-ckpt`` inspection commands, written once as
operations (``calls.Operation``) on the saver's collections, plus the pure folds over
their results. They only read stored data; ``write_probe`` (``doctor``: may this user
write?) creates and drops a scratch collection of its own.

Stored sizes are measured by the server with ``$bsonSize`` where it has it (MongoDB 4.4+);
otherwise (mongomock) the documents are streamed and measured here, with the same result.
Facts a server may not report (``buildInfo``, ``collStats``...) come back as ``None``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import bson
from pymongo.errors import OperationFailure, PyMongoError

from mongo_ckpt.calls import (
    Document,
    Operation,
    aggregate,
    command,
    count_documents,
    create_collection,
    distinct,
    drop_collection,
    find,
    find_cursor,
    find_one,
    index_information,
    next_batch,
)
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, THREADS, WRITES
from mongo_ckpt.reading import LATEST, inactive_threads_pipeline
from mongo_ckpt.schema import SCHEMA, version_of

COLLECTIONS = (CHECKPOINTS, BLOBS, WRITES, THREADS)
DATABASE = "$database"
"""The key of the database itself among the collections operations run on."""
SCAN_BATCH = 500
# Fields that say which stored item a document belongs to, per logical collection.
IDENTITY = {
    CHECKPOINTS: ("thread_id", "checkpoint_ns", "checkpoint_id"),
    BLOBS: ("thread_id", "checkpoint_ns", "channel", "version", "part"),
    WRITES: ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "part"),
    THREADS: ("thread_id",),
}
THREAD_SORTS = ("activity", "size", "checkpoints", "thread")
# What a server (or mongomock) raises for a command or operator it does not have.
UNSUPPORTED = (OperationFailure, NotImplementedError)


def document_size(doc: Mapping[str, Any]) -> int:
    """Bytes of ``doc`` as BSON (what ``$bsonSize`` reports)."""
    return len(bson.encode(doc))


def measures_sizes() -> Operation[bool]:
    """Whether the server measures documents itself (has ``$bsonSize``)."""
    probe: list[dict[str, Any]] = [
        {"$limit": 1},
        {"$project": {"_id": 0, "size": {"$bsonSize": "$$ROOT"}}},
    ]
    try:
        yield from aggregate(CHECKPOINTS, probe)
    except UNSUPPORTED:
        return False
    return True


def server_reply(spec: Mapping[str, Any]) -> Operation[Document | None]:
    """The reply to database command ``spec``; ``None`` where the server has no such command."""
    try:
        return (yield from command(DATABASE, spec))
    except UNSUPPORTED:
        return None


def write_probe(name: str) -> Operation[str | None]:
    """Create and drop the scratch collection ``name``: why that failed, or ``None``."""
    try:
        yield from drop_collection(DATABASE, name)
        yield from create_collection(DATABASE, name)
        yield from drop_collection(DATABASE, name)
    except PyMongoError as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


@dataclass(frozen=True)
class DocumentSize:
    """One stored document and its size."""

    collection: str
    size: int
    identity: dict[str, Any]


@dataclass
class Sizes:
    """Documents and bytes per thread and collection, and the largest documents."""

    threads: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    largest: list[DocumentSize] = field(default_factory=list)

    def add(self, collection: str, thread_id: str, docs: int, size: int) -> None:
        entry = self.threads.setdefault(thread_id, {}).setdefault(collection, [0, 0])
        entry[0] += docs
        entry[1] += size

    def bytes_of(self, thread_id: str) -> int:
        return sum(size for _, size in self.threads.get(thread_id, {}).values())

    def docs_of(self, thread_id: str) -> int:
        return sum(docs for docs, _ in self.threads.get(thread_id, {}).values())

    def collection_bytes(self, collection: str) -> int:
        return sum(per[collection][1] for per in self.threads.values() if collection in per)


def _identity(collection: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {f: doc[f] for f in IDENTITY[collection] if f in doc}


def _size_pipeline(match: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"$match": dict(match)},
        {"$group": {"_id": "$thread_id", "docs": {"$sum": 1},
                    "bytes": {"$sum": {"$bsonSize": "$$ROOT"}}}},
    ]


def _largest_pipeline(collection: str, match: Mapping[str, Any], top: int) -> list[dict[str, Any]]:
    keep = {f: 1 for f in IDENTITY[collection]}
    return [
        {"$match": dict(match)},
        {"$project": {**keep, "_id": 0, "size": {"$bsonSize": "$$ROOT"}}},
        {"$sort": {"size": -1}},
        {"$limit": top},
    ]


def sizes(match: Mapping[str, Any], top: int, server_sizes: bool) -> Operation[Sizes]:
    """``Sizes`` of the documents matching ``match`` in the saver's collections, with the
    ``top`` largest documents; measured by the server when ``server_sizes``."""
    result = Sizes()
    largest: list[DocumentSize] = []
    for collection in COLLECTIONS:
        if server_sizes:
            for row in (yield from aggregate(collection, _size_pipeline(match))):
                result.add(collection, row["_id"], row["docs"], row["bytes"])
            if top:
                rows = yield from aggregate(collection, _largest_pipeline(collection, match, top))
                largest += [DocumentSize(collection, r.pop("size"), r) for r in rows]
            continue
        cursor = yield from find_cursor(collection, dict(match))
        while docs := (yield from next_batch(cursor, SCAN_BATCH)):
            for doc in docs:
                size = document_size(doc)
                result.add(collection, doc["thread_id"], 1, size)
                if top:
                    largest.append(DocumentSize(collection, size, _identity(collection, doc)))
            largest = heapq.nlargest(top, largest, key=lambda d: d.size)
    result.largest = heapq.nlargest(top, largest, key=lambda d: d.size)
    return result


def _activity_pipeline(match: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"$match": dict(match)},
        {"$group": {"_id": "$thread_id", "checkpoints": {"$sum": 1},
                    "namespaces": {"$addToSet": "$checkpoint_ns"},
                    "last": {"$max": "$created_at"}}},
    ]


@dataclass(frozen=True)
class ThreadRow:
    """One line of ``mongo-ckpt threads``."""

    thread_id: str
    checkpoints: int
    namespaces: list[str]
    last_activity: datetime | None
    documents: int
    bytes: int


@dataclass(frozen=True)
class ThreadPage:
    """A page of threads and how many threads match in all."""

    total: int
    rows: list[ThreadRow]


def _sort_key(sort: str) -> Callable[[ThreadRow], Any]:
    keys: dict[str, Callable[[ThreadRow], Any]] = {
        "activity": lambda r: (r.last_activity is not None, r.last_activity or 0, r.thread_id),
        "size": lambda r: (r.bytes, r.thread_id),
        "checkpoints": lambda r: (r.checkpoints, r.thread_id),
        "thread": lambda r: r.thread_id,
    }
    return keys[sort]


def threads(
    checkpoint_match: Mapping[str, Any],
    sort: str,
    skip: int,
    limit: int,
    server_sizes: bool,
) -> Operation[ThreadPage]:
    """The threads having a checkpoint that matches ``checkpoint_match``, sorted by
    ``sort`` (largest/newest/most first; ``thread``: by id), ``limit`` of them after
    ``skip``."""
    if sort not in THREAD_SORTS:
        raise ValueError(f"sort must be one of {THREAD_SORTS}, got {sort!r}")
    match: dict[str, Any] = {}
    if checkpoint_match:
        ids = yield from distinct(CHECKPOINTS, "thread_id", dict(checkpoint_match))
        match = {"thread_id": {"$in": sorted(ids)}}
    activity = yield from aggregate(CHECKPOINTS, _activity_pipeline(match))
    measured = yield from sizes(match, 0, server_sizes)
    rows = [
        ThreadRow(
            thread_id=a["_id"],
            checkpoints=a["checkpoints"],
            # mongomock groups the root namespace '' as None
            namespaces=sorted(ns or "" for ns in a["namespaces"]),
            last_activity=a.get("last"),
            documents=measured.docs_of(a["_id"]),
            bytes=measured.bytes_of(a["_id"]),
        )
        for a in activity
    ]
    rows.sort(key=_sort_key(sort), reverse=sort != "thread")
    return ThreadPage(len(rows), rows[skip : skip + limit])


ThreadDocuments = tuple[list[Document], list[Document], list[Document]]


def thread_documents(thread_id: str, checkpoint_ns: str | None) -> Operation[ThreadDocuments]:
    """The raw documents of a thread (one namespace, or all): checkpoints newest first,
    then values and writes, as ``(checkpoints, blobs, writes)``."""
    query: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        query["checkpoint_ns"] = checkpoint_ns
    checkpoints = yield from find(CHECKPOINTS, query, sort=LATEST)
    blobs = yield from find(BLOBS, query)
    writes = yield from find(WRITES, query)
    return checkpoints, blobs, writes


def checkpoint_document(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> Operation[Document | None]:
    """The stored ``checkpoints`` document of one checkpoint, or ``None``."""
    key = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}
    return (yield from find_one(CHECKPOINTS, key))


def counts(thread_ids: Sequence[str] | None = None) -> Operation[dict[str, int]]:
    """Documents per logical collection (of ``thread_ids`` only, if given)."""
    query = {} if thread_ids is None else {"thread_id": {"$in": sorted(thread_ids)}}
    result = {}
    for collection in COLLECTIONS:
        result[collection] = yield from count_documents(collection, query)
    return result


def indexes() -> Operation[dict[str, dict[str, Document]]]:
    """``index_information()`` per logical collection."""
    result = {}
    for collection in COLLECTIONS:
        result[collection] = yield from index_information(collection)
    return result


def stored_by() -> Operation[str | None]:
    """Who wrote the ``checkpoints`` collection, from one of its documents: ``"official"``
    (langgraph-checkpoint-mongodb: the checkpoint is serialized bytes, not a document),
    ``"mongo-ckpt"``, or ``None`` when it holds none."""
    sample = yield from find(CHECKPOINTS, {}, projection={"_id": 0, "checkpoint": 1}, limit=1)
    if not sample:
        return None
    return "mongo-ckpt" if isinstance(sample[0].get("checkpoint"), Mapping) else "official"


def schema_version(key: str) -> Operation[int | None]:
    """The layout version recorded under ``key`` (``None``: not recorded)."""
    return version_of((yield from find_one(SCHEMA, {"_id": key})))


def stored_threads(thread_ids: Sequence[str]) -> Operation[list[str]]:
    """Those of ``thread_ids`` that have a checkpoint, sorted."""
    query = {"thread_id": {"$in": sorted(thread_ids)}}
    found = yield from distinct(CHECKPOINTS, "thread_id", query)
    return sorted(found)


def idle_threads(cutoff: datetime) -> Operation[list[str]]:
    """Threads without a checkpoint written since ``cutoff``, sorted."""
    docs = yield from aggregate(CHECKPOINTS, inactive_threads_pipeline(cutoff))
    return sorted(doc["_id"] for doc in docs)


def percentiles(values: Iterable[int], points: Sequence[int] = (50, 90, 99)) -> dict[str, int]:
    """Nearest-rank percentiles of ``values`` (and ``max``); empty when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {f"p{p}": ordered[max(0, -(-p * len(ordered) // 100) - 1)] for p in points}
    out["max"] = ordered[-1]
    return out
