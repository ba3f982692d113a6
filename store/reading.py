"""How items and namespaces are read back: the queries, and documents into results."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import Item, ListNamespacesOp, SearchItem

from mongo_ckpt import places
from mongo_ckpt.store.documents import live, original_value
from mongo_ckpt.store.namespaces import ItemKey, depth_key, match_clauses, prefix_query, split


def all_of(clauses: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One query requiring every clause (merged when their fields do not overlap)."""
    merged: dict[str, Any] = {}
    rest: list[Mapping[str, Any]] = []
    for clause in clauses:
        if merged.keys() & clause.keys():
            rest.append(clause)
        else:
            merged.update(clause)
    return {**merged, "$and": rest} if rest else merged


def get_query(keys: Iterable[ItemKey], now: datetime | None) -> dict[str, Any]:
    """The live items among ``(joined namespace, key)`` pairs: one query for a whole batch
    (a plain equality for one item, which every server answers from the unique index)."""
    pairs = [{"ns": ns, "key": key} for ns, key in keys]
    return {**pairs[0], **live(now)} if len(pairs) == 1 else {"$or": pairs, **live(now)}


def search_query(
    namespace_prefix: Sequence[str],
    value_clauses: Sequence[Mapping[str, Any]],
    now: datetime | None,
) -> dict[str, Any]:
    return all_of([prefix_query(namespace_prefix), live(now), *value_clauses])


def namespaces_pipeline(op: ListNamespacesOp, now: datetime | None) -> list[dict[str, Any]]:
    """Distinct namespaces of the items, truncated to ``max_depth``, sorted like tuples,
    grouped from the items themselves: the listing of a store showing expired items
    (``omit_expired=False``), which the registry does not track."""
    query = all_of([live(now), *match_clauses(op.match_conditions or ())])
    pipeline: list[dict[str, Any]] = [
        {"$match": query},
        {"$group": {"_id": depth_key(op.max_depth)}},
        {"$sort": {"_id": 1}},
    ]
    if op.offset:
        pipeline.append({"$skip": op.offset})
    pipeline.append({"$limit": op.limit})
    return pipeline


def namespaces(docs: Iterable[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    return [split(doc["_id"]) for doc in docs]


def key_of(doc: Mapping[str, Any]) -> ItemKey:
    return doc["ns"], doc["key"]


def opened(doc: Mapping[str, Any], serde: SerializerProtocol | None) -> Mapping[str, Any]:
    """``doc`` with its ``value`` readable: keys unescaped, or deserialized (decrypted) where
    it is stored typed."""
    stored = doc.get("value_typed")
    if stored is None:
        return {**doc, "value": original_value(doc["value"])} if "value" in doc else doc
    if serde is None:
        raise ValueError(
            f"item {tuple(doc['namespace'])} {doc['key']!r} is stored serialized "
            f"({stored['type']!r}): open the store with the serde that wrote it (serde=...)"
        )
    with places.at("item", doc):
        value = serde.loads_typed((stored["type"], bytes(stored["data"])))
    return {**doc, "value": value}


def item(doc: Mapping[str, Any]) -> Item:
    return Item(
        value=doc["value"],
        key=doc["key"],
        namespace=tuple(doc["namespace"]),
        created_at=utc(doc["created_at"]),
        updated_at=utc(doc["updated_at"]),
    )


def search_item(doc: Mapping[str, Any], score: float | None = None) -> SearchItem:
    return SearchItem(
        namespace=tuple(doc["namespace"]),
        key=doc["key"],
        value=doc["value"],
        created_at=utc(doc["created_at"]),
        updated_at=utc(doc["updated_at"]),
        score=score,
    )


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime."""
    # Drivers return naive UTC datetimes unless the client was made tz_aware.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)
