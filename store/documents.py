"""How an item is stored: one document per (namespace, key), and its indexes.

``{namespace, ns, prefixes, key, value | value_typed, created_at, updated_at,
expires_at?, ttl_minutes?, embeddings?: [{path, vector}], embedding?}``:
``value`` is the item's value as a BSON document (so filters run in the
server), its keys escaped where MongoDB would not store them as data (see
``stored_value``); a store with a ``serde`` keeps only ``value_typed``, the value as
``serde.dumps_typed`` writes it (encrypted with ``EncryptedSerializer``).
``expires_at`` and the TTL it came from exist only for expiring items,
``embeddings`` holds one unit vector per indexed field and ``embedding`` their
mean, written only when Atlas Vector Search is in use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from bson import Binary
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import (
    ASCENDING,
    DESCENDING,
    DeleteOne,
    IndexModel,
    InsertOne,
    UpdateMany,
    UpdateOne,
)
from pymongo.errors import BulkWriteError

from mongo_ckpt import places
from mongo_ckpt.maintenance import DUPLICATE_KEY
from mongo_ckpt.store.namespaces import joined, prefixes
from mongo_ckpt.store.vectors import mean, packed

NO_VECTORS = {"embeddings": 0, "embedding": 0}
FOREVER = datetime(9999, 12, 31, tzinfo=timezone.utc)  # the expiry of items without one
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # before every expiry (now + a TTL)
RECENT_FIRST = [("updated_at", DESCENDING), ("ns", ASCENDING), ("key", ASCENDING)]


ESCAPE = "\uff04"  # FULLWIDTH DOLLAR SIGN: opens every escaped key
_UNSAFE_CHARS = {"%": "%25", ".": "%2E", "\x00": "%00"}
_ORIGINAL = {escape: c for c, escape in _UNSAFE_CHARS.items()}
_ESCAPED = re.compile("|".join(_ORIGINAL))


def escaped_key(key: str) -> str:
    """A value key as stored: unchanged unless MongoDB would read it as syntax or reject it.

    A key that is empty, starts with ``$`` or with ``ESCAPE``, or contains ``.`` or NUL is
    stored as ``ESCAPE`` + the key with ``%``, ``.`` and NUL written ``%25``, ``%2E`` and
    ``%00``. Every other key is stored as is (filters on it keep working), and only escaped
    keys start with ``ESCAPE``, so the mapping is injective and ``unescaped_key`` reverses it.
    """
    if not isinstance(key, str):
        raise TypeError(f"value key must be a string, got {type(key).__name__}: {key!r}")
    if key and not key.startswith(("$", ESCAPE)) and "." not in key and "\x00" not in key:
        return key
    return ESCAPE + "".join(_UNSAFE_CHARS.get(c, c) for c in key)


def unescaped_key(key: str) -> str:
    if not key.startswith(ESCAPE):
        return key
    return _ESCAPED.sub(lambda m: _ORIGINAL[m.group()], key[len(ESCAPE) :])


def stored_value(value: Any, strict: bool = True) -> Any:
    """``value`` with every key, at any depth (in lists too), escaped by ``escaped_key``;
    not ``strict``, keys that are not strings (which a serde stores) are left as they are."""
    if isinstance(value, Mapping):
        return {
            escaped_key(k) if strict or isinstance(k, str) else k: stored_value(v, strict)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [stored_value(v, strict) for v in value]
    return value


def original_value(value: Any) -> Any:
    """The value ``stored_value`` stored, keys as they were put."""
    if isinstance(value, Mapping):
        return {unescaped_key(k): original_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [original_value(v) for v in value]
    return value


def index_models() -> list[IndexModel]:
    return [
        IndexModel([("ns", ASCENDING), ("key", ASCENDING)], unique=True, name="namespace_key"),
        # Prefix searches, newest first; also serves list_namespaces prefix matching.
        IndexModel([("prefixes", ASCENDING), *RECENT_FIRST], name="prefix_recency"),
        # The server's TTL monitor deletes expired items (about once a minute).
        IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0, name="expires_at"),
    ]


def utc_now() -> datetime:
    """Now, at the millisecond precision BSON keeps, so stored and returned times agree."""
    now = datetime.now(timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def expiry(now: datetime, ttl_minutes: float) -> datetime:
    return now + timedelta(minutes=ttl_minutes)


def live(now: datetime | None) -> dict[str, Any]:
    """Items that have not expired at ``now`` (no ``expires_at``, or one in the future);
    every item when ``now`` is ``None``."""
    return {} if now is None else {"expires_at": {"$not": {"$lte": now}}}


def expired(now: datetime) -> dict[str, Any]:
    """Items expired at ``now``. Bounded below: a server that walks the index from its
    start (SecantusDB) would otherwise read every item without an expiry (null there)."""
    return {"expires_at": {"$gte": EPOCH, "$lte": now}}


def selector(namespace: Sequence[str], key: str) -> dict[str, str]:
    return {"ns": joined(namespace), "key": key}


# The fields an item may or may not have, by its form: a put unsets those its own form
# lacks, so nothing of an earlier form (a serde's, an old TTL, old vectors) is left.
OPTIONAL_FIELDS = ("value", "value_typed", "expires_at", "ttl_minutes", "embeddings", "embedding")


def item_fields(
    namespace: tuple[str, ...],
    key: str,
    value: Mapping[str, Any],
    ttl_minutes: float | None,
    vectors: Sequence[tuple[str, list[float]]],
    with_mean: bool,
    serde: SerializerProtocol | None,
    now: datetime,
) -> dict[str, Any]:
    """Every field a put stores for an item, but ``_id`` and ``created_at``."""
    fields: dict[str, Any] = {
        **selector(namespace, key),
        "namespace": list(namespace),
        "prefixes": prefixes(namespace),
        "updated_at": now,
    }
    if serde is None:
        fields["value"] = stored_value(value)
    else:
        with places.at("item", fields):
            type_, data = serde.dumps_typed(value)
        fields["value_typed"] = {"type": type_, "data": Binary(data)}
    if ttl_minutes is not None:
        fields["expires_at"] = expiry(now, ttl_minutes)
        fields["ttl_minutes"] = ttl_minutes
    if vectors:
        fields["embeddings"] = [{"path": label, "vector": packed(v)} for label, v in vectors]
        if with_mean:
            fields["embedding"] = mean([v for _, v in vectors])
    return fields


def put_request(fields: Mapping[str, Any], now: datetime, revived: bool = False) -> UpdateOne:
    """Upsert the item of ``fields`` (``item_fields``), leaving no field of an earlier form
    (a serde's, an old TTL, old vectors); ``created_at`` survives an overwrite of a live
    item, ``updated_at`` moves.

    ``revived``: ``revive_requests`` run before it in the same command, so it is a plain
    update (``$set`` the fields of its form, ``$unset`` the others, ``created_at`` at most
    ``now``). Otherwise it decides over an expired copy itself, in one update pipeline
    stage that replaces the item whole: an expired copy the TTL monitor has not deleted
    yet counts as absent, and the item gets a fresh ``created_at``."""
    where = {"ns": fields["ns"], "key": fields["key"]}
    if revived:
        # $min, not $setOnInsert: another writer's put, timed later but landed first,
        # must not leave a created_at after this put's updated_at.
        update: dict[str, Any] = {"$set": dict(fields), "$min": {"created_at": now}}
        unset = {name: "" for name in OPTIONAL_FIELDS if name not in fields}
        if unset:
            update["$unset"] = unset
        return UpdateOne(where, update, upsert=True)
    item = {
        "_id": "$_id",
        **{name: {"$literal": v} for name, v in fields.items()},
        "created_at": kept_created_at(now),
    }
    return UpdateOne(where, [{"$replaceRoot": {"newRoot": item}}], upsert=True)


def insert_request(fields: Mapping[str, Any], now: datetime) -> InsertOne[dict[str, Any]]:
    """Insert the item of ``fields`` as new: the same document a ``put_request`` upserting
    it would create. Refused by the unique ``namespace_key`` index where the item is stored
    (live or expired)."""
    return InsertOne({**fields, "created_at": now})


INSERTS_FROM = 8
"""Puts in a batch from which it is sent insert-first (``insert_request``): on SecantusDB
an insert costs about a third of an upsert (``tests/perf/bench_store.py --put-shapes``),
and a batch whose first stored item refuses its insert sends the rest as upserts, one
command more. Smaller batches (a single ``put``) are upserts: one command whatever is
stored."""


def refused_insert(error: BulkWriteError, inserts: range) -> int | None:
    """The position, among ``inserts`` (their indexes in the ordered bulk write that
    failed with ``error``), of the insert refused because its item is stored; ``None``
    when the write failed for any other reason (then nothing is to be retried here)."""
    details = error.details
    if details.get("writeConcernErrors") or len(details.get("writeErrors", ())) != 1:
        return None
    failed = details["writeErrors"][0]
    if failed.get("code") != DUPLICATE_KEY or failed.get("index") not in inserts:
        return None
    return int(failed["index"]) - inserts.start


def kept_created_at(now: datetime) -> dict[str, Any]:
    """``created_at`` of the stored copy if it is live, else ``now`` (new or expired); never
    after ``now``, this put's ``updated_at`` (a put timed later may have landed first)."""
    still_live = {"$gt": [{"$ifNull": ["$expires_at", FOREVER]}, now]}
    return {"$cond": [still_live, {"$min": [{"$ifNull": ["$created_at", now]}, now]}, now]}


PUTS_PER_REVIVE = 8
"""Puts per ``revive_requests`` statement from which a batch writes plain updates after
them rather than update pipelines: on SecantusDB one such statement costs about what the
pipelines of five puts cost over plain updates (0.2 ms a put, measured with
``tests/perf/bench_store.py --put-shapes``)."""


def revived_puts(items: Sequence[tuple[tuple[str, ...], str]], now: datetime) -> list[UpdateMany]:
    """The ``revive_requests`` of a batch's puts when they pay for themselves (at least
    ``PUTS_PER_REVIVE`` puts a statement), else none: the puts are then pipelines."""
    requests = revive_requests(items, now)
    return requests if len(items) >= PUTS_PER_REVIVE * len(requests) else []


def revive_requests(
    items: Iterable[tuple[tuple[str, ...], str]], now: datetime
) -> list[UpdateMany]:
    """Before a batch's puts (``(namespace, key)`` each), in the same command: the expired
    copies among them, which the TTL monitor has not deleted yet, get ``created_at`` =
    ``now``, so that the plain upsert over one (``revived``) is a new item.

    One statement per distinct set of keys (namespaces putting the same keys share one,
    so no pair the batch does not put matches), without ``$or`` (which SecantusDB runs as
    a collection scan). ``expires_at`` comes first: a server that serves a filter by its
    first indexable clause (SecantusDB) reads the expired items only, usually none."""
    keys: dict[str, set[str]] = {}
    for namespace, key in items:
        keys.setdefault(joined(namespace), set()).add(key)
    by_keys: dict[frozenset[str], list[str]] = {}
    for ns, names in keys.items():
        by_keys.setdefault(frozenset(names), []).append(ns)
    return [
        UpdateMany(
            {**expired(now), "ns": _one_of(namespaces), "key": _one_of(sorted(names))},
            {"$set": {"created_at": now}},
        )
        for names, namespaces in by_keys.items()
    ]


def _one_of(values: Sequence[str]) -> Any:
    return values[0] if len(values) == 1 else {"$in": list(values)}


def delete_request(namespace: tuple[str, ...], key: str) -> DeleteOne:
    return DeleteOne(selector(namespace, key))


def refresh_requests(docs: Iterable[Mapping[str, Any]], now: datetime) -> list[UpdateMany]:
    """Move the expiry of items just read to ``now`` + their own TTL (one update per TTL),
    never earlier: a reader whose clock is behind must not shorten it (the namespace's
    registry entry is only ever raised by a refresh). Only while the item keeps that TTL:
    a put landing after the read, without a TTL or with another, keeps its own."""
    by_ttl: dict[float, list[Any]] = {}
    for doc in docs:
        if doc.get("ttl_minutes") is not None:
            by_ttl.setdefault(doc["ttl_minutes"], []).append(doc["_id"])
    return [
        UpdateMany(
            {"_id": {"$in": ids}, "ttl_minutes": ttl, **live(now)},
            {"$max": {"expires_at": expiry(now, ttl)}},
        )
        for ttl, ids in by_ttl.items()
    ]
