"""Moving a langgraph-store-mongodb collection into the store's layout.

The official store (``langgraph-store-mongodb``) keeps one document per item:
``{namespace: [labels], namespace_str, key, value, created_at, updated_at,
<embedding_key>?: vector, namespace_prefix?}``, with expiry by a TTL index on
``updated_at`` (``expireAfterSeconds`` = its ``TTLConfig.default_ttl``, in seconds) and
one vector per item, embedded from its single indexed field.

``migrate_official_store`` reads the source in ``_id`` order, a batch at a time, and
writes each batch as one ordered ``bulk_write`` of upserts on ``(ns, key)``, then one of
the namespace registry's entries (as a put does), then records the last ``_id`` done
in the schema collection: a rerun continues after it, and repeating a batch writes the
same documents. Timestamps are kept; an item's expiry is its ``updated_at`` plus the
source's TTL (items already expired are left out); vectors are copied when the target
index is the source's (same single field, same dimensions), else left out for a re-put to
embed. The source is only read. ``verify_official_store`` reads every source item back
through the target store's ``get`` and every source namespace through its ``search``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from langgraph.store.base import InvalidNamespaceError
from pymongo import UpdateOne

from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.schema import SCHEMA_COLLECTION
from mongo_ckpt.store import documents, registry
from mongo_ckpt.store.namespaces import joined, prefixes
from mongo_ckpt.store.reading import utc
from mongo_ckpt.store.vectors import packed, unit

DEFAULT_STORE_BATCH = 500
OFFICIAL_FIELDS = ("namespace", "key", "value", "created_at", "updated_at")
OWN_FIELDS = {"ns", "prefixes"}  # what this store's items have besides them


class NotOfficialStoreError(MongoCkptError, ValueError):
    """A source document that is not in langgraph-store-mongodb's layout."""


@dataclass(frozen=True)
class Vectors:
    """Which source vectors to copy: ``field`` (the one indexed field of both stores) and
    ``dims``; ``source_key`` is the official ``embedding_key``."""

    field: str
    dims: int
    source_key: str = "embedding"


@dataclass
class StoreProgress:
    """Counts of a store migration (or verification) so far."""

    total: int = 0
    items: int = 0
    expired: int = 0
    vectors: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    def mismatch(
        self, namespace: Sequence[str], key: str | None, via: str, expected: Any, found: Any
    ) -> None:
        """Record a difference the store read back (``via`` its ``get`` or ``search``)."""
        self.mismatches.append(
            dict(namespace=list(namespace), key=key, via=via, expected=expected, found=found)
        )


