"""Read-only queries behind the ``mongo-ckpt`` inspection commands, written once as
operations (``calls.Operation``) on the saver's collections, plus the pure folds over
their results.

Stored sizes are measured by the server with ``$bsonSize`` where it has it (MongoDB 4.4+);
otherwise (mongomock) the documents are streamed and measured here, with the same result.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import bson

from mongo_ckpt.calls import Call, NextBatch, Operation
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.reading import LATEST, inactive_threads_pipeline

COLLECTIONS = (CHECKPOINTS, BLOBS, WRITES)
SCAN_BATCH = 500
# Fields that say which stored item a document belongs to, per logical collection.
IDENTITY = {
    CHECKPOINTS: ("thread_id", "checkpoint_ns", "checkpoint_id"),
    BLOBS: ("thread_id", "checkpoint_ns", "channel", "version", "part"),
    WRITES: ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "part"),
}
THREAD_SORTS = ("activity", "size", "checkpoints", "thread")

BSON_SIZE_PROBE = [{"$limit": 1}, {"$project": {"_id": 0, "size": {"$bsonSize": "$$ROOT"}}}]
"""A one-document pipeline that fails where the server has no ``$bsonSize``."""


def document_size(doc: Mapping[str, Any]) -> int:
    """Bytes of ``doc`` as BSON (what ``$bsonSize`` reports)."""
    return len(bson.encode(doc))


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
        counts = self.threads.setdefault(thread_id, {})
        entry = counts.setdefault(collection, [0, 0])
        entry[0] += docs
        entry[1] += size

    def bytes_of(self, thread_id: str) -> int:
        return sum(size for _, size in self.threads.get(thread_id, {}).values())

    def docs_of(self, thread_id: str) -> int:
        return sum(docs for docs, _ in self.threads.get(thread_id, {}).values())


def _identity(collection: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {f: doc[f] for f in IDENTITY[collection] if f in doc}


def _size_pipeline(match: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"$match": dict(match)},
        {"$group": {"_id": "$thread_id", "docs": {"$sum": 1},
                    "bytes": {"$sum": {"$bsonSize": "$$ROOT"}}}},
    ]


def _largest_pipeline(collection: str, match: Mapping[str, Any], top: int) -> list[dict]:
    keep = {f: 1 for f in IDENTITY[collection]}
    return [
        {"$match": dict(match)},
        {"$project": {**keep, "_id": 0, "size": {"$bsonSize": "$$ROOT"}}},
        {"$sort": {"size": -1}},
        {"$limit": top},
    ]


def sizes(match: Mapping[str, Any], top: int, server_sizes: bool) -> Operation:
    """``Sizes`` of the documents matching ``match`` in the three collections, with the
    ``top`` largest documents; measured by the server when ``server_sizes``."""
    result = Sizes()
    largest: list[DocumentSize] = []
    for collection in COLLECTIONS:
        if server_sizes:
            for row in (yield Call(collection, "aggregate", (_size_pipeline(match),))):
                result.add(collection, row["_id"], row["docs"], row["bytes"])
            if top:
                pipeline = _largest_pipeline(collection, match, top)
                rows = yield Call(collection, "aggregate", (pipeline,))
                largest += [DocumentSize(collection, r.pop("size"), r) for r in rows]
            continue
        cursor = yield Call(collection, "find", (dict(match),), stream=True)
        while docs := (yield NextBatch(cursor, SCAN_BATCH)):
            for doc in docs:
                size = document_size(doc)
                result.add(collection, doc.get("thread_id"), 1, size)
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


def _sort_key(sort: str) -> Any:
    return {
        "activity": lambda r: (r.last_activity is not None, r.last_activity or 0, r.thread_id),
        "size": lambda r: (r.bytes, r.thread_id),
        "checkpoints": lambda r: (r.checkpoints, r.thread_id),
        "thread": lambda r: r.thread_id,
    }[sort]


def threads(
    checkpoint_match: Mapping[str, Any],
    sort: str,
    skip: int,
    limit: int,
    server_sizes: bool,
) -> Operation:
    """The threads having a checkpoint that matches ``checkpoint_match``, sorted by
    ``sort`` (largest/newest/most first; ``thread``: by id), ``limit`` of them after
    ``skip``: a ``ThreadPage``."""
    if sort not in THREAD_SORTS:
        raise ValueError(f"sort must be one of {THREAD_SORTS}, got {sort!r}")
    match: dict[str, Any] = {}
    if checkpoint_match:
        ids = yield Call(CHECKPOINTS, "distinct", ("thread_id", dict(checkpoint_match)))
        match = {"thread_id": {"$in": sorted(ids)}}
    activity = yield Call(CHECKPOINTS, "aggregate", (_activity_pipeline(match),))
    measured: Sizes = yield from sizes(match, 0, server_sizes)
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


def thread_documents(thread_id: str, checkpoint_ns: str | None) -> Operation:
    """The raw documents of a thread (one namespace, or all): checkpoints newest first,
    then values and writes, as ``(checkpoints, blobs, writes)``."""
    query: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        query["checkpoint_ns"] = checkpoint_ns
    checkpoints = yield Call(CHECKPOINTS, "find", (query,), {"sort": LATEST})
    blobs = yield Call(BLOBS, "find", (query,))
    writes = yield Call(WRITES, "find", (query,))
    return checkpoints, blobs, writes




def index_information() -> Operation:
    """``index_information()`` per logical collection."""
    result = {}
    for collection in COLLECTIONS:
        result[collection] = yield Call(collection, "index_information")
    return result


def percentiles(values: Iterable[int], points: Sequence[int] = (50, 90, 99)) -> dict[str, int]:
    """Nearest-rank percentiles of ``values`` (and ``max``); empty when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {}
    out = {f"p{p}": ordered[max(0, -(-p * len(ordered) // 100) - 1)] for p in points}
    out["max"] = ordered[-1]
    return out


def checkpoint_document(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Operation:
    """The stored ``checkpoints`` document of one checkpoint, or ``None``."""
    key = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}
    return (yield Call(CHECKPOINTS, "find_one", (key,)))


def counts(thread_ids: Sequence[str] | None = None) -> Operation:
    """Documents per logical collection (of ``thread_ids`` only, if given)."""
    query = {} if thread_ids is None else {"thread_id": {"$in": sorted(thread_ids)}}
    result = {}
    for collection in COLLECTIONS:
        result[collection] = yield Call(collection, "count_documents", (query,))
    return result


def idle_threads(cutoff: datetime) -> Operation:
    """Threads without a checkpoint written since ``cutoff``, sorted."""
    docs = yield Call(CHECKPOINTS, "aggregate", (inactive_threads_pipeline(cutoff),))
    return sorted(doc["_id"] for doc in docs)
