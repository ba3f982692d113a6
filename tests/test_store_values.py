"""Store values are any JSON-like dict: keys starting with ``$``, containing ``.``, empty
or starting with the escape marker round-trip unchanged, and are never operators."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import PutOp

from mongo_ckpt.store.documents import ESCAPE, escaped_key, original_value, stored_value
from tests.backends import maybe_await
from tests.store_support import DIMS, FakeEmbeddings

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "tool.json",
    "type": "object",
    "properties": {
        "city": {"$ref": "#/$defs/city", "description": "a.b.c"},
        "tags": {"type": "array", "items": [{"$ref": "#/x"}, {"": "empty", "a.b": ["$x"]}]},
    },
    "$defs": {"city": {"type": "string", "enum": ["$a", "."]}},
}
AWKWARD: dict[str, Any] = {
    "$where": "function() { return true; }",
    "$set": {"value": 1},
    "a.b": 1,
    "": 2,
    ".": {"..": {"$": None}},
    ESCAPE: "marker",
    ESCAPE + "$x": [{ESCAPE + ESCAPE: 1}],
    "%2E": "%25",
    "nul\x00key": True,
    "a": "plain",
    "n": 3,
}


@pytest.mark.parametrize("key", ["", "$", "$a", "a.b", ".", ESCAPE, ESCAPE + "a", "%2E", "a%.\x00"])
def test_escaping_is_reversible_and_only_for_unsafe_keys(key: str) -> None:
    assert original_value(stored_value({key: 1})) == {key: 1}
    assert escaped_key(key).startswith(ESCAPE) != (key == "%2E")
    assert "." not in escaped_key(key) and "\x00" not in escaped_key(key)
    assert escaped_key("plain") == "plain" and escaped_key("é $ x") == "é $ x"


async def test_awkward_keys_round_trip(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("tools",), "schema", SCHEMA)
    await store.aput(("tools",), "awkward", AWKWARD)
    assert (await store.aget(("tools",), "schema")).value == SCHEMA
    assert (await store.aget(("tools",), "awkward")).value == AWKWARD
    found = {item.key: item.value for item in await store.asearch(("tools",))}
    assert found == {"schema": SCHEMA, "awkward": AWKWARD}
    # overwrite with other awkward keys: nothing of the old value survives
    await store.aput(("tools",), "awkward", {"$only": {"x.y": 1}})
    assert (await store.aget(("tools",), "awkward")).value == {"$only": {"x.y": 1}}


def test_awkward_keys_round_trip_sync(make_store: Any) -> None:
    store = make_store()
    store.put(("tools",), "schema", SCHEMA)
    store.batch([PutOp(("tools",), "awkward", AWKWARD), PutOp(("tools",), "k", {"$v": 1})])
    assert store.get(("tools",), "schema").value == SCHEMA
    assert store.get(("tools",), "awkward").value == AWKWARD
    assert [i.value for i in store.search(("tools",), filter={"a": "plain"})] == [AWKWARD]
    store.put(("tools",), "schema", {"$schema": "v2"})
    assert store.get(("tools",), "schema").value == {"$schema": "v2"}


async def test_stored_keys_are_data_not_operators(make_astore: Any) -> None:
    store = make_astore()
    injection = {"$where": "sleep(1000)", "a.b": 1, "": 2, "a": 1}
    await store.aput(("x",), "injection", injection)
    await store.aput(("x",), "other", {"a": 2, "b": 1})
    assert (await store.aget(("x",), "injection")).value == injection
    assert [i.key for i in await store.asearch(("x",), filter={"a": 1})] == ["injection"]
    assert [i.key for i in await store.asearch(("x",), filter={"a": {"$gte": 1}}, limit=5)] in (
        ["other", "injection"],
        ["injection", "other"],
    )
    # "a.b" is a key of its own, not the path a -> b
    assert await store.asearch(("x",), filter={"b": 1}) != []
    assert [i.key for i in await store.asearch(("x",), filter={"b": 1})] == ["other"]
    # the document holds no field named like an operator or with a dot
    doc = await maybe_await(store.collections["store"].find_one({"key": "injection"}))
    assert all(not k.startswith("$") and "." not in k and k for k in doc["value"])


async def test_embeddings_see_the_original_keys(make_astore: Any) -> None:
    embeddings = FakeEmbeddings()
    store = make_astore(
        index={"dims": DIMS, "embed": embeddings, "fields": ["$doc", "a.b"]}, exact_search=True
    )
    await store.aput(("v",), "k", {"$doc": "alpha beta", "a": {"b": "gamma"}})
    assert sorted(embeddings.document_calls[0]) == ["alpha beta", "gamma"]
    [hit] = await store.asearch(("v",), query="alpha")
    assert hit.value == {"$doc": "alpha beta", "a": {"b": "gamma"}}


