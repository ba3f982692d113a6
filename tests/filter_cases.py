"""Store filters with the items they match, and filters refused (no tests here)."""

from __future__ import annotations

from typing import Any

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
