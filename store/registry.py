"""The namespace registry: one document per namespace, so ``list_namespaces`` costs what
the namespaces cost, not what the items cost.

Registry documents live in the store's collection, beside the items, so a put writes
its item and its namespace's entry in one ``bulk_write`` (one command)::

    {_id: "namespace:<joined>", ns: NUL + <joined>, listed: <joined>, namespace: [labels],
     levels: [prefixes],
     listed_until: <latest expiry of its items, FOREVER if one never expires>,
     version: <bumped by every write>, recheck?: true}

They have no ``key`` or ``prefixes``, and an ``ns`` no item has (a joined namespace never
starts with NUL), unique under the items' ``(ns, key)`` index: no item query matches them.

An entry without ``recheck`` is exact: its namespace has a live item until
``listed_until`` (puts and TTL refreshes only raise it, with ``$max``; items only stop
being live by expiring). Writes that may leave it too high flag it instead of reading:
a delete, a put whose expiry is earlier than the entry's (it may have shortened the
latest one), and the put that creates the entry (its item may be deleted before the entry
is written). A listing probes the items of flagged entries it meets, then writes the
exact expiry (or removes the entry, when no item is left) only if ``version`` is
unchanged, so a put or delete landing meanwhile is never lost: every write bumps
``version`` after its item is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import ListNamespacesOp
from pymongo import ASCENDING, DeleteOne, IndexModel, UpdateOne

from mongo_ckpt.store.documents import FOREVER
from mongo_ckpt.store.namespaces import SEPARATOR, joined, match_clauses, prefixes
from mongo_ckpt.store.reading import ONLY_ITEMS, all_of

LISTED = "listed"
LEVELS = "levels"
LABELS = "namespace"
UNTIL = "listed_until"
_ID_PREFIX = "namespace:"
# FOREVER inside expressions, naive as drivers return stored dates (BSON dates are UTC):
# mongomock cannot compare it with stored dates otherwise.
_NEVER = FOREVER.replace(tzinfo=None)


def entry_id(joined_namespace: str) -> str:
    return _ID_PREFIX + joined_namespace


def index_models() -> list[IndexModel]:
    return [
        # A prefix listing: one equality on the levels and a range on the expiry.
        # Sparse: items, which have neither field, add nothing to them.
        IndexModel([(LEVELS, ASCENDING), (UNTIL, ASCENDING)], sparse=True, name="registry_levels"),
        # Every listing without a prefix; the server's TTL monitor drops expired entries.
        IndexModel([(UNTIL, ASCENDING)], expireAfterSeconds=0, sparse=True, name="registry_until"),
    ]


def put_requests(namespace: Sequence[str], expiries: Iterable[datetime]) -> list[UpdateOne]:
    """After the puts of a batch into ``namespace`` (each item's expiry, ``FOREVER`` for
    none): raise the entry's expiry, creating it; flag it when one of them is earlier than
    the entry's (an overwrite may have shortened the latest expiry)."""
    expiries = list(expiries)
    requests: list[UpdateOne] = []
    earliest = min(expiries)
    if earliest < FOREVER:
        flag = {"$set": {"recheck": True}}
        requests.append(
            UpdateOne({"_id": entry_id(joined(namespace)), UNTIL: {"$gt": earliest}}, flag)
        )
    requests.append(raise_request(namespace, max(expiries)))
    return requests


def raise_request(namespace: Sequence[str], until: datetime) -> UpdateOne:
    """The entry of ``namespace`` expiring no earlier than ``until``, created if missing."""
    return UpdateOne(
        {"_id": entry_id(joined(namespace))},
        {
            "$max": {UNTIL: until},
            "$inc": {"version": 1},
            # New entries start flagged: the item that created one may be deleted between
            # its write and this one, and the entry settled away in between.
            "$setOnInsert": {
                "recheck": True,
                "ns": SEPARATOR + joined(namespace),
                LISTED: joined(namespace),
                LABELS: list(namespace),
                LEVELS: prefixes(namespace),
            },
        },
        upsert=True,
    )


def delete_request(joined_namespace: str) -> UpdateOne:
    """After deleting items of a namespace: the entry may now be too high, so flag it."""
    return UpdateOne(
        {"_id": entry_id(joined_namespace)}, {"$set": {"recheck": True}, "$inc": {"version": 1}}
    )


def listing_query(op: ListNamespacesOp, now: datetime) -> dict[str, Any]:
    clauses = match_clauses(op.match_conditions or (), levels=LEVELS, labels=LABELS)
    return all_of([*clauses, {UNTIL: {"$gt": now}}])


def listing_pipeline(op: ListNamespacesOp, now: datetime, wanted: int) -> list[dict[str, Any]]:
    """The first ``wanted`` distinct namespaces (truncated to ``max_depth``, sorted like
    tuples) of live entries; ``flagged`` lists a group's flagged entries, and a group is
    ``certain`` when one of its entries is not flagged."""
    key: Any = f"${LISTED}"
    if op.max_depth is not None:
        key = {"$arrayElemAt": [{"$slice": [f"${LEVELS}", op.max_depth]}, -1]}
    is_flagged = {"$eq": ["$recheck", True]}
    return [
        {"$match": listing_query(op, now)},
        {
            "$group": {
                "_id": key,
                "unflagged": {"$max": {"$cond": [is_flagged, 0, 1]}},
                "flagged": {"$addToSet": {"$cond": [is_flagged, "$_id", None]}},
            }
        },
        {"$sort": {"_id": 1}},
        {"$limit": wanted},
    ]


def probe_pipeline(joined_namespace: str) -> list[dict[str, Any]]:
    """The latest expiry among the items of one namespace (``FOREVER`` if one has none);
    nothing when it has no items. An equality on ``ns``: the unique index serves it."""
    return [
        {"$match": {"ns": joined_namespace}},
        {"$group": {"_id": None, "until": {"$max": {"$ifNull": ["$expires_at", _NEVER]}}}},
    ]


def settled_request(entry: Mapping[str, Any], until: datetime | None) -> UpdateOne | DeleteOne:
    """The exact entry after a probe: its expiry, or gone (``until`` is ``None``: no item
    left); applied only if no write touched the entry since it was read."""
    selector = {"_id": entry["_id"], "version": entry.get("version")}
    if until is None:
        return DeleteOne(selector)
    return UpdateOne(selector, {"$set": {UNTIL: until}, "$unset": {"recheck": ""}})


def rebuild_pipeline() -> list[dict[str, Any]]:
    """Every namespace of the items with its latest expiry: the registry of a collection
    written before it existed."""
    return [
        {"$match": ONLY_ITEMS},
        {
            "$group": {
                "_id": "$ns",
                "namespace": {"$first": "$namespace"},
                "until": {"$max": {"$ifNull": ["$expires_at", _NEVER]}},
            }
        },
    ]
