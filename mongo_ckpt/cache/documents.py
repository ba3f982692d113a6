"""How a cache entry is stored, and every query and write of the cache, as pure builders.

One document per ``(namespace, key)``::

    {"_id": '["__pregel_ns_writes","graph:node","node","<hash>"]',
     "namespace": ["__pregel_ns_writes", "graph:node", "node"], "key": "<hash>",
     "encoding": "msgpack", "value": Binary(...), "expires_at": datetime}

``_id`` is the JSON array of the labels and the key (injective, so one entry per pair and
a ``get`` is an ``_id`` lookup; the entries of a namespace are a range of ``_id``s, which
``clear`` reads); ``namespace`` is the array ``clear`` matches exactly; ``encoding`` and
``value`` are what the cache's ``serde.dumps_typed`` returned (``EncryptedSerializer``
encrypts them). ``expires_at`` is in the server's time and is absent for an entry set with
TTL ``None`` (it never expires).

Validation runs over the whole batch before anything is sent: a bad pair raises
``CacheInputError`` and nothing is stored. An entry too large for a document because of
its value (over ``MAX_VALUE_BYTES`` serialized) is a node's legitimate result, not bad
input: it is left uncached, with a warning, and the pairs beside it are stored; the node
runs again next time, as without a cache. One too large because of its key and namespace
(over the ``KEY_ROOM`` left beside such a value) is bad input.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
from bson import Binary
from langgraph.cache.base import FullKey, Namespace
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import ASCENDING, IndexModel, ReplaceOne

from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.thread_settings import MAX_TTL_SECONDS

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024  # what MongoDB stores in one document
# The room a value always leaves for the rest of its entry, and so the most a value may
# take: an entry over 16 MiB is its value's fault when the rest fits in the room.
KEY_ROOM = 64 * 1024
MAX_VALUE_BYTES = MAX_DOCUMENT_BYTES - KEY_ROOM
ENTRY_FIELDS = {"encoding": 1, "value": 1}
logger = logging.getLogger(__name__)


class CacheInputError(MongoCkptError, ValueError):
    """A key, namespace, TTL or value the cache refuses; nothing was read or written."""


class CacheTypeError(CacheInputError, TypeError):
    """A key, namespace label or TTL of the wrong type (also a ``TypeError``)."""


# -- validation -------------------------------------------------------------------------


def checked_namespace(namespace: Any) -> Namespace:
    """``namespace`` as a tuple of its labels; refuses an empty one and non-string labels."""
    if isinstance(namespace, str) or not isinstance(namespace, (tuple, list)):
        hint = f"; write ({namespace!r},)" if isinstance(namespace, str) else ""
        raise CacheTypeError(
            f"a cache namespace is a tuple of strings, got {type(namespace).__name__} "
            f"{namespace!r}{hint}"
        )
    if not namespace:
        raise CacheInputError("a cache namespace needs at least one label, got ()")
    for label in namespace:
        if not isinstance(label, str):
            raise CacheTypeError(
                f"cache namespace labels must be strings, got {type(label).__name__} "
                f"{label!r} in {tuple(namespace)!r}; convert it with str()"
            )
    return tuple(namespace)


def checked_key(full_key: Any) -> FullKey:
    """``(namespace, key)`` checked: a valid namespace and a string key."""
    if not (isinstance(full_key, (tuple, list)) and len(full_key) == 2):
        raise CacheTypeError(
            f"a cache key is a (namespace, key) pair, got {type(full_key).__name__}: "
            f"{full_key!r}"
        )
    namespace, key = checked_namespace(full_key[0]), full_key[1]
    if not isinstance(key, str):
        raise CacheTypeError(
            f"cache keys must be strings, got {type(key).__name__} {key!r} in namespace "
            f"{namespace!r}; convert it with str()"
        )
    return namespace, key


def checked_ttl(full_key: FullKey, ttl: Any) -> float | None:
    """A TTL in seconds: ``None`` (never expires) or a finite number from 0 to
    ``MAX_TTL_SECONDS``."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise CacheTypeError(
            f"the TTL of cache key {full_key!r} must be a number of seconds or None, got "
            f"{type(ttl).__name__} {ttl!r}"
        )
    if not 0 <= ttl <= MAX_TTL_SECONDS:  # also refuses NaN
        raise CacheInputError(
            f"the TTL of cache key {full_key!r} must be from 0 to {MAX_TTL_SECONDS} seconds "
            f"(None: never expires), got {ttl!r}"
        )
    return float(ttl)


def serialized(serde: SerializerProtocol, full_key: FullKey, value: Any) -> tuple[str, bytes]:
    """``serde.dumps_typed(value)``, or ``CacheInputError`` saying which value failed (its
    size is the caller's to judge: ``fits``)."""
    try:
        encoding, data = serde.dumps_typed(value)
    except Exception as exc:
        raise CacheInputError(
            f"{type(serde).__name__} cannot serialize the value of cache key {full_key!r} "
            f"({type(value).__name__}): {exc}; cache values it supports, or give the cache "
            "a serde that does"
        ) from exc
    return encoding, data


