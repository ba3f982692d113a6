"""The namespace registry: one document per namespace, so ``list_namespaces`` costs what
the namespaces cost, not what the items cost.

The registry has a collection of its own (``<store collection>_namespaces`` unless named),
so the items collection holds only items::

    {_id: "namespace:<joined>", listed: <joined>, namespace: [labels], levels: [prefixes],
     prefixes: marks(namespace),
     listed_until: <latest expiry of its items, FOREVER if one never expires>,
     version: <random>, recheck: <bool>, claimed: <bool>}

A listing finds entries by their ``prefixes`` (``marks``: NUL, then NUL before each level)
on ``registry_prefixes``, and groups them by ``listed``; a TTL index on ``listed_until``
drops the entries whose items all expired. A put writes its items, then, in the next
command, its namespaces' entry statements.

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
have missed is never lost: a delete always; a put (or refresh) when the entry is claimed.
So a put into a namespace whose entry needs no raise and no flag changes nothing in it.
Versions are random, not counted: an entry removed and created again never takes a
version a listing claimed before.

A batch putting into ``BATCH_FROM`` namespaces or more sends, instead of their entry
statements, one batch document naming them with their expiries (one statement, whatever
the number of namespaces)::

    {_id: "batch:<random>", listed: BATCHES, levels: [BATCHES], prefixes: [BATCH_MARK],
     listed_until: FOREVER, named: [[labels, latest expiry, earliest expiry], ...]}

Every listing meets batch documents first (``BATCHES`` sorts before every namespace) and,
before it reads the entries, folds them: it sends the entry statements their puts left to
it, then deletes them (``fold_requests``). A put's entry statement landing after other
calls, or again, is what the protocol above allows already, so a batch document folded
late, or twice by two listings, leaves the entries as the puts' own statements would.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import InvalidNamespaceError, ListNamespacesOp
from pymongo import ASCENDING, DeleteOne, IndexModel, UpdateMany, UpdateOne

from mongo_ckpt.store.documents import FOREVER
from mongo_ckpt.store.namespaces import SEPARATOR, joined, match_clauses, prefixes
from mongo_ckpt.store.reading import all_of, utc

LISTED = "listed"
LEVELS = "levels"
LABELS = "namespace"
UNTIL = "listed_until"
PREFIXES = "prefixes"
CLAIMED = "claimed"
_ID_PREFIX = "namespace:"
BATCHES = SEPARATOR + "batches"
"""The ``listed`` value and only level of batch documents: no namespace's (labels have no
NUL), and before every namespace in a listing's order."""
ROOT_MARK = SEPARATOR
"""The first of every entry's ``prefixes``: what a listing without a prefix finds them by."""
BATCH_MARK = SEPARATOR * 2
"""The ``prefixes`` of batch documents: no entry's (levels never start with NUL)."""
BATCH_FROM = 8
"""Namespaces a batch puts into from which it names them in one batch document: below,
an entry statement each costs the put little and spares the next listing the fold."""
# FOREVER inside expressions, naive as drivers return stored dates (BSON dates are UTC):
# mongomock cannot compare it with stored dates otherwise.
_NEVER = FOREVER.replace(tzinfo=None)
_EPOCH = datetime(1970, 1, 1)


def index_models() -> list[IndexModel]:
    """The registry collection's indexes."""
    return [
        # Every listing: the entries under one mark (grouped and sorted after).
        IndexModel([(PREFIXES, ASCENDING)], name="registry_prefixes"),
        # The server's TTL monitor drops the entries whose items all expired.
        IndexModel([(UNTIL, ASCENDING)], expireAfterSeconds=0, name="registry_until"),
    ]


def new_version() -> int:
    """A fresh ``version``: random, so it never repeats one a listing read before; an
    integer below 2**62, so an earlier release's ``$inc`` still applies to it."""
    return secrets.randbits(62)


def entry_id(joined_namespace: str) -> str:
    return _ID_PREFIX + joined_namespace


def marks(namespace: Sequence[str]) -> list[str]:
    """An entry's ``prefixes``: ``ROOT_MARK``, then each level after NUL."""
    return [ROOT_MARK, *(SEPARATOR + level for level in prefixes(namespace))]


def put_request(namespace: Sequence[str], expiries: Iterable[datetime]) -> UpdateOne:
    """After the puts of a batch into ``namespace`` (each item's expiry, ``FOREVER`` for
    none): the entry raised to the latest, created if missing; flagged when one of them
    is earlier than the entry's expiry (an overwrite may have shortened the latest)."""
    expiries = list(expiries)
    earliest = min(expiries)
    latest, shortest = max(expiries), (earliest if earliest < FOREVER else None)
    return _entry_request(namespace, latest, shortest)


