"""Maintenance next to live writers: how a ``put`` and maintenance on the same thread see
each other without transactions.

A ``put`` continues from a parent checkpoint it read earlier (a node may run for minutes
in between); its checkpoint shares the parent's stored values and, for DeltaChannels,
rebuilds from the parent's history. Maintenance may be deleting that parent at the same
moment. The protocol keeps these invariants; every step below names the ones it keeps.

- **V, visible whole**: a checkpoint with a parent is visible only once its put's probe
  found the parent stored without a tombstone (it is written ``pending``, then confirmed
  in the same ordered bulk write), so what it names and replays was stored then.
- **S, seen**: each side writes first and reads second, on the parent's own document: a
  put writes its checkpoint, then probes the parent; maintenance tombstones the
  checkpoints it means to delete, then reads the threads. So at least one sees the other:
  the put finds the tombstone and takes its checkpoint back (``StaleParentError``), or
  maintenance finds the checkpoint stored and keeps it as a survivor.
- **K, kept**: maintenance deletes only checkpoints that still carry a tombstone and
  that no survivor of its last look rebuilds DeltaChannels from, and only values and
  writes that no stored checkpoint needs.
- **O, own**: a live tombstone is never taken over, and a call lifts only its own (by its
  token): two calls on one thread never undo each other.
- **L, lease**: a tombstone is live for ``TOMBSTONE_LEASE``; a call deletes only while its
  tombstones are live by the server's clock (renewed, and the look read again, when half
  the lease passed), and one left by a cut call stops puts no longer than that.
- **M, marks**: what a call means to delete is marked (``doomed: true``) before the
  checkpoints naming it go, so that any later call deletes it if that call is cut; a mark
  on a document that a checkpoint left stored needs is lifted by the call that set it.
- **C, clock**: every judgement of time (the sweep's cutoff, a tombstone's age,
  ``STRAY_AGE``) is the server's, never a client's.

This module holds both sides: the put's probe and take-back (``probe_parent``,
``judge_parent``), and every operation that deletes (``prune``, ``delete_for_runs``,
``delete_thread``, the retention sweep), each the same sequence (``_delete_tombstoned``
then ``_delete_unneeded``) with its own choice of what to delete and what to spare,
each taking the ``forget`` of the saver's memory of the threads it deletes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NoReturn

from bson import ObjectId
from pymongo import DeleteMany, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError

from mongo_ckpt import thread_settings
from mongo_ckpt.calls import (
    Document,
    Operation,
    WriteRequest,
    aggregate,
    bulk_write,
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
    THREADS,
    WRITE_KEY,
    WRITES,
)
from mongo_ckpt.listdelta import chains_of
from mongo_ckpt.payload import stray_parts
from mongo_ckpt.reading import (
    SKELETON,
    Key,
    blob_keys_query,
    inactive_threads_pipeline,
    key_of,
    keys_query,
    needed_values,
)

DOOMED, DOOMED_AT = "doomed", "doomed_at"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the cutoff of a thread that never expires
TOUCHED_AT = "touched_at"
"""On value documents: the server's time of the last write of the value (its first or a
retry's), by which maintenance judges a value no checkpoint names; documents written before
it existed are judged by their ``_id``."""
DUPLICATE_KEY = 11000
PROBE = "probe"  # a field no document has: unsetting it counts a match, changes nothing
# Far longer than the few calls between a maintenance call's tombstones and its deletes.
TOMBSTONE_LEASE = timedelta(minutes=10)
# Value and write documents no checkpoint names are deleted by maintenance once this old:
# a put writes its values before its checkpoint, so a younger one may be on its way.
STRAY_AGE = timedelta(hours=1)
SWEEP_BATCH = 500  # threads per round of the retention sweep: no command carries every id
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")
SWEEP_STRATEGIES = ("delete", "keep_latest")  # what the sweep does to an expired thread
# Set on the writes and values of checkpoints being deleted, before the checkpoints go:
# once no checkpoint names them, the mark is how any later maintenance finds them.
MARK, UNMARK = {"$set": {DOOMED: True}}, {"$unset": {DOOMED: ""}}
UNTOMBSTONE = {"$unset": {DOOMED: "", DOOMED_AT: ""}}
HEAD_FIELDS = dict.fromkeys((*BLOB_KEY, "base", DOOMED), 1)
LOOK = {**SKELETON, DOOMED: 1, PENDING: 1, "created_at": 1}  # maintenance's reads of threads
Forget = Callable[[Sequence[str]], None]
"""Drops what a saver instance remembers of the given threads (they are being deleted)."""
Spare = Callable[[Sequence[Document], set[Key]], set[Key]]
"""Which of some doomed checkpoints (keys) to keep, given the threads' checkpoints as read."""


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
        default_factory=lambda: dict.fromkeys((CHECKPOINTS, BLOBS, WRITES, THREADS), 0)
    )

    def add(self, collection: str, count: int) -> None:
        self.documents[collection] += count