def fits(full_key: FullKey, encoding: str, data: bytes) -> bool:
    """Whether the entry of a serialized value fits in a document; warns when the value
    does not, and raises ``CacheInputError`` when the key and namespace are to blame."""
    rest = len(bson.encode(entry(full_key, encoding, b"", datetime.now(timezone.utc))))
    if rest + len(data) <= MAX_DOCUMENT_BYTES:
        return True
    if rest > KEY_ROOM:
        namespace, key = full_key
        raise CacheInputError(
            f"cache key {key[:40]!r} in namespace {str(namespace)[:80]}: its entry would take "
            f"{rest + len(data)} bytes, over the {MAX_DOCUMENT_BYTES} a MongoDB document holds, "
            f"{rest} of them for the key and namespace (more than the {KEY_ROOM} a value "
            "leaves): use a hash of the key"
        )
    logger.warning(
        "cache key %r: the value is %d bytes serialized, over the %d a MongoDB document can "
        "hold; left uncached (the node runs again next time)",
        full_key, len(data), MAX_VALUE_BYTES,
    )
    return False


def checked_namespaces(namespaces: Any) -> list[Namespace] | None:
    """``clear``'s argument checked: ``None`` (everything) or a sequence of namespaces."""
    if namespaces is None:
        return None
    if isinstance(namespaces, str) or not isinstance(namespaces, Sequence):
        raise CacheTypeError(
            "clear takes a sequence of namespaces (tuples of strings) or None, got "
            f"{type(namespaces).__name__}: {namespaces!r}"
        )
    return [checked_namespace(namespace) for namespace in namespaces]


# -- documents and queries --------------------------------------------------------------


def entry_id(full_key: FullKey) -> str:
    """The ``_id`` of an entry: its labels and key as a JSON array."""
    namespace, key = full_key
    return _json([*namespace, key])


def _json(labels: list[str]) -> str:
    return json.dumps(labels, ensure_ascii=False, separators=(",", ":"))


def to_bson_time(moment: datetime) -> datetime:
    """``moment`` at the millisecond precision BSON keeps (rounded down), so every backend
    compares the same instants."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def expiry(now: datetime, ttl: float | None) -> datetime | None:
    """When an entry set at ``now`` with ``ttl`` seconds expires (``None``: never)."""
    return None if ttl is None else to_bson_time(now + timedelta(seconds=ttl))


def entry(
    full_key: FullKey, encoding: str, data: bytes, expires_at: datetime | None
) -> dict[str, Any]:
    """The document of one entry; without ``expires_at`` when it never expires."""
    namespace, key = full_key
    doc: dict[str, Any] = {
        "_id": entry_id(full_key),
        "namespace": list(namespace),
        "key": key,
        "encoding": encoding,
        "value": Binary(data),
    }
    if expires_at is not None:
        doc["expires_at"] = expires_at
    return doc


def upsert(doc: Mapping[str, Any]) -> ReplaceOne[Any]:
    """Write ``doc`` whole, over any earlier entry of its pair (value and expiry replaced)."""
    return ReplaceOne({"_id": doc["_id"]}, doc, upsert=True)


def live_entries(ids: Sequence[str], now: datetime) -> dict[str, Any]:
    """The entries among ``ids`` that have not expired at ``now`` (no ``expires_at``, or
    one after ``now``): expired entries are invisible before the TTL monitor deletes them."""
    return {"_id": {"$in": list(ids)}, "expires_at": {"$not": {"$lte": to_bson_time(now)}}}


def in_namespaces(namespaces: Sequence[Namespace] | None) -> dict[str, Any]:
    """The entries of exactly these namespaces (every entry for ``None``).

    Each namespace is a range of the ``_id`` index (every ``_id`` of the namespace starts
    with its labels' JSON, ``'["a","b",'``), narrowed to exact equality of ``namespace`` (the
    range also holds the namespaces under it); one clause per namespace under ``$or``.
    """
    if namespaces is None:
        return {}
    clauses = []
    for namespace in namespaces:
        prefix = _json(list(namespace))[:-1] + ","
        clauses.append(
            {"_id": {"$gte": prefix, "$lt": prefix[:-1] + "-"}, "namespace": list(namespace)}
        )
    return {"$or": clauses}


def index_models() -> list[IndexModel]:
    """The TTL index; ``get`` and ``clear`` are served by the ``_id`` index."""
    return [
        # The server's TTL monitor deletes expired entries (about once a minute); reads
        # already skip them.
        IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0, name="expires_at"),
    ]


def decoded(doc: Mapping[str, Any]) -> tuple[str, bytes]:
    """What ``serde.loads_typed`` takes, from an entry's document."""
    return doc["encoding"], bytes(doc["value"])