def source_ttl_seconds(index_information: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The official store's item lifetime: its TTL index on ``updated_at``, if any."""
    for info in index_information.values():
        if list(info.get("key", [])) == [("updated_at", 1)] and "expireAfterSeconds" in info:
            return float(info["expireAfterSeconds"])
    return None


def check_official(doc: Mapping[str, Any]) -> None:
    """``NotOfficialStoreError`` unless ``doc`` is an item of the official layout."""
    missing = [name for name in OFFICIAL_FIELDS if name not in doc]
    namespace = doc.get("namespace")
    if missing or not isinstance(namespace, list) or not all(isinstance(x, str) for x in namespace):
        needs = f"it needs {', '.join(OFFICIAL_FIELDS)}; missing: "
        why = needs + (", ".join(missing) or "a list of labels")
    elif doc.keys() >= OWN_FIELDS:
        why = f"it has {', '.join(sorted(OWN_FIELDS))}: a mongo-ckpt store item"
    else:
        return
    raise NotOfficialStoreError(
        f"document {doc.get('_id')!r} is not a langgraph-store-mongodb item ({why}): pass "
        "the official store's collection (--source-store)"
    )


def official_store_collections(database: Any) -> list[str]:
    """The collections of a synchronous ``database`` whose first document is a
    langgraph-store-mongodb item (one ``find_one`` each)."""
    found = []
    for name in sorted(database.list_collection_names()):
        doc = None if name.startswith("system.") else database[name].find_one({})
        try:
            check_official(doc or {})
        except NotOfficialStoreError:
            continue
        found.append(name)
    return found


def converted(
    doc: Mapping[str, Any], ttl_seconds: float | None, vectors: Vectors | None, now: datetime
) -> dict[str, Any] | None:
    """The target document of an official item; ``None`` if it has expired already.
    ``InvalidNamespaceError`` for a namespace the store refuses (``registry.check_storable``),
    before its batch is written: the run stops there, and continues once it is fixed."""
    check_official(doc)
    try:
        registry.check_storable(doc["namespace"])
    except InvalidNamespaceError as exc:
        raise InvalidNamespaceError(f"document {doc.get('_id')!r}: {exc}") from None
    updated_at = utc(doc["updated_at"])
    fields: dict[str, Any] = {
        "namespace": list(doc["namespace"]),
        "prefixes": prefixes(doc["namespace"]),
        "value": documents.stored_value(doc["value"]),
        "created_at": utc(doc["created_at"]),
        "updated_at": updated_at,
    }
    if ttl_seconds is not None:
        expires_at = updated_at + timedelta(seconds=ttl_seconds)
        if expires_at <= now:
            return None
        fields["expires_at"] = expires_at
        fields["ttl_minutes"] = ttl_seconds / 60
    vector = doc.get(vectors.source_key) if vectors else None
    if vectors and isinstance(vector, list) and len(vector) == vectors.dims:
        fields["embeddings"] = [
            {"path": vectors.field, "vector": packed(unit(vector, vectors.dims))}
        ]
    return fields


def batch_requests(
    targets: Iterable[tuple[str, dict[str, Any]]],
) -> tuple[list[UpdateOne], list[UpdateOne]]:
    """Upserts of converted items (``(key, fields)``), and their namespaces' registry
    entries: what one batch writes, in this order."""
    requests: list[UpdateOne] = []
    expiries: dict[tuple[str, ...], list[datetime]] = {}
    for key, fields in targets:
        namespace = tuple(fields["namespace"])
        selector = {"ns": joined(namespace), "key": key}
        requests.append(UpdateOne(selector, {"$set": fields}, upsert=True))
        expiries.setdefault(namespace, []).append(fields.get("expires_at", documents.FOREVER))
    entries = [registry.put_request(ns, u) for ns, u in expiries.items()]
    return requests, entries


def progress_key(source: Any, target: Any) -> str:
    """The schema-collection document recording how far a migration got."""
    return f"store-migration:{source.database.name}.{source.name}->{target.name}"


def migrate_official_store(
    source: Any,
    store: Any,
    *,
    vectors: Vectors | None = None,
    batch: int = DEFAULT_STORE_BATCH,
    restart: bool = False,
    progress: Callable[[StoreProgress], None] | None = None,
) -> StoreProgress:
    """Copy the official store's collection ``source`` (a PyMongo collection, only read)
    into ``store`` (a set-up-able ``MongoDBStore``); resumable (see the module)."""
    target = store.collections["store"]
    if (source.database.name, source.name) == (target.database.name, target.name):
        raise ValueError(
            f"source and target are the same collection ({source.name!r}): migrate into "
            "another collection (--store-collection)"
        )
    store.setup()
    marks = store.db[SCHEMA_COLLECTION]
    key = progress_key(source, target)
    if restart:
        marks.delete_one({"_id": key})
    mark = marks.find_one({"_id": key}) or {}
    ttl_seconds = source_ttl_seconds(source.index_information())
    counts = StoreProgress(total=source.estimated_document_count(), items=mark.get("items", 0))
    query = {"_id": {"$gt": mark["last_id"]}} if "last_id" in mark else {}
    projection = {"namespace_prefix": 0}
    cursor = iter(source.find(query, projection, sort=[("_id", 1)], batch_size=batch))
    while chunk := list(islice(cursor, batch)):
        _write(chunk, store, marks, key, ttl_seconds, vectors, counts, progress)
    return counts


def _write(
    chunk: Sequence[Mapping[str, Any]],
    store: Any,
    marks: Any,
    key: str,
    ttl_seconds: float | None,
    vectors: Vectors | None,
    counts: StoreProgress,
    progress: Callable[[StoreProgress], None] | None,
) -> None:
    now = documents.utc_now()
    items: list[tuple[str, dict[str, Any]]] = []
    for doc in chunk:
        fields = converted(doc, ttl_seconds, vectors, now)
        if fields is None:
            counts.expired += 1
            continue
        counts.vectors += "embeddings" in fields
        items.append((doc["key"], fields))
    if items:
        requests, entries = batch_requests(items)
        store.collections["store"].bulk_write(requests, ordered=True)
        store.collections["registry"].bulk_write(entries, ordered=True)
    counts.items += len(items)
    update = {"$set": {"last_id": chunk[-1]["_id"], "items": counts.items}}
    marks.update_one({"_id": key}, update, upsert=True)
    if progress:
        progress(counts)


def verify_official_store(
    source: Any,
    store: Any,
    *,
    progress: Callable[[StoreProgress], None] | None = None,
) -> StoreProgress:
    """Read every live source item back through ``store.get`` (value, key, namespace,
    timestamps) and each source namespace through ``store.search`` (the same keys and
    values); a mismatch per difference."""
    ttl_seconds = source_ttl_seconds(source.index_information())
    now = documents.utc_now()
    counts = StoreProgress(total=source.estimated_document_count())
    by_namespace: dict[tuple[str, ...], dict[str, Any]] = {}
    for doc in source.find({}, {"namespace_prefix": 0}, sort=[("_id", 1)]):
        check_official(doc)
        namespace = tuple(doc["namespace"])
        if (
            ttl_seconds is not None
            and utc(doc["updated_at"]) + timedelta(seconds=ttl_seconds) <= now
        ):
            counts.expired += 1
            continue
        item = store.get(namespace, doc["key"], refresh_ttl=False)
        expected = (doc["value"], utc(doc["created_at"]), utc(doc["updated_at"]))
        found = None if item is None else (item.value, item.created_at, item.updated_at)
        if found != expected:
            counts.mismatch(namespace, doc["key"], "get", repr(expected), repr(found))
        by_namespace.setdefault(namespace, {})[doc["key"]] = doc["value"]
        counts.items += 1
        if progress and counts.items % 100 == 0:
            progress(counts)
    for namespace, expected_items in by_namespace.items():
        under = sum(len(v) for ns, v in by_namespace.items() if ns[: len(namespace)] == namespace)
        found_items = {
            item.key: item.value
            for item in store.search(namespace, limit=under + 1, refresh_ttl=False)
            if item.namespace == namespace
        }
        if found_items != expected_items:
            counts.mismatch(namespace, None, "search", sorted(expected_items), sorted(found_items))
    if progress:
        progress(counts)
    return counts