def raise_request(namespace: Sequence[str], until: datetime) -> UpdateOne:
    """After TTL refreshes in ``namespace``: the entry raised to ``until``, created if
    missing."""
    return _entry_request(namespace, until, None)


def _entry_request(
    namespace: Sequence[str], latest: datetime, earliest: datetime | None
) -> UpdateOne:
    """One upsert, after the items' statements, as an update pipeline (each field computed
    from the entry as it was): the expiry raised to ``latest``, with the entry flagged if
    that raised it (the item may have been deleted meanwhile, and the delete's flag
    settled away by a listing), if it is missing (created, or created again after the
    server's TTL monitor or a sweep removed it expired), or if ``earliest`` is below it;
    a new ``version`` when claimed or missing, so a listing
    that probed before the items never writes its result. When nothing is to change, the
    pipeline yields the entry as it was: the server writes nothing."""
    until = _naive(latest)
    stored = {"$ifNull": [f"${UNTIL}", _EPOCH]}
    reasons: list[Any] = ["$recheck", {"$lt": [stored, until]}]
    if earliest is not None:
        reasons.append({"$gt": [stored, _naive(earliest)]})
    fresh = new_version()
    version = {"$cond": [f"${CLAIMED}", fresh, {"$ifNull": ["$version", fresh]}]}
    raised = {"$max": [f"${UNTIL}", until]}
    fields = {
        "recheck": {"$or": reasons},
        UNTIL: raised,
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


MAX_NAMESPACE_BYTES = 256 * 1024
"""The most a namespace may take as its registry entry names it (the labels, joined three
times, and each prefix twice): its entry, its items and a batch document naming it then
stay far below the 16 MiB a document may hold."""


def check_storable(namespace: Sequence[str]) -> None:
    """Raise ``InvalidNamespaceError``, before any write, for a namespace too large for its
    registry entry (``MAX_NAMESPACE_BYTES``): stored, it would fail every later listing.
    Counted, not built: the prefixes of a deep namespace grow with the square of its depth."""
    sizes = [len(label.encode()) + 1 for label in namespace]  # a label and its separator
    prefixes, total = 0, 0
    for size in sizes:
        total += size
        prefixes += total + 8  # each prefix in ``levels`` and ``prefixes``, with its key
    size = 3 * total + sum(sizes) + 2 * prefixes
    if size > MAX_NAMESPACE_BYTES:
        raise InvalidNamespaceError(
            f"namespace of {len(namespace)} labels ({sum(sizes) - len(sizes)} bytes, starting "
            f"{joined(namespace)[:40]!r}) takes about {size} bytes as the store names it (the "
            f"labels, joined, and each prefix), over the {MAX_NAMESPACE_BYTES}-byte limit: "
            "use shorter labels (an id, or a hash of a long text) or fewer levels. Nothing "
            "in this batch was written"
        )


def _identity(namespace: Sequence[str]) -> dict[str, Any]:
    """The fields naming an entry's namespace."""
    return {
        LISTED: joined(namespace),
        LABELS: list(namespace),
        LEVELS: prefixes(namespace),
        PREFIXES: marks(namespace),
    }


def _naive(moment: datetime) -> datetime:
    """``moment`` as a naive UTC datetime, as drivers return stored dates (mongomock
    compares only those inside expressions)."""
    return moment if moment.tzinfo is None else moment.astimezone(timezone.utc).replace(tzinfo=None)


BATCH_BYTES = 4 * 1024 * 1024
"""About the most a batch document names, in bytes of labels: far below the 16 MiB a
document may hold."""


def batch_requests(
    expiries: Mapping[tuple[str, ...], Sequence[datetime]],
) -> list[UpdateOne]:
    """After the puts of a batch (each item's expiry by namespace, ``FOREVER`` for none):
    a document naming each namespace with its latest and earliest expiry, for listings to
    fold into the entries; one more for every ``BATCH_BYTES`` of labels. Each is inserted
    by an upsert, so that a put's registry statements, all updates, are one command."""
    documents: list[list[Any]] = [[]]
    size = 0
    for ns, untils in expiries.items():
        weight = sum(len(label.encode()) + 16 for label in ns) + 64
        if size + weight > BATCH_BYTES and documents[-1]:
            documents.append([])
            size = 0
        documents[-1].append([list(ns), max(untils), min(untils)])
        size += weight
    return [_batch_document(named) for named in documents]


def _batch_document(named: list[list[Any]]) -> UpdateOne:
    document = {
        LISTED: BATCHES,
        LEVELS: [BATCHES],
        PREFIXES: [BATCH_MARK],
        UNTIL: FOREVER,
        # No labels: a listing's suffix conditions (``$size`` of them) may be evaluated on it.
        LABELS: [],
        "named": named,
    }
    token = f"batch:{new_version()}"
    return UpdateOne({"_id": token}, {"$setOnInsert": document}, upsert=True)


BATCHES_QUERY = {PREFIXES: BATCH_MARK}
"""The batch documents, on ``registry_prefixes``."""


FOLD_NAMES = 5_000
"""Names a fold writes in one bulk write at most: a backlog of batch documents is folded
in parts, each kept when the next fails."""


def fold_requests(batches: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """The bulk writes folding ``batches`` (batch documents), in parts of about
    ``FOLD_NAMES`` names: in each, the entry statements their puts left to a listing, one
    per namespace (the same as one per put: raised to the latest, flagged by the
    earliest), then those batch documents deleted; cut in between, they are folded again."""
    parts: list[list[Mapping[str, Any]]] = [[]]
    names = 0
    for batch in batches:
        if names and names + len(batch["named"]) > FOLD_NAMES:
            parts.append([])
            names = 0
        parts[-1].append(batch)
        names += len(batch["named"])
    return [_fold_part(part) for part in parts]


def _fold_part(batches: Sequence[Mapping[str, Any]]) -> list[Any]:
    expiries: dict[tuple[str, ...], list[datetime]] = {}
    for batch in batches:
        for labels, latest, earliest in batch["named"]:
            expiries.setdefault(tuple(labels), []).extend([utc(latest), utc(earliest)])
    entries = [put_request(ns, untils) for ns, untils in expiries.items()]
    return [*entries, *(DeleteOne({"_id": batch["_id"]}) for batch in batches)]


def delete_request(joined_namespace: str) -> UpdateOne:
    """After deleting items of a namespace: the entry may now be too high, so flag it, with
    a new ``version``: a listing that claimed it before must not write what it found."""
    update = {"$set": {"recheck": True, "version": new_version(), CLAIMED: False}}
    return UpdateOne({"_id": entry_id(joined_namespace)}, update)


def listing_matches(op: ListNamespacesOp, now: datetime) -> list[dict[str, Any]]:
    """Two ``$match`` stages: entries with the batch documents on ``registry_prefixes``, by the
    mark of the first leading level of a prefix, else by ``ROOT_MARK``; then the whole
    conditions, which batch documents pass."""
    clauses = match_clauses(op.match_conditions or (), levels=LEVELS, labels=LABELS)
    live = {UNTIL: {"$gt": now}}
    level = next((c[LEVELS] for c in clauses if list(c) == [LEVELS]), None)
    mark = ROOT_MARK if level is None else SEPARATOR + level
    indexed = {PREFIXES: {"$in": [mark, BATCH_MARK]}}
    return [
        {"$match": indexed},
        {"$match": {"$or": [{LISTED: BATCHES}, all_of([*clauses, live])]}},
    ]


def listing_pipeline(
    op: ListNamespacesOp, now: datetime, wanted: int, after: str | None = None
) -> list[dict[str, Any]]:
    """The first ``wanted`` distinct namespaces (truncated to ``max_depth``, sorted like
    tuples) of live entries, after ``after`` (the last one a listing read before) or else
    after a group ``BATCHES`` where batch documents are left to fold; ``flagged`` lists a
    group's flagged entries, and ``unflagged`` is 1 when one of its entries is not
    flagged."""
    key: Any = f"${LISTED}"
    if op.max_depth is not None:
        key = {"$arrayElemAt": [{"$slice": [f"${LEVELS}", op.max_depth]}, -1]}
    is_flagged = {"$eq": ["$recheck", True]}
    rest = [] if after is None else [{"$match": {"_id": {"$gt": after}}}]
    return [
        *listing_matches(op, now),
        {
            "$group": {
                "_id": key,
                "unflagged": {"$max": {"$cond": [is_flagged, 0, 1]}},
                "flagged": {"$addToSet": {"$cond": [is_flagged, "$_id", None]}},
            }
        },
        *rest,
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
    exact = {
        UNTIL: until,
        "version": new_version(),
        "recheck": False,
        CLAIMED: False,
    }
    return UpdateOne(selector, [{"$set": exact}])


def expired_entries(now: datetime) -> dict[str, Any]:
    """The entries whose items all expired at ``now``."""
    return {PREFIXES: ROOT_MARK, UNTIL: {"$lte": now}}


def joined_of(entry: str) -> str:
    """The joined namespace of the entry whose ``_id`` is ``entry``."""
    return entry[len(_ID_PREFIX) :]
