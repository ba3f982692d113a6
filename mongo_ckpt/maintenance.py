"""Maintenance next to live writers: how a ``put`` and maintenance on the same thread see
each other without transactions.

A ``put`` continues from a parent checkpoint it read earlier (a node may run for minutes
in between); its checkpoint shares the parent's stored values and, for DeltaChannels,
rebuilds from the parent's history. Maintenance may be deleting that parent at the same
moment. Each side writes first and reads second, on the parent's own document, so at
least one of them sees the other:

- a ``put`` writes its checkpoint and, in the same ordered bulk write, probes its parent:
  the probe matches only a parent that is stored and carries no tombstone. No match, and
  the put reads the parent: one with a live tombstone (judged on the server's clock), or
  one that is gone while a value the checkpoint shares is gone or marked, takes the
  checkpoint back and raises ``StaleParentError``; a parent never stored is accepted;
- maintenance sets a tombstone (``doomed``, ``doomed_at``) on each checkpoint it means to
  delete, then reads the thread's checkpoints again: one stored meanwhile is a survivor,
  so the values and the ancestry it needs stay (its parent among them).

A tombstone is live for ``TOMBSTONE_LEASE``: one left by a call that was cut stops puts
no longer than that.

This module holds both sides: the put's probe and take-back (``probe_parent``,
``judge_parent``), and every operation that deletes (``prune``, ``delete_for_runs``,
``delete_thread``, the retention sweep), each taking the ``forget`` of the saver's
memory of the threads it deletes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from mongo_ckpt.calls import (
    Document,
    Operation,
    aggregate,
    delete_many,
    distinct,
    find,
    update_many,
    update_one,
)
from mongo_ckpt.clock import aware, server_now
from mongo_ckpt.delta import needed_ancestors
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import coerce_id, coerce_ids
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINT_KEY,
    CHECKPOINTS,
    PENDING,
    WRITE_KEY,
    WRITES,
)
from mongo_ckpt.listdelta import chains_of
from mongo_ckpt.payload import stray_parts
from mongo_ckpt.reading import (
    SKELETON,
    blob_keys_query,
    inactive_threads_pipeline,
    key_of,
    keys_query,
    needed_values,
)

DOOMED, DOOMED_AT = "doomed", "doomed_at"
DUPLICATE_KEY = 11000
PROBE = "probe"  # a field no document has: unsetting it counts a match, changes nothing
# Far longer than the few calls between a maintenance call's tombstones and its deletes.
TOMBSTONE_LEASE = timedelta(minutes=10)
# Value and write documents no checkpoint names are deleted by maintenance once this old:
# a put writes its values before its checkpoint, so a younger one may be on its way.
STRAY_AGE = timedelta(hours=1)
SWEEP_BATCH = 500  # threads per round of the retention sweep: no command carries every id
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")
# Set on the writes and values of checkpoints being deleted, before the checkpoints go:
# once no checkpoint names them, the mark is how any later maintenance finds them.
MARK = {"$set": {DOOMED: True}}
UNTOMBSTONE = {"$unset": {DOOMED: "", DOOMED_AT: ""}}
HEAD_FIELDS = dict.fromkeys((*BLOB_KEY, "base", DOOMED), 1)
Forget = Callable[[Sequence[str]], None]
"""Drops what a saver instance remembers of the given threads (they are being deleted)."""


class StaleParentError(MongoCkptError, LookupError):
    """A ``put`` continued from a checkpoint that is deleted, or being deleted."""

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent: str) -> None:
        super().__init__(
            f"checkpoint {checkpoint_id!r} (thread_id={thread_id!r} "
            f"checkpoint_ns={checkpoint_ns!r}) was not stored: its parent {parent!r} is "
            "deleted, or being deleted (prune, delete_for_runs, delete_thread or the "
            "retention sweep); continue from a checkpoint that still exists"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.checkpoint_id, self.parent = checkpoint_id, parent


@dataclass
class Deleted:
    """What a deleting call deleted: the threads and the documents per collection."""

    threads: list[str] = field(default_factory=list)
    documents: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((CHECKPOINTS, BLOBS, WRITES), 0)
    )

    def add(self, collection: str, count: int) -> None:
        self.documents[collection] += count


# -- the put's side ----------------------------------------------------------------


def probe_parent(parent: Mapping[str, Any], child_id: str) -> UpdateOne:
    """Matches the parent checkpoint (key ``parent``) if it carries no tombstone at all, and
    fails otherwise, so an ordered bulk write stops before the child's confirmation.

    It fails by its upsert: the document it would insert has the key of the child
    ``child_id``, just written, which the unique key index refuses (``E11000``); a
    matched parent is not touched (``$unset`` of a field no document has). No clock here:
    whether a tombstone it misses on is still live is judged afterwards, on the server's
    clock (``is_live``).
    """
    update = {"$unset": {PROBE: ""}, "$setOnInsert": {"checkpoint_id": child_id}}
    return UpdateOne({**parent, DOOMED: {"$exists": False}}, update, upsert=True)


def probe_missed(error: BulkWriteError) -> bool:
    """Whether ``[checkpoint upsert, probe_parent, confirm]`` failed at the probe alone."""
    errors = error.details.get("writeErrors", [])
    return [(e.get("index"), e.get("code")) for e in errors] == [(1, DUPLICATE_KEY)]


def upserted(error: BulkWriteError) -> set[int]:
    """The indexes of the requests a failed bulk write inserted by upsert."""
    return {int(u["index"]) for u in error.details.get("upserted", [])}


def is_live(doc: Mapping[str, Any], now: datetime) -> bool:
    """Whether checkpoint ``doc`` carries a tombstone younger than ``TOMBSTONE_LEASE`` at
    the server's time ``now`` (an expired one counts as none)."""
    if DOOMED not in doc:
        return False
    doomed_at = doc.get(DOOMED_AT)
    return not isinstance(doomed_at, datetime) or aware(doomed_at) > now - TOMBSTONE_LEASE


