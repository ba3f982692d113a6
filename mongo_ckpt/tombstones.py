"""Tombstones: how a ``put`` and maintenance on the same thread see each other without
transactions.

A ``put`` continues from a parent checkpoint it read earlier (a node may run for minutes
in between); its checkpoint shares the parent's stored values and, for DeltaChannels,
rebuilds from the parent's history. Maintenance may be deleting that parent at the same
moment. Each side writes first and reads second, on the parent's own document, so at
least one of them sees the other:

- a ``put`` writes its checkpoint and, in the same ordered bulk write, probes its parent:
  the probe matches only a parent that is stored and carries no live tombstone. No match,
  and the put takes its checkpoint back and raises ``StaleParentError``;
- maintenance sets a tombstone (``doomed``, ``doomed_at``) on each checkpoint it means to
  delete, then reads the thread's checkpoints again: one stored meanwhile is a survivor,
  so the values and the ancestry it needs stay (its parent among them).

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


def probe_parent(parent: Mapping[str, Any], now: datetime) -> UpdateOne:
    """Matches the parent checkpoint (key ``parent``) if it carries no live tombstone."""
    live = {"$or": [{DOOMED: {"$exists": False}}, {DOOMED_AT: {"$lte": now - TOMBSTONE_LEASE}}]}
    return UpdateOne({**parent, **live}, {"$unset": {PROBE: ""}})


def parent_found(result: BulkWriteResult) -> bool:
    """Whether ``[checkpoint upsert, probe_parent]`` matched the parent."""
    api = result.bulk_api_result
    return int(api["nMatched"]) - (1 - int(api["nUpserted"])) > 0


def tombstone(token: ObjectId, now: datetime) -> dict[str, Any]:
    return {"$set": {DOOMED: token, DOOMED_AT: now}}


UNTOMBSTONE = {"$unset": {DOOMED: "", DOOMED_AT: ""}}
