"""Markers: how a ``put`` and maintenance stay out of each other's way without transactions.

A ``put`` continues from a parent checkpoint it read earlier, and its checkpoint shares
the parent's stored values (and, for DeltaChannels, the parent's history). Maintenance
(``prune``, ``delete_for_runs``, the retention sweep) may be deleting that parent at
the same moment. Each side writes a marker and then reads the other's, so at least one
of them sees the other:

- A put first **registers** its checkpoint, in the same ordered bulk write as its values,
  then checks for a **tombstone** on its parent (and on its thread); only then does it
  write the checkpoint. A tombstone makes it raise ``StaleParentError`` instead.
- Maintenance first puts a tombstone on every checkpoint it means to delete (the sweep:
  on each thread), then reads the registrations and spares the parent of every put
  still on its way (the sweep: skips a thread with a recent registration).

The same bulk write counts the heads of the values the checkpoint names but does not
write: one gone (its parent was deleted before this put began) also fails the put.

Markers are ``checkpoint_blobs`` documents whose ``channel`` is ``None``, never a
channel name, so no value query ever matches one. ``version`` is the checkpoint id, or
``None`` for the thread's own tombstone. A registration holds ``parent`` and ``at``; a
tombstone holds ``doomed`` (the token of the maintenance call) and ``at``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from bson import ObjectId
from pymongo import DeleteOne, UpdateMany, UpdateOne
from pymongo.results import BulkWriteResult

from mongo_ckpt.calls import WriteRequest
from mongo_ckpt.layout import BLOB_KEY
from mongo_ckpt.reading import blob_keys_query

Key = tuple[Any, ...]  # (thread_id, checkpoint_ns, checkpoint id or channel[, version])

DOOMED = "doomed"
VALUES = {"channel": {"$ne": None}}  # value documents only, never markers
PROBE = "probe"  # a field no document has: unsetting it counts matches, changes nothing
# How long a tombstone stops puts: far longer than the few calls between a maintenance
# call's tombstones and its deletes; one left by a call that was cut stops them no longer.
TOMBSTONE_LEASE = timedelta(minutes=10)


class StaleParentError(LookupError):
    """A ``put`` continued from a checkpoint that maintenance deleted (or is deleting)."""

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent: Any):
        super().__init__(
            f"checkpoint {checkpoint_id!r} (thread_id={thread_id!r} "
            f"checkpoint_ns={checkpoint_ns!r}) was not stored: its parent {parent!r}, or "
            "values it names without writing them, are not stored (deleted while it was "
            "being written by prune, delete_for_runs, delete_thread or the retention "
            "sweep, or never written); continue from a checkpoint that still exists"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.checkpoint_id, self.parent = checkpoint_id, parent


def marker_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> dict[str, Any]:
    """The key of a checkpoint's marker; ``checkpoint_id=None``: the thread's tombstone."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns if checkpoint_id is not None else "",
        "channel": None,
        "version": checkpoint_id,
        "part": 0,
    }


def is_marker(doc: Mapping[str, Any]) -> bool:
    return doc.get("channel") is None


def markers_query(thread_ids: Iterable[str]) -> dict[str, Any]:
    return {"thread_id": {"$in": sorted(set(thread_ids))}, "channel": None}


def register(key: Key, parent_id: str | None, now: datetime) -> list[WriteRequest]:
    """A put's registration of checkpoint ``key``, its parent's registration dropped (the
    parent is stored), and the tombstone check: it modifies one document per live
    tombstone on the thread, the parent or the checkpoint itself, and nothing else in the
    put's bulk write does."""
    thread_id, checkpoint_ns, checkpoint_id = key
    fields = {"parent": parent_id, "at": now, "join": None}
    requests: list[WriteRequest] = [
        UpdateOne(marker_key(*key), {"$setOnInsert": fields}, upsert=True)
    ]
    # The thread's, the parent's, and its own (a retried put of a checkpoint being deleted).
    tombs = [marker_key(thread_id, checkpoint_ns, None), marker_key(*key)]
    if parent_id is not None:
        parent = marker_key(thread_id, checkpoint_ns, parent_id)
        requests.append(DeleteOne({**parent, DOOMED: {"$exists": False}}))
        tombs.append(parent)
    live = {"$or": tombs, DOOMED: {"$exists": True}, "at": {"$gt": now - TOMBSTONE_LEASE}}
    requests.append(UpdateMany(live, {"$inc": {"hits": 1}}))
    return requests


def probe(keys: Iterable[Key]) -> UpdateMany:
    """Matches the head of each value ``keys`` names, changing none of them (one equality
    branch per head: every backend serves it from the ``blob_key`` index)."""
    heads = [{**dict(zip(BLOB_KEY, key)), "part": 0} for key in sorted(keys, key=repr)]
    return UpdateMany({"$or": heads}, {"$unset": {PROBE: ""}})


