"""Search filters run in the server, on the stored value; operator keys are checked first."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.store.filters import value_clauses
from tests.backends import count_calls, total
from tests.filter_cases import BAD_FILTERS, CASES, ITEMS


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


# Value keys the store escapes when it stores them (documents.escaped_key), and filters
# naming them: as keys, as nested keys, and inside literals.
ESCAPED_KEYS = {
    "files": {"versions": {"v1.2": "stable"}, "tags": [{"a.b": 1}], "meta": {"$id": 7}},
    "schema": {"$schema": "v1", "doc": {"": "empty", "＄ref": "r"}},
    "fullwidth": {"＄price": 5, "versions": {"v1.2": "beta"}},
}
ESCAPED_KEY_FILTERS: list[dict[str, Any]] = [
    {"versions": {"$eq": {"v1.2": "stable"}}},
    {"versions": {"$ne": {"v1.2": "stable"}}},
    {"versions": {"v1.2": "beta"}},
    {"tags": [{"a.b": 1}]},
    {"＄price": 5},
    {"＄price": {"$ne": 4}},
    {"＄$schema": "v1"},
    {"doc": {"＄ref": "r"}},
    {"doc": {"＄ref": "r", "missing": None}},
]


def _escaped_keys_found(store: Any, filter: dict[str, Any]) -> set[str]:
    return {item.key for item in store.search(("items",), filter=filter)}


@pytest.mark.parametrize("filter", ESCAPED_KEY_FILTERS, ids=str)
def test_filters_name_keys_as_put_like_in_memory_store(
    make_store: Any, filter: dict[str, Any]
) -> None:
    """Stored keys are escaped; a filter (its keys and its literals) is escaped the same way,
    so it finds what InMemoryStore and the encrypted store (filtering in Python) find."""
    encrypted = EncryptedSerializer.from_pycryptodome_aes(key=b"1234567890123456")
    encrypted_store = make_store(collection_name="encrypted", serde=encrypted)
    stores = [InMemoryStore(), make_store(), encrypted_store]
    for store in stores:
        for key, value in ESCAPED_KEYS.items():
            store.put(("items",), key, value)
    expected = _escaped_keys_found(stores[0], filter)
    assert expected or filter == {"＄$schema": "v1"}  # the cases are not vacuous
    for store in stores[1:]:
        assert _escaped_keys_found(store, filter) == expected, filter


def test_filter_literals_and_paths_are_escaped_in_the_query() -> None:
    assert value_clauses(
        {"＄a.b": {"c.d": [{"e.f": 1}]}, "g": {"$in": [{"k.l": 2}]}, "h.0": {"$eq": {"i.j": 3}}}
    ) == [
        {"value.＄＄a.b.＄c%2Ed": [{"＄e%2Ef": 1}]},
        {"value.g": {"$in": [{"＄k%2El": 2}]}},
        {"value.h.0": {"$eq": {"＄i%2Ej": 3}}},
    ]
    for bad in ({"a..b": 1}, {".a": 1}, {"a.": 1}):
        with pytest.raises(ValueError, match="empty field"):
            value_clauses(bad)
    with pytest.raises(ValueError, match=r"operator keys are not allowed.*'\$b'"):
        value_clauses({"a.$b": 1})


def test_a_filter_over_a_serialized_value_with_keys_bson_cannot_hold(make_store: Any) -> None:
    """With a serde, values are serialized whole and may hold keys that are not strings;
    a filter on other fields still evaluates, as in InMemoryStore."""
    encrypted = EncryptedSerializer.from_pycryptodome_aes(key=b"1234567890123456")
    stores = [InMemoryStore(), make_store(serde=encrypted)]
    for store in stores:
        store.put(("n",), "int-keys", {"color": "red", "counts": {1: "a"}})
        store.put(("n",), "plain", {"color": "red"})
        store.put(("n",), "blue", {"color": "blue"})
    for store in stores:
        assert {i.key for i in store.search(("n",), filter={"color": "red"})} == {
            "int-keys",
            "plain",
        }