# -- the put's side ----------------------------------------------------------------


def probe_parent(parent: Mapping[str, Any], child_id: str, stored_id: Any = None) -> UpdateOne:
    """Matches the parent checkpoint (key ``parent``) if it carries no tombstone at all, and
    fails otherwise, so an ordered bulk write stops before the child's confirmation.

    It fails by its upsert: the document it would insert has the key of the child
    ``child_id``, just written, which the unique key index refuses (``E11000``); a
    matched parent is not touched (``$unset`` of a field no document has). No clock here:
    whether a tombstone it misses on is still live is judged afterwards, on the server's
    clock (``is_live``).

    ``stored_id``: the parent's ``_id``, where the saver has seen it, matched first. It
    only narrows the match, and a parent stored again under another ``_id`` is a miss that
    ``judge_parent`` accepts; with it the wire test server, which otherwise reads every
    checkpoint of the thread to check ``doomed``, reads the one document.
    """
    update = {"$unset": {PROBE: ""}, "$setOnInsert": {"checkpoint_id": child_id}}
    by_id = {} if stored_id is None else {"_id": stored_id}
    return UpdateOne({**by_id, **parent, DOOMED: {"$exists": False}}, update, upsert=True)


def probe_missed(error: BulkWriteError) -> bool:
    """Whether ``[checkpoint upsert, probe_parent, confirm]`` failed at the probe alone."""
    errors = error.details.get("writeErrors", [])
    return [(e.get("index"), e.get("code")) for e in errors] == [(1, DUPLICATE_KEY)]


def is_live(doc: Mapping[str, Any], now: datetime) -> bool:
    """Whether checkpoint ``doc`` carries a tombstone younger than ``TOMBSTONE_LEASE`` at
    the server's time ``now`` (an expired one counts as none)."""
    if DOOMED not in doc:
        return False
    doomed_at = doc.get(DOOMED_AT)
    return not isinstance(doomed_at, datetime) or aware(doomed_at) > now - TOMBSTONE_LEASE


def tombstone(token: ObjectId, now: datetime) -> dict[str, Any]:
    return {"$set": {DOOMED: token, DOOMED_AT: now}}