def withdraw(key: Key, new_values: set[Key]) -> list[WriteRequest]:
    """A refused put's undo: its registration deleted, the values it wrote marked."""
    requests: list[WriteRequest] = [DeleteOne({**marker_key(*key), DOOMED: {"$exists": False}})]
    if new_values:
        requests.append(UpdateMany(blob_keys_query(new_values), {"$set": {DOOMED: True}}))
    return requests


def landed_whole(result: BulkWriteResult, upserts: int, probed: int) -> bool:
    """Whether a put's bulk write (``register`` + ``upserts`` value upserts + ``probe`` of
    ``probed`` heads) found no tombstone and every probed head."""
    api = result.bulk_api_result
    tombstones = int(api["nModified"])
    heads = int(api["nMatched"]) - (upserts + 1 - int(api["nUpserted"])) - tombstones
    return tombstones == 0 and heads == probed


def probe_checkpoint(key: Mapping[str, Any]) -> UpdateOne:
    """Matches checkpoint ``key`` (in a bulk write after an upsert), changing nothing."""
    return UpdateOne(dict(key), {"$unset": {PROBE: ""}})


def probed_checkpoint(result: BulkWriteResult) -> bool:
    """Whether ``[checkpoint upsert, probe_checkpoint]`` found the probed checkpoint."""
    api = result.bulk_api_result
    return int(api["nMatched"]) - (1 - int(api["nUpserted"])) > 0


def tombstones(keys: Iterable[Key], token: ObjectId, now: datetime) -> list[WriteRequest]:
    """Tombstones on checkpoints (or, for ``(thread_id, "", None)``, threads)."""
    return [
        UpdateOne(marker_key(*key), {"$set": {DOOMED: token, "at": now}}, upsert=True)
        for key in sorted(keys, key=repr)
    ]


def tombstones_query(keys: Iterable[Key], token: ObjectId) -> dict[str, Any]:
    clauses = [marker_key(*key) for key in sorted(keys, key=repr)]
    return {"$or": clauses, DOOMED: token}


def pending_parents(
    markers: Iterable[Mapping[str, Any]], landed: set[Key], since: datetime
) -> set[Key]:
    """Parents of the checkpoints registered since ``since`` and not stored (yet)."""
    return {
        (m["thread_id"], m["checkpoint_ns"], m["parent"])
        for m in _registrations(markers, since)
        if _key(m) not in landed and m.get("parent") is not None
    }


def registered(markers: Iterable[Mapping[str, Any]], since: datetime) -> set[Key]:
    """Checkpoints registered since ``since``."""
    return {_key(m) for m in _registrations(markers, since)}


def active_threads(
    markers: Iterable[Mapping[str, Any]],
    created: Mapping[Key, datetime],
    cutoff: datetime,
    young: datetime,
) -> set[str]:
    """Threads with a checkpoint registered since ``young`` that is not stored (yet), or
    stored since ``cutoff`` (``created``: when each registered checkpoint was stored)."""
    return {
        m["thread_id"]
        for m in _registrations(markers, young)
        if _key(m) not in created or _aware(created[_key(m)]) >= cutoff
    }


def _key(marker: Mapping[str, Any]) -> Key:
    return (marker["thread_id"], marker["checkpoint_ns"], marker["version"])


def _registrations(markers: Iterable[Mapping[str, Any]], since: datetime) -> list[Any]:
    return [m for m in markers if DOOMED not in m and _aware(m["at"]) >= since]


def obsolete_query(
    markers: Sequence[Mapping[str, Any]],
    stored: set[Key],
    token: ObjectId,
    since: datetime,
    now: datetime,
) -> dict[str, Any] | None:
    """Markers that protect nothing any more, each matched only in the state it was read
    in: this call's tombstones, and tombstones of checkpoints (threads) no longer stored
    or past their lease; registrations of stored checkpoints, and those older than
    ``since`` (a put that never finished)."""
    threads = {key[0] for key in stored}
    registrations: list[Any] = []
    by_token: dict[Any, list[Any]] = {}
    for m in markers:
        key = _key(m)
        if DOOMED in m:
            gone = key[0] not in threads if key[2] is None else key not in stored
            expired = _aware(m["at"]) <= now - TOMBSTONE_LEASE
            if m[DOOMED] == token or gone or expired:
                by_token.setdefault(m[DOOMED], []).append(m["_id"])
        elif key in stored or _aware(m["at"]) < since:
            registrations.append(m["_id"])
    clauses = [{"_id": {"$in": ids}, DOOMED: t} for t, ids in by_token.items()]
    if registrations:
        clauses.append({"_id": {"$in": registrations}, DOOMED: {"$exists": False}})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def _aware(at: datetime) -> datetime:
    """``at`` as stored; PyMongo returns naive UTC datetimes unless told otherwise."""
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)
