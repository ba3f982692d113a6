"""Generated store operations and the check against InMemoryStore (no tests here)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from langgraph.store.base import PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.store import MongoDBStore

LABELS = st.sampled_from(["a", "b", "a-b", "c c", "é"])


NAMESPACES = st.lists(LABELS, min_size=1, max_size=3).map(tuple)


KEYS = st.sampled_from(["k1", "k2", "k3"])


# Keys MongoDB would read as syntax or reject; values keep them (escaped when stored).
AWKWARD_KEYS = st.sampled_from(["$schema", "$ref", "$where", "a.b", ".", "", "\uff04x", "%2E"])


AWKWARD = st.dictionaries(
    AWKWARD_KEYS,
    st.recursive(
        st.one_of(st.integers(-3, 3), LABELS, st.sampled_from(["$x", "$$y"])),
        lambda inner: st.one_of(
            st.lists(inner, max_size=2), st.dictionaries(AWKWARD_KEYS | LABELS, inner, max_size=2)
        ),
        max_leaves=4,
    ),
    max_size=3,
)


VALUES = st.builds(
    lambda plain, awkward: {**awkward, **plain},
    st.fixed_dictionaries(
        {"n": st.integers(-3, 3), "c": st.sampled_from(["red", "blue"])},
        optional={
            "tag": st.sampled_from(["x", "y"]),
            "sub": st.fixed_dictionaries({"m": LABELS}),
            "list": st.lists(AWKWARD, max_size=2),
        },
    ),
    AWKWARD,
)


FILTERS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"c": st.sampled_from(["red", "blue"])}),
    st.builds(lambda op, n: {"n": {op: n}},
              st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), st.integers(-3, 3)),
    st.fixed_dictionaries({"sub": st.fixed_dictionaries({"m": LABELS})}),
)


PATHS = st.lists(st.one_of(LABELS, st.just("*")), min_size=1, max_size=3).map(tuple)


WRITES = st.one_of(
    st.tuples(st.just("put"), NAMESPACES, KEYS, VALUES),
    st.tuples(st.just("delete"), NAMESPACES, KEYS),
)


OPS = st.one_of(
    WRITES,
    # Puts and deletes in one batch: up to 10, so past documents.INSERTS_FROM.
    st.tuples(st.just("batch"), st.lists(WRITES, min_size=1, max_size=10)),
    st.tuples(st.just("get"), NAMESPACES, KEYS),
    st.tuples(st.just("search"), st.lists(LABELS, max_size=2).map(tuple), FILTERS),
    st.tuples(
        st.just("list"),
        st.one_of(st.none(), PATHS),
        st.one_of(st.none(), PATHS),
        st.one_of(st.none(), st.integers(1, 3)),
        st.integers(0, 4),
        st.integers(0, 2),
    ),
)


def _apply(store: Any, op: tuple) -> Any:
    kind, *args = op
    if kind == "put":
        return store.put(*args)
    if kind == "delete":
        return store.delete(*args)
    if kind == "batch":
        (writes,) = args
        return store.batch([PutOp(*w[1:3], w[3] if w[0] == "put" else None) for w in writes])
    if kind == "get":
        item = store.get(*args)
        return item and (item.namespace, item.key, item.value)
    if kind == "search":
        prefix, filter = args
        found = store.search(prefix, filter=filter, limit=100)
        return sorted((i.namespace, i.key, repr(i.value)) for i in found)
    prefix, suffix, max_depth, limit, offset = args
    return store.list_namespaces(
        prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
    )


def _check(store: MongoDBStore, ops: list[tuple]) -> None:
    memory = InMemoryStore()
    for op in ops:
        reference = _without_empty_namespaces(memory) if op[0] == "list" else memory
        assert _apply(store, op) == _apply(reference, op), op


def _without_empty_namespaces(memory: InMemoryStore) -> InMemoryStore:
    """InMemoryStore also lists namespaces that were only read from or emptied by deletes;
    a namespace exists while it holds an item, so compare with a copy holding just those."""
    copy = InMemoryStore()
    for namespace, items in memory._data.items():
        for key, item in items.items():
            copy.put(namespace, key, item.value)
    return copy