def tombstone(token: ObjectId, now: datetime) -> dict[str, Any]:
    return {"$set": {DOOMED: token, DOOMED_AT: now}}


def judge_parent(
    key: Mapping[str, str],
    parent_id: str,
    doc: Mapping[str, Any],
    inserted: set[Any],
    mine: bool,
) -> Operation[None]:
    """After a probe that missed the parent: accept a parent whose tombstone expired (on
    the server's clock), or one never stored when every value the checkpoint ``doc`` names
    is stored, unmarked, with the chain it names (and, unless this call inserted it, named
    by another stored checkpoint), and no DeltaChannel replays history; otherwise take
    the checkpoint back (``mine``: this call inserted it; ``inserted``: the value keys it
    inserted)."""
    parent = {**key, "checkpoint_id": parent_id}
    found = yield from find(CHECKPOINTS, parent, projection={DOOMED: 1, DOOMED_AT: 1})
    unreadable = False
    if found:
        if not is_live(found[0], (yield from server_now())):
            return
    elif not doc["replay"]:
        named = needed_values([doc])
        heads: list[Document] = []
        if named:
            query = {**blob_keys_query(named), "part": 0}
            heads = yield from find(BLOBS, query, projection=HEAD_FIELDS)
        if _chains_stored(heads, chains_of(doc["values"])) and (
            yield from _still_named(key, named - inserted, mine)
        ):
            return
        unreadable = len(heads) < len(named)
    yield from _take_back(key, parent_id, inserted, mine, hide=unreadable)


def _chains_stored(heads: Iterable[Mapping[str, Any]], chains: Mapping[str, Sequence[Any]]) -> bool:
    """Whether every version ``chains`` name has a stored, unmarked head (``heads``) whose
    base is the version before it in its chain (none for the first)."""
    by_key = {(h["channel"], h["version"]): h for h in heads}
    for channel, chain in chains.items():
        for position, version in enumerate(chain):
            head = by_key.get((channel, version))
            if head is None or head.get(DOOMED):
                return False
            if head.get("base") != (chain[position - 1] if position else None):
                return False
    return True


def _still_named(key: Mapping[str, str], borrowed: set[Any], mine: bool) -> Operation[bool]:
    """Whether every value in ``borrowed`` (named by the checkpoint ``key``, not inserted
    by this call) is named by a stored checkpoint other than one this call inserted
    (``mine``): with its parent absent, a value no stored checkpoint names is one
    ``delete_thread`` is about to delete."""
    if not borrowed:
        return True
    query: dict[str, Any] = {
        "thread_id": key["thread_id"],
        "checkpoint_ns": key["checkpoint_ns"],
        "$or": [
            {"values": {"$elemMatch": {"channel": ch, "version": v}}}
            for _, _, ch, v in sorted(borrowed, key=repr)
        ],
    }
    if mine:
        query["checkpoint_id"] = {"$ne": key["checkpoint_id"]}
    found = yield from find(CHECKPOINTS, query, projection=SKELETON)
    return borrowed <= needed_values(found)


