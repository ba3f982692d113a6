"""The namespace registry: one document per namespace, so ``list_namespaces`` costs what
the namespaces cost, not what the items cost.

Registry documents live in the store's collection, beside the items, so a put writes
its item and its namespace's entry in one ``bulk_write`` (one command)::

    {_id: "namespace:<joined>", ns: NUL + <joined>, listed: <joined>, namespace: [labels],
     levels: [prefixes],
     listed_until: <latest expiry of its items, FOREVER if one never expires>,
     version: <random>, recheck: <bool>, claimed: <bool>}

They have no ``key`` or ``prefixes``, and an ``ns`` no item has (a joined namespace never
starts with NUL), unique under the items' ``(ns, key)`` index: no item query matches them.

An entry without ``recheck: true`` is exact: its namespace has a live item until
``listed_until`` (puts and TTL refreshes only raise it, with ``$max``; items only stop
being live by expiring). Writes that may leave it too high flag it instead of reading:
a delete; a put whose expiry is earlier than the entry's (it may have shortened the latest
one); the put that creates the entry; and a put or refresh that raises it, in the
statement that raises it, since its item may have been deleted after it was written and
the delete's flag settled away by a listing before the raise lands.

A listing settles the flagged entries it meets: it claims them (a ``version`` of its own,
``claimed: true``), then probes their items, then writes the exact expiry (or removes the
entry, when no item is left) only if the ``version`` is still its own. Every write that
lands after the claim moves the ``version``, so a put or delete whose item the probe may
have missed is never lost: a delete always; a put (or refresh) when the entry is claimed,
and, until the store's layout version is ``schema.STORE_QUIET_PUTS_VERSION``, always,
since a release before it settles without claiming (conditional on the version it read).
So from that version on, a put into a namespace whose entry needs no raise and no flag
changes nothing in it. Versions are random, not counted: an entry removed and created
again never takes a version a listing claimed before.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import ListNamespacesOp
from pymongo import ASCENDING, DeleteOne, IndexModel, UpdateMany, UpdateOne

from mongo_ckpt.store.documents import FOREVER
from mongo_ckpt.store.namespaces import SEPARATOR, joined, match_clauses, prefixes
from mongo_ckpt.store.reading import ONLY_ITEMS, all_of

LISTED = "listed"
LEVELS = "levels"
LABELS = "namespace"
UNTIL = "listed_until"
CLAIMED = "claimed"
_ID_PREFIX = "namespace:"
# FOREVER inside expressions, naive as drivers return stored dates (BSON dates are UTC):
# mongomock cannot compare it with stored dates otherwise.
_NEVER = FOREVER.replace(tzinfo=None)
_EPOCH = datetime(1970, 1, 1)


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


def put_request(
    namespace: Sequence[str], expiries: Iterable[datetime], *, quiet: bool
) -> UpdateOne:
    """After the puts of a batch into ``namespace`` (each item's expiry, ``FOREVER`` for
    none): the entry raised to the latest, created if missing; flagged when one of them
    is earlier than the entry's expiry (an overwrite may have shortened the latest).
    ``quiet`` (from ``schema.STORE_QUIET_PUTS_VERSION``): the ``version`` moves only when
    the entry is claimed."""
    expiries = list(expiries)
    earliest = min(expiries)
    latest, shortest = max(expiries), (earliest if earliest < FOREVER else None)
    return _entry_request(namespace, latest, shortest, quiet)


def raise_request(namespace: Sequence[str], until: datetime, *, quiet: bool) -> UpdateOne:
    """After TTL refreshes in ``namespace``: the entry raised to ``until``, created if
    missing."""
    return _entry_request(namespace, until, None, quiet)


def _entry_request(
    namespace: Sequence[str], latest: datetime, earliest: datetime | None, quiet: bool
) -> UpdateOne:
    """One upsert, after the items' statements, as an update pipeline (each field computed
    from the entry as it was): the expiry raised to ``latest``, with the entry flagged if
    that raised it (the item may have been deleted meanwhile, and the delete's flag
    settled away by a listing), if it is missing (created, or created again after the
    server's TTL monitor or a sweep removed it expired), or if ``earliest`` is below it;
    a new ``version`` when claimed or missing (or always, unless ``quiet``), so a listing
    that probed before the items never writes its result. When nothing is to change, the
    pipeline yields the entry as it was: the server writes nothing."""
    until = _naive(latest)
    stored = {"$ifNull": [f"${UNTIL}", _EPOCH]}
    reasons: list[Any] = ["$recheck", {"$lt": [stored, until]}]
    if earliest is not None:
        reasons.append({"$gt": [stored, _naive(earliest)]})
    fresh = new_version()
    version: Any = fresh
    if quiet:
        version = {"$cond": [f"${CLAIMED}", fresh, {"$ifNull": ["$version", fresh]}]}
    fields = {
        "recheck": {"$or": reasons},
        UNTIL: {"$max": [f"${UNTIL}", until]},
        "version": version,
        CLAIMED: False,
        **{name: _constant(value) for name, value in _identity(namespace).items()},
    }
    return UpdateOne({"_id": entry_id(joined(namespace))}, [{"$set": fields}], upsert=True)


def _constant(value: Any) -> Any:
    """``value`` in an aggregation expression: as it is, unless a string of it would read
    as a field path (``$``): then ``$literal`` (the bytes of every put count)."""
    strings = value if isinstance(value, list) else [value]
    return {"$literal": value} if any(s.startswith("$") for s in strings) else value


def _identity(namespace: Sequence[str]) -> dict[str, Any]:
    """The fields naming an entry's namespace."""
    return {
        "ns": SEPARATOR + joined(namespace),
        LISTED: joined(namespace),
        LABELS: list(namespace),
        LEVELS: prefixes(namespace),
    }


def _naive(moment: datetime) -> datetime:
    """``moment`` as a naive UTC datetime, as drivers return stored dates (mongomock
    compares only those inside expressions)."""
    return moment if moment.tzinfo is None else moment.astimezone(timezone.utc).replace(tzinfo=None)


def delete_request(joined_namespace: str) -> UpdateOne:
    """After deleting items of a namespace: the entry may now be too high, so flag it, with
    a new ``version``: a listing that claimed it before must not write what it found."""
    update = {"$set": {"recheck": True, "version": new_version(), CLAIMED: False}}
    return UpdateOne({"_id": entry_id(joined_namespace)}, update)


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


def claim_request(entry_ids: Sequence[str], version: int) -> UpdateMany:
    """Before a listing probes the items of flagged entries: their ``version`` its own, so
    that it settles only what no write touched after the claim."""
    flagged = {"_id": {"$in": list(entry_ids)}, "recheck": True}
    return UpdateMany(flagged, {"$set": {"version": version, CLAIMED: True}})


def settled_request(entry_id: str, version: int, until: datetime | None) -> UpdateOne | DeleteOne:
    """The exact entry after a probe: its expiry, or gone (``until`` is ``None``: no item
    left); applied only if the entry still has the ``version`` of the listing's claim.
    ``recheck`` and ``claimed`` are ``false`` as a put's pipeline writes them, so the next
    put changes nothing."""
    selector = {"_id": entry_id, "version": version}
    if until is None:
        return DeleteOne(selector)
    exact = {UNTIL: until, "version": new_version(), "recheck": False, CLAIMED: False}
    return UpdateOne(selector, {"$set": exact})


def joined_of(entry: str) -> str:
    """The joined namespace of the entry whose ``_id`` is ``entry``."""
    return entry[len(_ID_PREFIX) :]


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
