"""The ``BaseStore`` contract on every backend: items, search, namespaces, validation, lifecycle."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from tests.backends import count_calls, maybe_await, total, wire_uri

NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("a-b",),
    ("b", "v1"),
    ("c", "x", "v1"),
]


async def test_put_get_overwrite_delete(make_astore: Any) -> None:
    store = make_astore()
    before = datetime.now(timezone.utc).replace(microsecond=0)
    await store.aput(("users", "u1"), "prefs", {"theme": "dark", "nested": {"n": [1, 2]}})
    first = await store.aget(("users", "u1"), "prefs")
    assert isinstance(first, Item)
    assert (first.namespace, first.key) == (("users", "u1"), "prefs")
    assert first.value == {"theme": "dark", "nested": {"n": [1, 2]}}
    assert first.created_at == first.updated_at >= before
    assert first.created_at.tzinfo is not None

    await asyncio.sleep(0.01)
    await store.aput(("users", "u1"), "prefs", {"theme": "light"})
    second = await store.aget(("users", "u1"), "prefs")
    assert second.value == {"theme": "light"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at

    assert await store.aget(("users", "u2"), "prefs") is None
    assert await store.aget(("users",), "prefs") is None
    await store.adelete(("users", "u1"), "prefs")
    assert await store.aget(("users", "u1"), "prefs") is None
    await store.adelete(("users", "u1"), "prefs")  # deleting a missing item is fine


def test_sync_store_contract(make_store: Any) -> None:
    store = make_store()
    store.put(("docs",), "d1", {"kind": "a", "n": 1})
    store.put(("docs", "sub"), "d2", {"kind": "b", "n": 2})
    assert store.get(("docs",), "d1").value == {"kind": "a", "n": 1}
    assert [i.key for i in store.search(("docs",), filter={"kind": "b"})] == ["d2"]
    assert store.list_namespaces() == [("docs",), ("docs", "sub")]
    store.delete(("docs",), "d1")
    assert store.get(("docs",), "d1") is None


def test_sync_store_async_methods_run_in_a_thread(make_store: Any) -> None:
    store = make_store()

    async def main() -> Item | None:
        await store.aput(("t",), "k", {"v": 1})
        return await store.aget(("t",), "k")

    assert asyncio.run(main()).value == {"v": 1}


async def test_search_prefix_limit_offset_and_order(make_astore: Any) -> None:
    store = make_astore()
    for i in range(5):
        await store.aput(("docs", "x"), f"k{i}", {"i": i})
        await asyncio.sleep(0.002)  # distinct updated_at (BSON keeps milliseconds)
    await store.aput(("docs", "y"), "other", {"i": 99})
    await store.aput(("docsy",), "not-a-child", {"i": 100})

    found = await store.asearch(("docs",), limit=10)
    assert all(isinstance(i, SearchItem) and i.score is None for i in found)
    # newest first; ("docsy",) is not under ("docs",)
    assert [i.key for i in found] == ["other", "k4", "k3", "k2", "k1", "k0"]
    page = await store.asearch(("docs",), limit=2, offset=1)
    assert [i.key for i in page] == ["k4", "k3"]
    assert await store.asearch(("docs",), limit=0) == []
    assert [i.key for i in await store.asearch(("docs", "y"))] == ["other"]
    assert len(await store.asearch((), limit=100)) == 7
    assert await store.asearch(("nothing",)) == []


async def test_list_namespaces(make_astore: Any) -> None:
    store = make_astore()
    for ns in NAMESPACES:
        await store.aput(ns, "k", {"v": 1})
        await store.aput(ns, "k2", {"v": 2})  # one namespace, several items
    memory = InMemoryStore()
    for ns in NAMESPACES:
        memory.put(ns, "k", {"v": 1})

    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("a", "b")},
        {"prefix": ("a", "b"), "max_depth": 3},
        {"prefix": ("a", "*", "f")},
        {"prefix": ("a", "*")},
        {"prefix": ("*", "b", "*", "e")},
        {"suffix": ("v1",)},
        {"suffix": ("*", "v1")},
        {"suffix": ("x", "*")},
        {"prefix": ("a",), "suffix": ("f",)},
        {"max_depth": 1},
        {"max_depth": 2, "limit": 3, "offset": 2},
        {"limit": 2},
        {"offset": 6},
        {"limit": 0},
        {"prefix": ("zzz",)},
    ]
    for case in cases:
        assert await store.alist_namespaces(**case) == memory.list_namespaces(**case), case
    # sorted like tuples: ("a", ...) before ("a-b",) although "." sorts after "-"
    assert (await store.alist_namespaces(max_depth=1))[:2] == [("a",), ("a-b",)]


async def test_batch_results_in_op_order(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("n",), "a", {"v": "a"})
    results = await store.abatch(
        [
            PutOp(("n",), "b", {"v": "b"}),
            GetOp(("n",), "a"),
            ListNamespacesOp(),
            GetOp(("n",), "b"),  # reads see the state before the batch's writes
            SearchOp(("n",)),
            GetOp(("n",), "a"),
        ]
    )
    assert results[0] is None
    assert results[1].value == {"v": "a"}
    assert results[2] == [("n",)]
    assert results[3] is None
    assert [i.key for i in results[4]] == ["a"]
    assert results[5].value == {"v": "a"}
    assert (await store.aget(("n",), "b")).value == {"v": "b"}


BAD_NAMESPACES = [
    ("users", 1),
    ("users", ""),
    ("a.b",),
    ("nul\x00",),
    ("ok", None),
]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES, ids=repr)
async def test_namespace_validation_matches_in_memory_store(
    make_astore: Any, namespace: tuple
) -> None:
    store = make_astore()
    await store.asetup()
    calls = count_calls(store.collections)
    memory = InMemoryStore()
    attempts = [
        ("put", lambda s: s.put(namespace, "k", {"v": 1})),
        ("get", lambda s: s.get(namespace, "k")),
        ("delete", lambda s: s.delete(namespace, "k")),
        ("search", lambda s: s.search(namespace)),
        ("list prefix", lambda s: s.list_namespaces(prefix=namespace)),
        ("list suffix", lambda s: s.list_namespaces(suffix=namespace)),
    ]
    for name, attempt in attempts:
        with pytest.raises(InvalidNamespaceError) as expected:
            attempt(memory)
        with pytest.raises(InvalidNamespaceError) as raised:
            await asyncio.to_thread(attempt, store)
        assert str(raised.value) == str(expected.value), name
    assert total(calls) == 0


async def test_empty_namespace_and_reserved_root(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("keep",), "k", {"v": 1})
    calls = count_calls(store.collections)
    with pytest.raises(InvalidNamespaceError, match="cannot be empty"):
        await store.aput((), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="cannot be empty"):
        await store.abatch([PutOp(("keep",), "k", None), PutOp((), "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError, match="langgraph"):
        await store.aput(("langgraph", "x"), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="tuple of strings"):
        await store.abatch([GetOp("users", "k")])
    assert total(calls) == 0
    assert (await store.aget(("keep",), "k")).value == {"v": 1}


async def test_bad_values_keys_and_pages_touch_nothing(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("keep",), "k", {"v": 1})
    calls = count_calls(store.collections)
    bad_batches: list[tuple[type[Exception], str, list[Any]]] = [
        (TypeError, "value key must be a string", [PutOp(("keep",), "k", {"a": {1: 2}})]),
        (TypeError, "value must be a dict", [PutOp(("keep",), "k", ["v"])]),  # type: ignore[arg-type]
        (TypeError, "key must be a string", [GetOp(("keep",), {"$ne": None})]),  # type: ignore[arg-type]
        (ValueError, "ttl", [PutOp(("keep",), "k", {"v": 2}, ttl=-1)]),
        (ValueError, "limit", [SearchOp(("keep",), limit=-1)]),
        (ValueError, "offset", [ListNamespacesOp(offset=-3)]),
        (ValueError, "max_depth", [ListNamespacesOp(max_depth=0)]),
        (ValueError, "Unknown operation", [PutOp(("keep",), "k", None), "get"]),
    ]
    for error, message, ops in bad_batches:
        with pytest.raises(error, match=message):
            await store.abatch([PutOp(("keep",), "k", None), *ops])
    assert total(calls) == 0
    assert (await store.aget(("keep",), "k")).value == {"v": 1}


async def test_int_keys_are_coerced(make_astore: Any) -> None:
    store = make_astore()
    await store.abatch([PutOp(("n",), 7, {"v": 1})])  # type: ignore[arg-type]
    assert (await store.aget(("n",), "7")).key == "7"


async def test_setup_is_idempotent_and_creates_indexes(make_astore: Any) -> None:
    store = make_astore()
    await store.asetup()
    await store.asetup()
    again = make_astore()
    await again.aput(("x",), "k", {"v": 1})  # setup on first use, on an existing collection
    info = await maybe_await(store.collections["store"].index_information())
    assert info["namespace_key"]["unique"] is True
    assert info["expires_at"]["expireAfterSeconds"] == 0
    assert "prefix_recency" in info


def _wire_direct() -> str:
    uri = wire_uri()
    return uri + ("&" if "?" in uri else "?") + "directConnection=true"


async def test_from_conn_string_owns_its_client() -> None:
    async with AsyncMongoDBStore.from_conn_string(_wire_direct(), "t_store_conn") as store:
        await store.aput(("x",), "k", {"v": 1})
        assert (await store.aget(("x",), "k")).value == {"v": 1}
        await store.client.drop_database("t_store_conn")
    with pytest.raises(Exception, match="closed"):
        await store.aget(("x",), "k")


def test_sync_from_conn_string_owns_its_client() -> None:
    with MongoDBStore.from_conn_string(_wire_direct(), "t_store_conn_sync") as store:
        store.put(("x",), "k", {"v": 1})
        assert store.get(("x",), "k").value == {"v": 1}
        store.client.drop_database("t_store_conn_sync")
    with pytest.raises(Exception, match="closed"):
        store.get(("x",), "k")


async def test_async_store_sync_methods_from_another_thread(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("x",), "k", {"v": 1})
    assert (await asyncio.to_thread(store.get, ("x",), "k")).value == {"v": 1}
    await asyncio.to_thread(store.put, ("x",), "k2", {"v": 2})
    assert (await store.aget(("x",), "k2")).value == {"v": 2}
    with pytest.raises(asyncio.InvalidStateError, match="different thread"):
        store.get(("x",), "k")