def _take_back(
    key: Mapping[str, str], parent_id: str, inserted: set[Any], mine: bool, *, hide: bool
) -> Operation[None]:
    """Delete the checkpoint if this call inserted it (``mine``), else make it pending again
    when ``hide`` (a value it names is gone: an earlier attempt cut before its probe, which
    this call's confirmation would otherwise show); leave the values it inserted marked for
    maintenance (which keeps any a stored checkpoint names); raise ``StaleParentError``."""
    thread_id, checkpoint_ns, checkpoint_id = key_of(key)
    if mine:
        yield from delete_many(CHECKPOINTS, key)
    elif hide:
        yield from update_one(CHECKPOINTS, key, {"$set": {PENDING: True}}, upsert=False)
    yield from mark_values(inserted)
    raise StaleParentError(thread_id, checkpoint_ns, checkpoint_id, parent_id)


def mark_values(keys: set[Any]) -> Operation[None]:
    """Mark the values of exact ``(thread, ns, channel, version)`` keys for maintenance."""
    if keys:
        yield from update_many(BLOBS, blob_keys_query(keys), MARK)


# -- deleting ----------------------------------------------------------------------


def prune(forget: Forget, thread_ids: Sequence[str], strategy: str) -> Operation[None]:
    """``keep_latest``: each namespace's newest checkpoint (and the ancestors its
    DeltaChannels replay from) stays; ``delete`` (``delete_all``): the threads go whole."""
    ids = coerce_ids(thread_ids, "thread_ids")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"prune strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}")
    if not ids:
        return
    if strategy in ("delete", "delete_all"):
        yield from delete_threads(forget, ids)
        return
    forget(ids)
    _, doomed = yield from prune_plan(ids)
    yield from _delete_checkpoints(ids, doomed)


def prune_plan(thread_ids: Sequence[str]) -> Operation[tuple[list[Document], list[Document]]]:
    """What ``keep_latest`` would delete: ``(skeletons of the threads, doomed ones)``."""
    skeletons = yield from _skeletons(coerce_ids(thread_ids, "thread_ids"))
    latest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for s in skeletons:
        ns_key = key_of(s)[:2]
        if ns_key not in latest or s["checkpoint_id"] > latest[ns_key]["checkpoint_id"]:
            latest[ns_key] = s
    # Keep each namespace's latest checkpoint and the ancestors its DeltaChannels replay.
    keep = {key_of(s) for s in latest.values()} | needed_ancestors(skeletons, latest.values())
    return skeletons, [s for s in skeletons if key_of(s) not in keep]


def delete_for_runs(forget: Forget, run_ids: Sequence[str]) -> Operation[None]:
    """Delete the checkpoints of ``run_ids`` (except the ancestors a survivor replays
    DeltaChannels from), their writes, and the values only they need."""
    ids = coerce_ids(run_ids, "run_ids")
    if not ids:
        return
    threads = yield from distinct(CHECKPOINTS, "thread_id", {"run_id": {"$in": ids}})
    # With no checkpoint of the runs left, this still finishes an earlier, cut call.
    skeletons = (yield from _skeletons(threads)) if threads else []
    forget(threads)
    runs = set(ids)
    survivors = [s for s in skeletons if s.get("run_id") not in runs]
    # A run's checkpoint that a surviving checkpoint rebuilds DeltaChannel state from stays.
    keep = needed_ancestors(skeletons, survivors)
    doomed = [s for s in skeletons if s.get("run_id") in runs and key_of(s) not in keep]
    yield from _delete_checkpoints(threads, doomed)


def delete_thread(forget: Forget, thread_id: str) -> Operation[None]:
    """Delete every checkpoint, write and value of ``thread_id``."""
    query = {"thread_id": coerce_id(thread_id, "thread_id")}
    forget([query["thread_id"]])
    yield from _delete_whole(query)


def delete_threads(forget: Forget, thread_ids: Sequence[str]) -> Operation[Deleted]:
    """Delete the threads whole (``prune`` strategy ``delete``); what was deleted."""
    ids = coerce_ids(thread_ids, "thread_ids")
    forget(ids)
    deleted = yield from _delete_whole({"thread_id": {"$in": sorted(ids)}})
    deleted.threads = sorted(set(ids))
    return deleted


