"""Tombstones: how a ``put`` and maintenance on the same thread see each other without
transactions.

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
- maintenance sets a tombstone (``doomed``: the call's token, ``doomed_at``) on each
  checkpoint it means to delete that carries no live one (``unclaimed``: another call's is
  never taken over, so no call lifts another's), then reads the thread's checkpoints
  again: one stored meanwhile is a survivor, so the values and the ancestry it needs stay
  (its parent among them). It deletes only checkpoints still tombstoned, and lifts only
  its own tombstones (by token).

A tombstone is live for ``TOMBSTONE_LEASE``: one left by a call that was cut stops puts
no longer than that.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne
from pymongo.results import BulkWriteResult

from mongo_ckpt.clock import aware

DOOMED, DOOMED_AT = "doomed", "doomed_at"
PROBE = "probe"  # a field no document has: unsetting it counts a match, changes nothing
# Far longer than the few calls between a maintenance call's tombstones and its deletes.
TOMBSTONE_LEASE = timedelta(minutes=10)


class StaleParentError(LookupError):
    """A ``put`` continued from a checkpoint that is deleted, or being deleted."""

    def __init__(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, parent: str
    ) -> None:
        super().__init__(
            f"checkpoint {checkpoint_id!r} (thread_id={thread_id!r} "
            f"checkpoint_ns={checkpoint_ns!r}) was not stored: its parent {parent!r} is "
            "deleted, or being deleted (prune, delete_for_runs, delete_thread or the "
            "retention sweep); continue from a checkpoint that still exists"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.checkpoint_id, self.parent = checkpoint_id, parent


def probe_parent(parent: Mapping[str, Any]) -> UpdateOne:
    """Matches the parent checkpoint (key ``parent``) if it carries no tombstone at all.

    No clock here: whether a tombstone it misses on is still live is judged afterwards, on
    the server's clock (``is_live``).
    """
    return UpdateOne({**parent, DOOMED: {"$exists": False}}, {"$unset": {PROBE: ""}})


def parent_found(result: BulkWriteResult) -> bool:
    """Whether ``[checkpoint upsert, probe_parent]`` matched the parent."""
    inserted = 0 in (result.upserted_ids or ())
    return int(result.bulk_api_result["nMatched"]) - (0 if inserted else 1) > 0


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


UNTOMBSTONE = {"$unset": {DOOMED: "", DOOMED_AT: ""}}
