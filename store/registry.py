"""The namespace registry: one document per namespace, so ``list_namespaces`` costs what
the namespaces cost, not what the items cost.

Registry documents live in the store's collection, beside the items, so a put writes
its item and its namespace's entry in one ``bulk_write`` (one command)::

    {_id: "namespace:<joined>", ns: NUL + <joined>, listed: <joined>, namespace: [labels],
     levels: [prefixes],
     listed_until: <latest expiry of its items, FOREVER if one never expires>,
     version: <random, new on every write>, recheck?: true}

They have no ``key`` or ``prefixes``, and an ``ns`` no item has (a joined namespace never
starts with NUL), unique under the items' ``(ns, key)`` index: no item query matches them.

An entry without ``recheck`` is exact: its namespace has a live item until
``listed_until`` (puts and TTL refreshes only raise it, with ``$max``; items only stop
being live by expiring). Writes that may leave it too high flag it instead of reading:
a delete; a put whose expiry is earlier than the entry's (it may have shortened the latest
one); the put that creates the entry; and a put or refresh that raises it, in the
statement that raises it, since its item may have been deleted after it was written and
the delete's flag settled away by a listing before the raise lands. A listing probes the
items of flagged entries it meets, then writes the exact expiry (or removes the entry,
when no item is left) only if ``version`` is unchanged, so a put or delete landing
meanwhile is never lost: every write sets a new ``version`` after its item is written,
and so does a settle. Versions are random, not counted: an entry removed and created
again never takes a version a listing read before.
"""

from __future__ import annotations

import secrets
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


def new_version() -> int:
    """A fresh ``version``: random, so it never repeats one a listing read before; an
    integer below 2**62, so an earlier release's ``$inc`` still applies to it."""
    return secrets.randbits(62)


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
        selector = {"_id": entry_id(joined(namespace)), UNTIL: {"$gt": earliest}}
        requests.append(UpdateOne(selector, _flagged()))
    return requests + raise_requests(namespace, max(expiries))


def raise_requests(namespace: Sequence[str], until: datetime) -> list[UpdateOne]:
    """The entry of ``namespace`` expiring no earlier than ``until``, in three statements
    after the item's: a new ``version``, so a listing that probed before the item never
    writes its result; if it expires earlier, raised and flagged in one statement (the
    item may have been deleted meanwhile, and the delete's flag settled away by a
    listing); created flagged if missing (also when the server's TTL monitor or a sweep
    removed it, expired, between the first two)."""
    selector = {"_id": entry_id(joined(namespace))}
    raised = {"$max": {UNTIL: until}, **_flagged()}
    created = {
        "recheck": True,
        UNTIL: until,
        "version": new_version(),
        "ns": SEPARATOR + joined(namespace),
        LISTED: joined(namespace),
        LABELS: list(namespace),
        LEVELS: prefixes(namespace),
    }
    return [
        UpdateOne(selector, {"$set": {"version": new_version()}}),
        UpdateOne({**selector, UNTIL: {"$lt": until}}, raised),
        UpdateOne(selector, {"$setOnInsert": created}, upsert=True),
    ]


def _flagged() -> dict[str, Any]:
    """Flag an entry, with a new ``version``: a listing that read it before must not
    write what it found."""
    return {"$set": {"recheck": True, "version": new_version()}}


def delete_request(joined_namespace: str) -> UpdateOne:
    """After deleting items of a namespace: the entry may now be too high, so flag it."""
    return UpdateOne({"_id": entry_id(joined_namespace)}, _flagged())


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


def probe_pipeline(joined_namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The latest expiry among the items of each namespace (``FOREVER`` if one has none),
    grouped by joined namespace; no group for a namespace without items. An equality on
    ``ns`` per namespace: the unique index serves it."""
    return [
        {"$match": {"ns": {"$in": list(joined_namespaces)}}},
        {"$group": {"_id": "$ns", "until": {"$max": {"$ifNull": ["$expires_at", _NEVER]}}}},
    ]


def settled_request(entry: Mapping[str, Any], until: datetime | None) -> UpdateOne | DeleteOne:
    """The exact entry after a probe: its expiry, or gone (``until`` is ``None``: no item
    left); applied only if no write touched the entry since it was read."""
    selector = {"_id": entry["_id"], "version": entry.get("version")}
    if until is None:
        return DeleteOne(selector)
    update = {"$set": {UNTIL: until, "version": new_version()}, "$unset": {"recheck": ""}}
    return UpdateOne(selector, update)


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