def _delete_whole(threads: Mapping[str, Any]) -> Operation[Deleted]:
    deleted = Deleted()
    # Checkpoints go first so a reader never sees one whose values are gone.
    for collection in (CHECKPOINTS, WRITES, BLOBS):
        deleted.add(collection, (yield from delete_many(collection, threads)).deleted_count)
    return deleted


def sweep_expired(forget: Forget, ttl: float, batch: int = SWEEP_BATCH) -> Operation[list[str]]:
    """Delete every thread idle for longer than ``ttl`` seconds by the server's clock,
    ``batch`` threads at a time; return their ids."""
    now = yield from server_now()
    cutoff = now - timedelta(seconds=ttl)
    docs = yield from aggregate(CHECKPOINTS, inactive_threads_pipeline(cutoff))
    deleted = yield from delete_idle(forget, sorted(doc["_id"] for doc in docs), cutoff, batch)
    return deleted.threads


def delete_idle(
    forget: Forget, thread_ids: Sequence[str], cutoff: datetime, batch: int = SWEEP_BATCH
) -> Operation[Deleted]:
    """Delete the threads of ``thread_ids`` that have no checkpoint stored since
    ``cutoff`` (a time of the server's clock), ``batch`` threads at a time.

    The ids may have been chosen long before (a confirmation prompt in between): each
    thread is judged again, after its tombstones, so a thread that became active is
    spared.
    """
    ids = sorted(set(coerce_ids(thread_ids, "thread_ids")))
    deleted = Deleted()
    for start in range(0, len(ids), batch):
        yield from _expire(forget, ids[start : start + batch], cutoff, deleted)
    if not ids:  # it finishes a sweep (or prune) cut after its delete
        now = yield from server_now()
        yield from _delete_unneeded([], now, deleted)
    return deleted


def _expire(
    forget: Forget, thread_ids: Sequence[str], cutoff: datetime, deleted: Deleted
) -> Operation[None]:
    """Delete those of ``thread_ids`` idle since ``cutoff``; count them into ``deleted``."""
    now = yield from server_now()
    # Tombstones first, then a look for checkpoints stored since the cutoff: a put
    # that came first makes its thread active again; one that comes later finds its
    # parent tombstoned and takes its checkpoint back.
    token = ObjectId()
    threads_query = {"thread_id": {"$in": list(thread_ids)}}
    yield from update_many(CHECKPOINTS, threads_query, tombstone(token, now))
    recent = {**threads_query, "created_at": {"$gte": cutoff}}
    active = set((yield from distinct(CHECKPOINTS, "thread_id", recent)))
    if (yield from _lease_renewed(threads_query, token, now)):
        active = set((yield from distinct(CHECKPOINTS, "thread_id", recent)))
    if active:
        spared = {"thread_id": {"$in": sorted(active)}, DOOMED: token}
        yield from update_many(CHECKPOINTS, spared, UNTOMBSTONE)
    expired = [t for t in thread_ids if t not in active]
    forget(expired)
    if expired:
        # Marked first, as in ``_delete_checkpoints``: what a cut sweep leaves is marked.
        threads_query = {"thread_id": {"$in": expired}}
        yield from update_many(WRITES, threads_query, MARK)
        yield from update_many(BLOBS, threads_query, MARK)
        result = yield from delete_many(CHECKPOINTS, threads_query)
        deleted.add(CHECKPOINTS, result.deleted_count)
        deleted.threads.extend(expired)
    yield from _delete_unneeded(expired, now, deleted)


def _lease_renewed(query: Mapping[str, Any], token: ObjectId, since: datetime) -> Operation[bool]:
    """Renew this call's tombstones (set at ``since``, server time) when more than half
    their lease has passed by the server's clock: a put meanwhile may have seen them
    expired, so the caller reads the threads again (``True``)."""
    now = yield from server_now()
    if now - since <= TOMBSTONE_LEASE / 2:
        return False
    yield from update_many(CHECKPOINTS, {**query, DOOMED: token}, {"$set": {DOOMED_AT: now}})
    return True


def _skeletons(thread_ids: Iterable[str]) -> Operation[list[Document]]:
    query = {"thread_id": {"$in": sorted(thread_ids)}}
    return (yield from find(CHECKPOINTS, query, projection=SKELETON))