def unclaimed(query: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``query`` narrowed to checkpoints without a live tombstone at the server's time
    ``now``: a maintenance call never takes over another's live tombstone (``is_live``)."""
    # No ``doomed_at`` (no tombstone) or an older one; no ``$or``, so ``query``'s own
    # fields still pick the index.
    return {**query, DOOMED_AT: {"$not": {"$gte": now - TOMBSTONE_LEASE}}}


def half_spent(query: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The checkpoints of ``query`` carrying a tombstone set more than half a lease before
    the server's time ``now``, by their stored ``doomed_at``."""
    return {**query, DOOMED: {"$exists": True}, DOOMED_AT: {"$lt": now - TOMBSTONE_LEASE / 2}}


def judge_parent(
    key: Mapping[str, str],
    parent_id: str,
    doc: Mapping[str, Any],
    inserted: set[Any],
    mine: bool,
) -> Operation[None]:
    """After a probe that missed the parent: accept a parent stored without a live
    tombstone (one expired on the server's clock, or none: stored under another ``_id``
    than the probe named), or one never stored when every value the checkpoint ``doc`` names
    is stored, unmarked, with the chain it names (and, unless this call inserted it, named
    by another stored checkpoint), and no DeltaChannel replays history; otherwise take
    the checkpoint back (``mine``: this call inserted it; ``inserted``: the value keys it
    inserted) and raise ``StaleParentError``."""
    parent = {**key, "checkpoint_id": parent_id}
    found = yield from find(CHECKPOINTS, parent, projection={DOOMED: 1, DOOMED_AT: 1})
    unreadable = False
    if found:
        if DOOMED not in found[0] or not is_live(found[0], (yield from server_now())):
            return
    elif not doc.get("replay"):
        named = needed_values([doc])
        heads: list[Document] = []
        if named:
            query = {**blob_keys_query(named), "part": 0}
            heads = yield from find(BLOBS, query, projection=HEAD_FIELDS)
        if _chains_stored(heads, chains_of(doc.get("values", ()))) and (
            yield from _still_named(key, named - inserted, mine)
        ):
            return
        unreadable = len(heads) < len(named)
    yield from _take_back(key, parent_id, inserted, mine, hide=unreadable)


def unmark_after_late_confirmation(
    key: Mapping[str, str], parent_id: str, doc: Mapping[str, Any]
) -> Operation[None]:
    """After ``judge_parent`` accepted and the confirmation went in a call of its own: if
    the parent now carries a tombstone or is gone, a maintenance call may have run between
    that read and the confirmation, found this checkpoint pending with its parent doomed
    (``_stillborn``) and marked the values it shares with the parent after its own last
    look. The checkpoint (``doc``) is visible now, so those marks are lifted, unless it
    carries a tombstone itself (the marks are then of the call deleting it). Where marks
    were lifted, the checkpoint is read once more: a call that tombstoned it since may have
    marked its values before the lift, so they are marked again for that call to delete."""
    ids = (parent_id, key["checkpoint_id"])
    query = keys_query((key["thread_id"], key["checkpoint_ns"], i) for i in ids)
    found = yield from find(CHECKPOINTS, query, projection=LOOK)
    by_id = {d["checkpoint_id"]: d for d in found}
    parent, own = by_id.get(parent_id), by_id.get(key["checkpoint_id"])
    if own is None or DOOMED in own or own.get(PENDING):
        return
    if parent is not None and DOOMED not in parent:
        return  # a call dooming it from now on sees this checkpoint confirmed
    named = needed_values([doc])
    if not named:
        return
    lifted = yield from update_many(BLOBS, {**blob_keys_query(named), DOOMED: True}, UNMARK)
    if lifted.modified_count:
        again = yield from find(CHECKPOINTS, dict(key), projection=LOOK)
        if not again or DOOMED in again[0]:
            yield from mark_values(named)


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
) -> Operation[NoReturn]:
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
    """What ``keep_latest`` would delete: ``(skeletons of the threads, doomed ones)``: all
    but each namespace's latest visible checkpoint and any pending one newer than it."""
    skeletons = yield from _skeletons(coerce_ids(thread_ids, "thread_ids"))
    latest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for s in skeletons:
        ns_key = key_of(s)[:2]
        if s.get(PENDING):
            continue
        if ns_key not in latest or s["checkpoint_id"] > latest[ns_key]["checkpoint_id"]:
            latest[ns_key] = s
    # A pending checkpoint newer than its namespace's latest visible one is a put in
    # flight: kept beside it (the put may still be refused, leaving that one the latest).
    in_flight = [
        s
        for s in skeletons
        if s.get(PENDING)
        and (
            (ns_key := key_of(s)[:2]) not in latest
            or s["checkpoint_id"] > latest[ns_key]["checkpoint_id"]
        )
    ]
    # Keep those and the ancestors their DeltaChannels replay.
    kept = [*latest.values(), *in_flight]
    keep = {key_of(s) for s in kept} | needed_ancestors(skeletons, kept)
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
    yield from delete_threads(forget, [coerce_id(thread_id, "thread_id")])


def delete_threads(forget: Forget, thread_ids: Sequence[str]) -> Operation[Deleted]:
    """Delete the threads whole (``delete_thread``, ``prune`` strategy ``delete``); what
    was deleted.

    By exact keys, as other maintenance: every checkpoint tombstoned at the look after
    the tombstones, its writes and the values it needs (``_delete_tombstoned``), then the
    threads' documents no checkpoint needs that are marked or older than ``STRAY_AGE``
    (``_delete_unneeded``). A put that lands meanwhile is refused when it continues
    from a checkpoint being deleted; one stored whole (without a parent, or with every
    value its own) keeps what it names.
    """
    ids = sorted(set(coerce_ids(thread_ids, "thread_ids")))
    deleted = Deleted(threads=ids)
    if not ids:
        return deleted
    forget(ids)
    own = yield from thread_settings.read(thread_settings.of(ids))
    now = yield from server_now()
    yield from _delete_tombstoned(ids, None, _none, now, deleted)
    yield from _delete_unneeded(ids, now, deleted)
    yield from _delete_settings(ids, own, deleted)
    return deleted


def sweep_expired(
    forget: Forget, ttl: float | None, batch: int = SWEEP_BATCH, strategy: str = "delete"
) -> Operation[list[str]]:
    """Expire every thread idle for longer than its ttl by the server's clock: its own
    (``thread_settings``), else ``ttl`` (``None``: only threads with one of their own
    expire), ``batch`` threads at a time: delete it whole (``"delete"``), or prune it to
    each namespace's latest checkpoint (``"keep_latest"``, as ``prune``); their ids."""
    check_sweep_strategy(strategy)
    now = yield from server_now()
    several = strategy == "keep_latest"
    found: list[Document] = []
    if ttl is not None:
        cutoff = now - timedelta(seconds=ttl)
        found += yield from aggregate(CHECKPOINTS, inactive_threads_pipeline(cutoff, several))
    own = yield from thread_settings.read(thread_settings.shorter_than(ttl))
    for ids in _batches(own, batch):
        found += yield from aggregate(CHECKPOINTS, inactive_threads_pipeline(None, several, ids))
    last = {doc["_id"]: aware(doc["last"]) for doc in found}
    for ids in _batches(set(last) - set(own), batch):
        own |= yield from thread_settings.read(thread_settings.of(ids))
    groups: dict[float, list[str]] = {}
    for thread_id, seen in last.items():
        setting = own.get(thread_id, thread_settings.Setting(None, None))
        limit = ttl if setting.ttl is None else setting.ttl
        seen = max(seen, setting.active_at or seen)
        if limit is not None and seen < _cutoff(now, limit):
            groups.setdefault(limit, []).append(thread_id)
    expired: list[str] = []
    for limit, ids in sorted(groups.items()):
        deleted = yield from delete_idle(forget, ids, _cutoff(now, limit), batch, strategy)
        expired += deleted.threads
    if not groups:  # it finishes a sweep cut after its delete
        yield from delete_idle(forget, [], now, batch, strategy)
    return sorted(expired)


def _batches(ids: Iterable[str], size: int) -> Iterator[list[str]]:
    """``ids`` in order, ``size`` at a time: no command carries more."""
    ordered = sorted(ids)
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def _own_cutoff(cutoff: datetime, now: datetime, setting: thread_settings.Setting) -> datetime:
    """The cutoff a thread with ``setting`` is judged by (``cutoff``, or its own ttl's when
    that spares it); ``EPOCH``, which spares it, once read since."""
    own = cutoff if setting.ttl is None else min(cutoff, _cutoff(now, setting.ttl))
    return EPOCH if setting.active_at is not None and setting.active_at >= own else own


def _cutoff(now: datetime, ttl: float) -> datetime:
    """When a thread last active before expires, with ``ttl`` (``math.inf``: never)."""
    return EPOCH if ttl == math.inf else now - timedelta(seconds=ttl)


def check_sweep_strategy(strategy: str) -> None:
    """``ValueError`` unless ``strategy`` is one of ``SWEEP_STRATEGIES``."""
    if strategy not in SWEEP_STRATEGIES:
        raise ValueError(
            f"ttl_strategy must be one of {SWEEP_STRATEGIES} (what expiry does to an idle "
            f"thread), got {strategy!r}"
        )


def delete_idle(
    forget: Forget,
    thread_ids: Sequence[str],
    cutoff: datetime,
    batch: int = SWEEP_BATCH,
    strategy: str = "delete",
) -> Operation[Deleted]:
    """Expire (``sweep_expired``'s ``strategy``) the threads of ``thread_ids`` that have no
    checkpoint stored since ``cutoff`` (a time of the server's clock), ``batch`` threads at
    a time.

    The ids may have been chosen long before (a confirmation prompt in between): each
    thread is judged again, after its tombstones, so a thread that became active is
    spared; so is one whose own ttl (``thread_settings``, read before the tombstones)
    has not passed since its last checkpoint, or read since the cutoff.
    """
    check_sweep_strategy(strategy)
    ids = set(coerce_ids(thread_ids, "thread_ids"))
    deleted = Deleted()
    for chosen in _batches(ids, batch):
        now = yield from server_now()
        own = yield from thread_settings.read(thread_settings.of(chosen))
        keep_latest = strategy == "keep_latest"
        yield from _expire(forget, chosen, cutoff, own, now, deleted, keep_latest)
    if not ids:  # it finishes a sweep (or prune) cut after its delete
        now = yield from server_now()
        yield from _delete_unneeded([], now, deleted)
    return deleted


def _expire(
    forget: Forget,
    thread_ids: Sequence[str],
    cutoff: datetime,
    own: Mapping[str, thread_settings.Setting],
    now: datetime,
    deleted: Deleted,
    keep_latest: bool,
) -> Operation[None]:
    """Delete those of ``thread_ids`` idle since ``cutoff`` (or by their ``own`` settings,
    read before the tombstones) with those settings or, ``keep_latest``, prune them to
    their latest checkpoints (and the ancestors those replay DeltaChannels from, as
    ``prune``); count them into ``deleted``.

    Tombstones first, then a look for checkpoints stored since the cutoff: a put that
    came first makes its thread active again, spared whole; one that comes later finds its
    parent tombstoned and takes its checkpoint back; one without a parent (a new
    conversation on the thread id) is not one this call tombstoned, so it stays.
    """
    cutoffs = {t: _own_cutoff(cutoff, now, setting) for t, setting in own.items()}
    planned = None
    if keep_latest:
        forget(thread_ids)
        _, doomed = yield from prune_plan(thread_ids)
        planned = {key_of(s) for s in doomed}
        if not planned:
            return

    def spare(stored: Sequence[Document], gone: set[Key]) -> set[Key]:
        recent = _active_threads(stored, cutoff, cutoffs)
        active = {k for k in gone if k[0] in recent}
        return active | _needed_by_survivors(stored, gone) if keep_latest else active

    stored = yield from _delete_tombstoned(thread_ids, planned, spare, now, deleted)
    recent = _active_threads(stored, cutoff, cutoffs)
    if planned is not None:
        deleted.threads.extend(sorted({k[0] for k in planned if k[0] not in recent}))
        yield from _delete_unneeded(thread_ids, now, deleted)
        return
    expired = [t for t in thread_ids if t not in recent]
    forget(expired)
    deleted.threads.extend(expired)
    yield from _delete_unneeded(expired, now, deleted)
    yield from _delete_settings(expired, own, deleted)


def _delete_settings(
    thread_ids: Sequence[str], own: Mapping[str, thread_settings.Setting], deleted: Deleted
) -> Operation[None]:
    """Delete the settings of the deleted ``thread_ids`` as ``own`` read them: one written
    since (a new conversation on the thread id, with its ``thread_ttl``) stays. A document
    with an owner lease (``leases``) keeps it, so a writer it was taken from stays fenced."""
    query = thread_settings.as_read(thread_ids, own)
    if query is not None:
        leased = {**query, "owner": {"$exists": True}}
        settings = {"$unset": dict.fromkeys(thread_settings.FIELDS, "")}
        requests: list[WriteRequest] = [
            DeleteMany({**query, "owner": {"$exists": False}}),
            UpdateMany(leased, settings),
        ]
        result = yield from bulk_write(THREADS, requests, ordered=False)
        deleted.add(THREADS, result.deleted_count)


def _lease_renewed(doomed: set[Key]) -> Operation[bool]:
    """Renew the tombstones on the checkpoints ``doomed`` (this call's or another's) set
    more than half their lease ago by the server's clock: a put meanwhile may have seen
    them expired, so the caller reads the threads again (``True``)."""
    now = yield from server_now()
    query = half_spent(keys_query(doomed), now)
    result = yield from update_many(CHECKPOINTS, query, {"$set": {DOOMED_AT: now}})
    return result.matched_count > 0


def _skeletons(thread_ids: Iterable[str]) -> Operation[list[Document]]:
    query = {"thread_id": {"$in": sorted(thread_ids)}}
    return (yield from find(CHECKPOINTS, query, projection=LOOK))


def _delete_checkpoints(
    thread_ids: Sequence[str], doomed: Sequence[Mapping[str, Any]]
) -> Operation[None]:
    """Delete ``doomed`` checkpoints, their writes, and the values only they need
    (``_delete_tombstoned``), sparing those a stored survivor rebuilds DeltaChannels
    from; then the marked documents no checkpoint needs (``_delete_unneeded``, which
    also finishes any earlier call that was cut)."""
    planned = {key_of(s) for s in doomed}
    now = yield from server_now()
    deleted = Deleted()
    if planned:
        yield from _delete_tombstoned(thread_ids, planned, _needed_by_survivors, now, deleted)
    yield from _delete_unneeded(thread_ids, now, deleted)


def _delete_tombstoned(
    thread_ids: Sequence[str],
    planned: set[Key] | None,
    spare: Spare,
    now: datetime,
    deleted: Deleted,
) -> Operation[list[Document]]:
    """Delete, by exact keys, the checkpoints ``planned`` (``None``: every checkpoint of
    ``thread_ids``) that carry a tombstone at the look, except those ``spare(stored,
    keys)`` keeps; return the threads' checkpoints as last read. Each step is safe to
    cut and retry:

    1. tombstone, at the server's time ``now``, the planned checkpoints without a live
       tombstone (S, O, C), then look: read the threads' checkpoints; one stored since
       carries no tombstone and is a survivor (S, K);
    2. spare (un-tombstone, by this call's token) what ``spare`` keeps (K, O), and mark
       the writes of the rest and the value versions that they, and no survivor, need
       (M; ``values`` names list-delta bases too, so a base lives as long as a
       checkpoint rebuilt from it); marks of an earlier pass on what is now spared or
       needed are lifted (M);
    3. renew the lease when half of it passed, and then look again and go back to 2 (L:
       a put may have seen a tombstone expired);
    4. delete those checkpoints that still carry a tombstone (K; ``deleted`` counts them);
    5. lift the marks this call set on documents left needed after all (M): those of
       checkpoints another call spared (``_unmark_spared``), and of pending checkpoints
       whose put confirmed them after the look (``_unmark_confirmed``).
    """
    token = ObjectId()
    threads = {"thread_id": {"$in": sorted(thread_ids)}}
    chosen = threads if planned is None else keys_query(planned)
    # 1. (S, O, C) tombstones, then (S, K) the look
    yield from update_many(CHECKPOINTS, unclaimed(chosen, now), tombstone(token, now))
    stored = yield from _skeletons(thread_ids)
    doomed = {
        key_of(s) for s in stored if DOOMED in s and (planned is None or key_of(s) in planned)
    }
    marked_writes: set[Key] = set()
    marked_values: set[Key] = set()
    while True:
        # 2. (K, O) spare, then (M) mark what goes and unmark what no longer does
        gone = doomed & {key_of(s) for s in stored}
        gone -= spare(stored, gone)
        if doomed - gone:
            kept = {**keys_query(doomed - gone), DOOMED: token}
            yield from update_many(CHECKPOINTS, kept, UNTOMBSTONE)
        stillborn = [s for s in stored if key_of(s) not in gone and _stillborn(s, gone)]
        survivors = [s for s in stored if key_of(s) not in gone and s not in stillborn]
        unused = needed_values(s for s in stored if key_of(s) in gone)
        unused -= needed_values(survivors)
        if gone - marked_writes:
            yield from update_many(WRITES, keys_query(gone - marked_writes), MARK)
        yield from mark_values(unused - marked_values)
        # Spared, or needed by a survivor, since the last pass: unmarked again (M).
        if marked_writes - gone:
            yield from update_many(WRITES, keys_query(marked_writes - gone), UNMARK)
        if marked_values - unused:
            yield from update_many(BLOBS, blob_keys_query(marked_values - unused), UNMARK)
        marked_writes, marked_values = gone, unused
        # 3. (L) half the lease gone: renewed, and the look again
        if not gone or not (yield from _lease_renewed(gone)):
            break
        stored = yield from _skeletons(thread_ids)
    if gone:
        # 4. (K) the delete
        query = {**keys_query(gone), DOOMED: {"$exists": True}}
        result = yield from delete_many(CHECKPOINTS, query)
        deleted.add(CHECKPOINTS, result.deleted_count)
        # 5. (M) this call's marks on what stays needed, lifted
        if result.deleted_count < len(gone):
            yield from _unmark_spared(gone, marked_values)
        if stillborn:
            yield from _unmark_confirmed(stillborn)
    return stored


def _unmark_spared(gone: set[Key], marked_values: set[Key]) -> Operation[None]:
    """Lift this call's marks from the checkpoints of ``gone`` it did not delete because
    another call spared them: found carrying that call's tombstone (never taken over),
    they were marked with this call's own, and that call lifted its tombstone since. The
    marks on their writes, and on the values among ``marked_values`` they need, go. Those
    read again tombstoned or gone are marked again: a call that tombstoned one since may
    have marked its documents before the lift, and would leave them behind unmarked."""
    found = yield from find(CHECKPOINTS, keys_query(gone), projection=LOOK)
    spared = {key_of(d): d for d in found if DOOMED not in d}
    if not spared:
        return
    yield from update_many(WRITES, keys_query(spared), UNMARK)
    needed = needed_values(spared.values()) & marked_values
    if needed:
        yield from update_many(BLOBS, blob_keys_query(needed), UNMARK)
    again = yield from find(CHECKPOINTS, keys_query(spared), projection=LOOK)
    live = {key_of(d) for d in again if DOOMED not in d}
    redo = [d for key, d in spared.items() if key not in live]
    if redo:
        yield from update_many(WRITES, keys_query(key_of(d) for d in redo), MARK)
        yield from mark_values(needed_values(redo) & marked_values)


def _stillborn(doc: Mapping[str, Any], gone: set[Key]) -> bool:
    """Whether ``doc`` is a pending checkpoint whose parent is among ``gone``: its put's
    probe misses that parent and the put takes it back (nothing confirms it), so the values
    it shares with the parent are marked with the parent's, not left behind unmarked."""
    parent = (doc["thread_id"], doc["checkpoint_ns"], doc.get("parent_checkpoint_id"))
    return bool(doc.get(PENDING)) and parent in gone


def _unmark_confirmed(stillborn: Sequence[Mapping[str, Any]]) -> Operation[None]:
    """Unmark the values of the ``stillborn`` checkpoints that were confirmed after all:
    a put whose probe passed just before the parent's tombstone confirms its checkpoint
    after the look that found it pending, and its values are no leftovers."""
    found = yield from find(CHECKPOINTS, keys_query(key_of(s) for s in stillborn), projection=LOOK)
    confirmed = [d for d in found if not d.get(PENDING)]
    if confirmed:
        yield from update_many(BLOBS, blob_keys_query(needed_values(confirmed)), UNMARK)


def _needed_by_survivors(stored: Sequence[Mapping[str, Any]], gone: set[Key]) -> set[Key]:
    """Spare the checkpoints of ``gone`` a survivor rebuilds DeltaChannels from (``Spare``)."""
    return gone & needed_ancestors(stored, [s for s in stored if key_of(s) not in gone])


def _none(stored: Sequence[Mapping[str, Any]], gone: set[Key]) -> set[Key]:
    """Spare nothing (``Spare``)."""
    return set()


def _active_threads(
    stored: Iterable[Mapping[str, Any]], cutoff: datetime, cutoffs: Mapping[str, datetime]
) -> set[str]:
    """The threads with a checkpoint of ``stored`` written at or after ``cutoff`` (or the
    thread's own cutoff in ``cutoffs``)."""
    return {
        s["thread_id"]
        for s in stored
        if isinstance(s.get("created_at"), datetime)
        and aware(s["created_at"]) >= cutoffs.get(s["thread_id"], cutoff)
    }


def _delete_unneeded(thread_ids: Iterable[str], now: datetime, deleted: Deleted) -> Operation[None]:
    """Delete the writes and values that no checkpoint needs, read now: the marked ones
    (of this call, or of an earlier call that was cut, in any thread) and, in
    ``thread_ids``, those older than ``STRAY_AGE`` at ``now`` (the server's time; a
    ``put`` or ``put_writes`` cut and never retried), counted into ``deleted``. Parts
    of such documents go too, and so do old parts that their head does not join
    (``payload.stray_parts``)."""
    threads = set(thread_ids)
    cutoff = now - STRAY_AGE
    # The threads' documents by the key index; their age is judged here (``_older``).
    query = {"$or": [{DOOMED: True}, {"thread_id": {"$in": sorted(threads)}}]}
    found: dict[str, list[Document]] = {}
    stray: set[Any] = set()
    for collection, fields in ((WRITES, WRITE_KEY), (BLOBS, BLOB_KEY)):
        projection = dict.fromkeys((*fields, "part", "vid", DOOMED, TOUCHED_AT), 1)
        docs = yield from find(collection, query, projection=projection)
        found[collection] = [d for d in docs if d.get(DOOMED) or _older(d, cutoff)]
        # Parts no head joins, judged against every head of the threads.
        own = [d for d in docs if d["thread_id"] in threads]
        stray.update(stray_parts(own, fields, headless=True))
    if not any(found.values()):
        return
    current: list[Document] = []
    for owners in _batches({d["thread_id"] for ds in found.values() for d in ds}, SWEEP_BATCH):
        current += yield from _skeletons(owners)
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
        chosen = [d for d in docs if d["_id"] in ids]
        for owners in _batches({d["thread_id"] for d in chosen}, SWEEP_BATCH):
            members = set(owners)
            # Still marked or not written since: a value write after the find (a retry
            # adopting the value unmarks and touches it) keeps its document.
            gone: dict[str, Any] = {
                "thread_id": {"$in": owners},
                "_id": {"$in": sorted(d["_id"] for d in chosen if d["thread_id"] in members)},
                "$or": [
                    {DOOMED: True},
                    {TOUCHED_AT: {"$lt": cutoff}},
                    {TOUCHED_AT: {"$exists": False}},
                ],
            }
            result = yield from delete_many(collection, gone)
            deleted.add(collection, result.deleted_count)


def _older(doc: Mapping[str, Any], cutoff: datetime) -> bool:
    """Whether ``doc`` was last written before ``cutoff`` (server time): by ``touched_at``,
    or by its ObjectId ``_id`` when written before ``touched_at`` existed."""
    touched = doc.get(TOUCHED_AT)
    if isinstance(touched, datetime):
        return aware(touched) < cutoff
    return touched is None and isinstance(doc["_id"], ObjectId) and doc["_id"] < (
        ObjectId.from_datetime(cutoff)
    )
