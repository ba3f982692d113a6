"""Search filters run in the server, on the stored value; operator keys are checked first."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.store.filters import value_clauses
from tests.backends import count_calls, total

ITEMS = {
    "a": {"color": "red", "size": 3, "price": 9.5, "tags": ["x", "y"],
          "author": {"name": "ann", "age": 30}, "note": None},
    "b": {"color": "blue", "size": 10, "price": 20, "tags": ["y"],
          "author": {"name": "bob", "age": 41}},
    "c": {"color": "red", "size": 25, "price": 2.25, "author": {"name": "cid", "age": 19},
          "flag": True},
    "d": {"color": "green", "size": "100", "author": {"name": "ann", "age": 55}},
}

# (filter, keys expected) — numeric comparison is numeric: 10 > 3 although "10" < "3",
# and the string "100" is not a number.
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"color": "red"}, {"a", "c"}),
    ({"color": "red", "size": 3}, {"a"}),
    ({"author.name": "ann"}, {"a", "d"}),
    ({"author": {"name": "ann"}}, {"a", "d"}),
    ({"author": {"name": "ann", "age": {"$gt": 40}}}, {"d"}),
    ({"size": {"$gt": 3}}, {"b", "c"}),
    ({"size": {"$gte": 3, "$lt": 25}}, {"a", "b"}),
    ({"size": {"$lte": 10}}, {"a", "b"}),
    ({"price": {"$gt": 9}}, {"a", "b"}),
    ({"size": {"$eq": 10}}, {"b"}),
    ({"color": {"$ne": "red"}}, {"b", "d"}),
    ({"color": {"$in": ["blue", "green"]}}, {"b", "d"}),
    ({"color": {"$nin": ["blue", "green"]}}, {"a", "c"}),
    ({"flag": {"$exists": True}}, {"c"}),
    ({"flag": {"$exists": False}}, {"a", "b", "d"}),
    ({"note": None}, {"a", "b", "c", "d"}),
    ({"tags": "y"}, {"a", "b"}),  # equality on an array matches an element (MongoDB)
    ({"tags": ["x", "y"]}, {"a"}),
    ({"author": {}}, {"a", "b", "c", "d"}),
    ({"missing": 1}, set()),
    ({}, {"a", "b", "c", "d"}),
]


@pytest.fixture
async def filled(make_astore: Any) -> Any:
    store = make_astore()
    for key, value in ITEMS.items():
        await store.aput(("items",), key, value)
    await store.aput(("elsewhere",), "a", ITEMS["a"])
    return store


async def test_filters(filled: Any) -> None:
    for filter, expected in CASES:
        found = await filled.asearch(("items",), filter=filter, limit=100)
        assert {i.key for i in found} == expected, filter


async def test_filters_agree_with_in_memory_store_on_plain_data(filled: Any) -> None:
    """Where InMemoryStore is defined (no arrays, numbers compared with numbers) they agree."""
    memory = InMemoryStore()
    plain = {k: {f: v for f, v in item.items() if f != "tags"} for k, item in ITEMS.items()}
    plain.pop("d")
    for key, value in plain.items():
        memory.put(("items",), key, value)
        await filled.aput(("items",), key, value)
    await filled.adelete(("items",), "d")
    filters = [
        {"color": "red"},
        {"author": {"name": "ann"}},
        {"size": {"$gt": 3}},
        {"price": {"$lte": 9.5}, "color": {"$ne": "blue"}},
        {"size": {"$eq": 25}},
    ]
    for f in filters:
        ours = {i.key for i in await filled.asearch(("items",), filter=f)}
        theirs = {i.key for i in memory.search(("items",), filter=f)}
        assert ours == theirs, f


BAD_FILTERS: list[tuple[dict[str, Any], str]] = [
    ({"$where": "sleep(1000)"}, "$where"),
    ({"$or": [{"color": "red"}]}, "$or"),
    ({"color": {"$regex": "^r"}}, "$regex"),
    ({"author": {"name": {"$where": "1"}}}, "$where"),
    ({"size": {"$gt": 1, "x": 2}}, "mixes operators"),
    ({"size": {"$in": "abc"}}, "needs a list"),
    ({"size": {"$exists": 1}}, "True or False"),
    ({"color": {"$eq": {"$ne": 1}}}, "$ne"),
    ({"tags": [{"$gt": 1}]}, "$gt"),
]


async def test_operator_keys_are_refused_before_any_io(filled: Any) -> None:
    calls = count_calls(filled.collections)
    for filter, named in BAD_FILTERS:
        with pytest.raises(ValueError) as raised:
            await filled.asearch(("items",), filter=filter)
        assert named in str(raised.value), filter
    assert total(calls) == 0


def test_filter_translation_is_a_pure_query() -> None:
    assert value_clauses(None) == []
    assert value_clauses({"a": 1, "b.c": {"$gt": 2}, "d": {"e": "f"}}) == [
        {"value.a": 1},
        {"value.b.c": {"$gt": 2}},
        {"value.d.e": "f"},
    ]
    with pytest.raises(TypeError, match="must be a dict"):
        value_clauses(["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a string"):
        value_clauses({1: "a"})  # type: ignore[dict-item]


def test_sync_store_filters(make_store: Any) -> None:
    store = make_store()
    for key, value in ITEMS.items():
        store.put(("items",), key, value)
    assert {i.key for i in store.search(("items",), filter={"size": {"$gt": 3}})} == {"b", "c"}
    with pytest.raises(ValueError, match=r"\$where"):
        store.search(("items",), filter={"$where": "1"})