def _delete_checkpoints(
    thread_ids: Sequence[str], doomed: Sequence[Mapping[str, Any]]
) -> Operation[None]:
    """Delete ``doomed`` checkpoints, their writes, and the values only they need.

    Each step is safe to cut and retry:

    1. tombstone the doomed checkpoints (chosen from an earlier read) at the server's
       time, then read the threads' checkpoints again (and once more after renewing
       the tombstones when half their lease has passed: ``_lease_renewed``): one
       stored since is a survivor, and the doomed ones it (or any survivor) rebuilds
       DeltaChannels from are spared. A put that comes after the tombstones finds its
       parent tombstoned and takes its checkpoint back, so no checkpoint is stored on a
       parent about to go;
    2. mark the writes of the checkpoints still doomed, and the value versions that
       they, and no stored survivor, need (``values`` names list-delta bases too, so
       a base lives as long as a checkpoint rebuilt from it);
    3. delete those checkpoints;
    4. delete marked documents no checkpoint needs (``_delete_unneeded``, which also
       finishes any earlier call that was cut).
    """
    planned = {key_of(s) for s in doomed}
    now = yield from server_now()
    if planned:
        token = ObjectId()
        yield from update_many(CHECKPOINTS, keys_query(planned), tombstone(token, now))
        stored = yield from _skeletons(thread_ids)
        if (yield from _lease_renewed(keys_query(planned), token, now)):
            stored = yield from _skeletons(thread_ids)
        alive = [s for s in stored if key_of(s) not in planned]
        spared = planned & needed_ancestors(stored, alive)
        if spared:
            mine = {**keys_query(spared), DOOMED: token}
            yield from update_many(CHECKPOINTS, mine, UNTOMBSTONE)
        gone = planned - spared
        survivors = [s for s in stored if key_of(s) not in gone]
        unused = needed_values(s for s in doomed if key_of(s) in gone)
        unused -= needed_values(survivors)
        if gone:
            yield from update_many(WRITES, keys_query(gone), MARK)
            if unused:
                yield from update_many(BLOBS, blob_keys_query(unused), MARK)
            yield from delete_many(CHECKPOINTS, keys_query(gone))
    yield from _delete_unneeded(thread_ids, now, Deleted())


def _delete_unneeded(thread_ids: Iterable[str], now: datetime, deleted: Deleted) -> Operation[None]:
    """Delete the writes and values that no checkpoint needs, read now: the marked ones
    (of this call, or of an earlier call that was cut, in any thread) and, in
    ``thread_ids``, those older than ``STRAY_AGE`` at ``now`` (the server's time; a
    ``put`` or ``put_writes`` cut and never retried), counted into ``deleted``. Parts
    of such documents go too, and so do old parts that their head does not join
    (``payload.stray_parts``)."""
    threads = set(thread_ids)
    cutoff = ObjectId.from_datetime(now - STRAY_AGE)
    # The threads' documents by the key index; their age is judged here, by ``_id``.
    query = {"$or": [{DOOMED: True}, {"thread_id": {"$in": sorted(threads)}}]}
    found: dict[str, list[Document]] = {}
    stray: set[Any] = set()
    for collection, fields in ((WRITES, WRITE_KEY), (BLOBS, BLOB_KEY)):
        projection = dict.fromkeys((*fields, "part", "vid", DOOMED), 1)
        docs = yield from find(collection, query, projection=projection)
        found[collection] = [d for d in docs if d.get(DOOMED) or _older(d, cutoff)]
        # Parts no head joins, judged against every head of the threads.
        own = [d for d in docs if d["thread_id"] in threads]
        stray.update(stray_parts(own, fields, headless=True))
    if not any(found.values()):
        return
    current = yield from _skeletons({d["thread_id"] for ds in found.values() for d in ds})
    needed = {
        WRITES: {key_of(s) for s in current},
        BLOBS: needed_values(current),
    }
    for collection, owner_key in ((WRITES, CHECKPOINT_KEY), (BLOBS, BLOB_KEY)):
        docs = found[collection]
        ids = {
            d["_id"]
            for d in docs
            if key_of(d, owner_key) not in needed[collection]
            or (d["_id"] in stray and _older(d, cutoff))
        }
        if ids:
            owners = sorted({d["thread_id"] for d in docs if d["_id"] in ids})
            chosen = {"thread_id": {"$in": owners}, "_id": {"$in": sorted(ids)}}
            result = yield from delete_many(collection, chosen)
            deleted.add(collection, result.deleted_count)


def _older(doc: Mapping[str, Any], cutoff: ObjectId) -> bool:
    """Whether ``doc`` was inserted before ``cutoff`` (by its ObjectId ``_id``)."""
    return isinstance(doc["_id"], ObjectId) and doc["_id"] < cutoff
