"""A store with ``serde=EncryptedSerializer``: no value is stored in plaintext, and get,
search, filters, pages, TTL and semantic search answer as they do without it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
import mongomock
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, PutOp, SearchOp
from typing_extensions import TypedDict

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.calls import Call, Operation, find
from mongo_ckpt.drivers import arun, run
from mongo_ckpt.layout import REGISTRY, SCHEMA, STORE
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from mongo_ckpt.store.documents import stored_value
from mongo_ckpt.store.filters import COMPARISONS, matches, value_clauses
from mongo_ckpt.store.operations import StoreOperations
from mongo_ckpt.store.reading import all_of
from mongo_ckpt.store.vectors import Embedded, unit, unpacked
from tests.backends import count_calls, maybe_await, sync_client, total
from tests.filter_cases import BAD_FILTERS, CASES, ITEMS
from tests.lengths import Length
from tests.store_programs import OPS, _check
from tests.store_support import DIMS, FakeEmbeddings, writes

MARKER = "plaintext-marker-c4f1"
ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"1234567890123456")
SECRETS = {
    "top": {"text": f"{MARKER} at the top", "n": 1},
    "nested": {"text": "plain words", "deep": {"list": ["a", {"x": MARKER}]}, MARKER: True},
}


def _find_all(
    names: Iterable[str], query: dict[str, Any] | None = None
) -> Operation[list[dict[str, Any]]]:
    docs: list[dict[str, Any]] = []
    for name in names:
        docs += yield from find(name, query or {})
    return docs


async def _docs(store: Any) -> list[dict[str, Any]]:
    """The store's item documents."""
    return await arun(store.collections, _find_all([STORE], {}))


async def _database_bytes(db: Any) -> bytes:
    """Every document of every collection of ``db``, BSON-encoded."""
    names = await maybe_await(db.list_collection_names())
    docs = await arun({name: db[name] for name in names}, _find_all(names))
    return b"".join(bson.encode(doc) for doc in docs)


def _view(items: Iterable[Any]) -> list[tuple[Any, ...]]:
    """What a search answers, without the timestamps (each store has its own)."""
    return [
        (i.namespace, i.key, i.value, None if i.score is None else round(i.score, 9))
        for i in items
    ]


async def _put_both(stores: Iterable[Any], namespace: tuple[str, ...], key: str, value: Any,
                    **kwargs: Any) -> None:
    for store in stores:
        await store.aput(namespace, key, value, **kwargs)
    await asyncio.sleep(0.002)  # distinct updated_at (BSON keeps milliseconds)


# -- nothing in plaintext ---------------------------------------------------------


async def test_values_are_not_stored_in_plaintext(make_astore: Any) -> None:
    index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}
    plain = make_astore(collection_name="plain", index=index, exact_search=True)
    sealed = make_astore(
        collection_name="sealed", index=index, exact_search=True, serde=ENCRYPTED,
        ttl={"default_ttl": 30},
    )
    for key, value in SECRETS.items():
        await _put_both([plain, sealed], ("users", "u1"), key, value)

    def raw(docs: list[dict[str, Any]]) -> bytes:
        return b"".join(bson.encode(doc) for doc in docs)

    # the check can fail: without a serde the marker is there to be found
    assert MARKER.encode() in raw(await _docs(plain))
    docs = await _docs(sealed)
    assert len(docs) == 2 and MARKER.encode() not in raw(docs)
    for doc in docs:
        assert "value" not in doc
        assert doc["value_typed"]["type"] == "msgpack+aes"
        assert len(unpacked(doc["embeddings"][0]["vector"])) == DIMS  # vectors stay, as documented
        assert doc["ttl_minutes"] == 30
    for key, value in SECRETS.items():
        assert (await sealed.aget(("users", "u1"), key)).value == value
    found = await sealed.asearch(("users",), query=MARKER, filter={"n": 1})
    assert [(i.key, i.value) for i in found] == [("top", SECRETS["top"])]


def test_sync_store_encrypts(make_store: Any) -> None:
    store = make_store(serde=ENCRYPTED)
    store.put(("users",), "k", SECRETS["nested"])
    docs = run(store.collections, _find_all([STORE, REGISTRY, SCHEMA]))
    assert MARKER.encode() not in b"".join(bson.encode(doc) for doc in docs)
    assert store.get(("users",), "k").value == SECRETS["nested"]
    assert [i.key for i in store.search(("users",), filter={"deep.list": "a"})] == ["k"]
    assert store.search(("users",), filter={"deep.list": "b"}) == []


# -- same answers as without a serde ------------------------------------------------


@pytest.fixture
async def pair(make_astore: Any) -> tuple[Any, Any]:
    """A plain and an encrypting store in one database, holding the same items."""
    plain = make_astore(collection_name="plain")
    sealed = make_astore(collection_name="sealed", serde=ENCRYPTED)
    for key, value in ITEMS.items():
        await _put_both([plain, sealed], ("items",), key, value)
    await _put_both([plain, sealed], ("elsewhere",), "a", ITEMS["a"])
    return plain, sealed


async def test_filters_answer_as_in_the_server(pair: tuple[Any, Any]) -> None:
    plain, sealed = pair
    for filter, expected in CASES:
        ours = await sealed.asearch(("items",), filter=filter, limit=100)
        assert {i.key for i in ours} == expected, filter
        theirs = await plain.asearch(("items",), filter=filter, limit=100)
        assert _view(ours) == _view(theirs), filter


async def test_bad_filters_are_refused_before_any_io(pair: tuple[Any, Any]) -> None:
    _, sealed = pair
    calls = count_calls(sealed.collections)
    for filter, named in BAD_FILTERS:
        with pytest.raises(ValueError) as raised:
            await sealed.asearch(("items",), filter=filter)
        assert named in str(raised.value), filter
    assert total(calls) == 0


async def test_pages_are_cut_after_filtering_in_one_find(make_astore: Any) -> None:
    plain = make_astore(collection_name="plain")
    sealed = make_astore(collection_name="sealed", serde=ENCRYPTED)
    for i in range(24):
        kind = "odd" if i % 2 else "even"
        await _put_both([plain, sealed], ("p", kind), f"k{i:02}", {"i": i, "kind": kind})
    await _put_both([plain, sealed], ("q",), "outside", {"i": 1, "kind": "odd"})

    odd = await sealed.asearch(("p",), filter={"kind": "odd"}, limit=3, offset=2)
    assert [i.key for i in odd] == ["k19", "k17", "k15"]  # newest first, then the page
    filters = [None, {"kind": "odd"}, {"i": {"$gte": 20}}, {"i": {"$in": [0, 3, 23]}},
               {"i": {"$lt": 2}}, {"missing": 1}]
    for filter in filters:
        for limit, offset in [(10, 0), (3, 2), (4, 9), (100, 0), (2, 30), (0, 0)]:
            calls = count_calls(sealed.collections)
            ours = await sealed.asearch(("p",), filter=filter, limit=limit, offset=offset)
            assert dict(calls) == ({("store", "find"): 1} if limit else {}), (filter, limit)
            theirs = await plain.asearch(("p",), filter=filter, limit=limit, offset=offset)
            assert _view(ours) == _view(theirs), (filter, limit, offset)


async def test_mixed_batch_costs_the_same_round_trips(make_astore: Any) -> None:
    plain = make_astore(collection_name="plain")
    sealed = make_astore(collection_name="sealed", serde=ENCRYPTED)
    setup = [PutOp(("m", str(i % 4)), f"k{i}", {"i": i}) for i in range(16)]
    ops: list[Any] = []
    for i in range(8):
        ops.append(GetOp(("m", str(i % 4)), f"k{i}"))
        ops.append(PutOp(("m", "new"), f"p{i}", {"i": i}))
    ops += [SearchOp(("m", str(i)), filter={"i": {"$gte": 8}}) for i in range(4)]
    answers = []
    for store in (plain, sealed):
        await store.abatch(setup)
        calls = count_calls(store.collections)
        results = await store.abatch(ops)
        assert dict(calls) == {("store", "find"): 5, **writes(store, inserted=True)}
        answers.append(
            [r if r is None else r.value if hasattr(r, "value") else _view(r) for r in results]
        )
    assert answers[0] == answers[1]
    assert [sorted(v[2]["i"] for v in found) for found in answers[1][16:]] == [
        [8, 12], [9, 13], [10, 14], [11, 15]
    ]


async def test_semantic_search_scores_as_without_a_serde(make_astore: Any) -> None:
    index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["title", "body"]}
    plain = make_astore(collection_name="plain", index=index, exact_search=True)
    sealed = make_astore(collection_name="sealed", index=index, exact_search=True,
                         serde=ENCRYPTED)
    notes = {
        "pasta": {"title": "Italian dinner", "body": "fresh pasta with tomato", "year": 2023},
        "sushi": {"title": "Japanese lunch", "body": "sushi rice and fish", "year": 2024},
        "hike": {"title": "weekend plans", "body": "a long hike in the mountains", "year": 2024},
        "ski": {"title": "winter sports", "body": "ski trip to the mountains", "year": 2025},
    }
    for key, value in notes.items():
        await _put_both([plain, sealed], ("notes",), key, value)
    await _put_both([plain, sealed], ("notes",), "raw", {"title": "mountains", "year": 2024},
                    index=False)
    searches: list[dict[str, Any]] = [
        {"query": "mountains hike"},
        {"query": "mountains", "filter": {"year": {"$gte": 2024}}},
        {"query": "fish", "filter": {"year": 2024}, "limit": 1, "offset": 1},
        {"query": "tomato", "filter": {"year": {"$in": [2023, 2025]}}, "limit": 1},
    ]
    for search in searches:
        ours = await sealed.asearch(("notes",), **search)
        assert _view(ours) == _view(await plain.asearch(("notes",), **search)), search
    best = await sealed.asearch(("notes",), query="mountains", filter={"year": {"$gte": 2024}})
    assert [i.key for i in best][-1] == "raw" and best[-1].score is None
    assert [i.key for i in best][:2] == ["ski", "hike"]


def test_vector_search_filters_after_decrypting() -> None:
    """On Atlas, ``$vectorSearch`` picks candidates; the value filter runs on them here."""
    ops = StoreOperations({"dims": 2, "embed": FakeEmbeddings()}, ENCRYPTED)
    ops.vector_search = True
    plan = ops.plan([SearchOp(("a",), query="q", filter={"n": {"$gt": 1}}, limit=5)])
    embedded = Embedded(queries={"q": unit([1.0, 0.0], 2)})
    docs = [_sealed_doc("low", {"n": 1}, [1.0, 0.0]), _sealed_doc("high", {"n": 2}, [0.0, 1.0])]
    [call], results = _drive(ops.run_plan(plan, embedded), [docs])
    assert call.method == "aggregate" and "$vectorSearch" in call.args[0][0]
    match = call.args[0][1]["$match"]
    assert not any(k.startswith("value") for k in match)  # the server cannot read values
    assert [(i.key, i.value) for i in results[0]] == [("high", {"n": 2})]


def _sealed_doc(key: str, value: dict[str, Any], vector: list[float]) -> dict[str, Any]:
    type_, data = ENCRYPTED.dumps_typed(value)
    moment = datetime(2026, 1, 1)
    return {"_id": key, "ns": "a", "key": key, "namespace": ["a"], "created_at": moment,
            "updated_at": moment, "value_typed": {"type": type_, "data": data},
            "embeddings": [{"path": "$", "vector": vector}]}


def _drive(operation: Any, replies: list[Any]) -> tuple[list[Call], Any]:
    calls: list[Call] = []
    try:
        step = operation.send(None)
        for reply in replies:
            calls.append(step)
            step = operation.send(reply)
        raise AssertionError(f"the operation made more calls than expected: {step}")
    except StopIteration as stop:
        return calls, stop.value


def test_same_answers_as_in_memory_store_when_encrypted(length: Length) -> None:
    @length.settings(40)
    @given(st.lists(OPS, max_size=25))
    def check(ops: list[tuple]) -> None:
        _check(MongoDBStore(mongomock.MongoClient(), "differential", serde=ENCRYPTED), ops)

    check()


# -- the Python filter against the server -------------------------------------------

VALUES: list[dict[str, Any]] = [
    {"a": 1}, {"a": 1.0}, {"a": True}, {"a": False}, {"a": None}, {}, {"a": "1"}, {"a": "b"},
    {"a": 5}, {"a": 2.5}, {"a": [1, 2]}, {"a": [[1, 2]]}, {"a": []}, {"a": [None]},
    {"a": [1, "x"]}, {"a": [7, 8]}, {"a": [[7]]}, {"a": {"b": 1}}, {"a": {"b": None}},
    {"a": {"b": [1, 5]}}, {"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}, {"a": {"0": 7}},
    {"a": [{"b": 1}, {"c": 2}]}, {"a": [{"b": 1}, 3]}, {"a": [{"b": [2, 3]}]}, {"a": [{"0": 7}]},
    {"a": datetime(2024, 1, 2)}, {"a": b"\x01\x02"}, {"a": {"b.c": 1}}, {"a": [{"b.c": 1}]},
]
# Bytes operands have the values' length: MongoDB orders binary data by length first, which
# SecantusDB's range operators do not (they compare the bytes only).
OPERANDS: list[Any] = [
    None, 1, 1.0, 2, 5, 7, "1", "b", True, False, [1, 2], [], [7], [[1, 2]], {"b": 1},
    {"b": 1, "c": 2}, {"c": 2, "b": 1}, {"b.c": 1}, datetime(2024, 1, 1), b"\x00\x03",
]
IN_LISTS: list[list[Any]] = [[1, None], [None], ["b", 5], [[1, 2], 7], []]


def _grid() -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = [{"a": {}}, {"a": {"b": {}}}]
    for path in ["a", "a.b", "a.0", "a.1", "a.b.0", "a.c"]:
        for operand in OPERANDS:
            if not isinstance(operand, dict):
                filters.append({path: operand})
            filters += [{path: {op: operand}} for op in COMPARISONS]
        for candidates in IN_LISTS:
            filters += [{path: {"$in": candidates}}, {path: {"$nin": candidates}}]
        filters += [{path: {"$exists": True}}, {path: {"$exists": False}}]
    return filters


@pytest.mark.parametrize("backend", ["wire", pytest.param("mongodb", marks=pytest.mark.mongodb)])
def test_python_filter_decides_as_the_server(backend: str, db_name: str) -> None:
    """Null and missing fields, arrays and their elements, indexes, type brackets, document
    order: every filter of the grid selects the same values in Python as in the server.
    (mongomock departs from MongoDB on some of these, e.g. it finds ``True`` equal to ``1``.)"""
    client = sync_client(backend)
    try:
        collection = client[db_name]["grid"]
        collection.insert_many([{"i": i, "value": stored_value(v)} for i, v in enumerate(VALUES)])
        for filter in _grid():
            clauses = value_clauses(filter)
            server = {doc["i"] for doc in collection.find(all_of(clauses), {"i": 1})}
            local = {i for i, value in enumerate(VALUES) if matches(value, clauses)}
            assert local == server, filter
    finally:
        client.drop_database(db_name)
        client.close()


# -- TTL ------------------------------------------------------------------------------


async def _set_expiry(store: Any, key: str, seconds: float) -> None:
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    update = {"$set": {"expires_at": moment}}
    await maybe_await(store.collections["store"].update_one({"key": key}, update))


async def _minutes_left(store: Any, key: str) -> float:
    doc = await maybe_await(store.collections["store"].find_one({"key": key}))
    expires = doc["expires_at"].replace(tzinfo=timezone.utc)
    return (expires - datetime.now(timezone.utc)).total_seconds() / 60


async def test_ttl_expiry_and_refresh_of_filtered_reads(make_astore: Any) -> None:
    store = make_astore(serde=ENCRYPTED, ttl={"default_ttl": 10, "refresh_on_read": True})
    await store.asetup()
    # no TTL monitor: expired items stay stored, as they do for up to a minute on MongoDB
    await maybe_await(store.collections["store"].drop_index("expires_at"))
    await store.aput(("t",), "gone", {"color": "red"})
    await store.aput(("t",), "red", {"color": "red"})
    await store.aput(("t",), "blue", {"color": "blue"})
    await store.aput(("t",), "never", {"color": "red"}, ttl=None)
    await _set_expiry(store, "gone", -1)
    for key in ("red", "blue"):
        await _set_expiry(store, key, 60)

    assert await store.aget(("t",), "gone") is None
    found = await store.asearch(("t",), filter={"color": "red"})
    assert sorted(i.key for i in found) == ["never", "red"]
    assert await _minutes_left(store, "red") > 9.9  # read: refreshed
    assert await _minutes_left(store, "blue") < 1.01  # filtered out: untouched
    assert await store.asweep_ttl() == 1
    assert len(await _docs(store)) == 3


# -- from_saver, mixed collections, bad input -------------------------------------------


class Turn(TypedDict, total=False):
    user: str
    text: str
    answer: str


async def _remember_and_recall(state: Turn, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    facts = ("users", state["user"], "facts")
    if state["text"].startswith("remember:"):
        fact = state["text"].removeprefix("remember:").strip()
        await runtime.store.aput(facts, "fact", {"fact": fact})
        return {"answer": "noted"}
    found = await runtime.store.asearch(facts, filter={"fact": {"$exists": True}})
    return {"answer": found[0].value["fact"] if found else "I don't know"}


async def test_from_saver_encrypts_with_the_savers_serde(aclient: Any, db_name: str) -> None:
    saver = AsyncMongoDBSaver(aclient, db_name, serde=ENCRYPTED)
    try:
        await saver.asetup()
        store = AsyncMongoDBStore.from_saver(saver)
        assert store.serde is saver.serde
        assert AsyncMongoDBStore.from_saver(saver, serde=None).serde is None
        assert AsyncMongoDBStore.from_saver(AsyncMongoDBSaver(aclient, db_name)).serde is None

        builder = StateGraph(Turn)
        builder.add_node("node", _remember_and_recall)
        builder.add_edge(START, "node")
        builder.add_edge("node", END)
        graph = builder.compile(checkpointer=saver, store=store)
        said = {"user": "ada", "text": f"remember: my code word is {MARKER}"}
        await graph.ainvoke(said, {"configurable": {"thread_id": "one"}})
        asked = {"user": "ada", "text": "what is my code word"}
        answer = await graph.ainvoke(asked, {"configurable": {"thread_id": "two"}})
        assert answer["answer"] == f"my code word is {MARKER}"
        # neither the store nor the checkpointer holds the marker in plaintext
        assert MARKER.encode() not in await _database_bytes(saver.db)
    finally:
        await maybe_await(aclient.drop_database(db_name))


def test_sync_from_saver_encrypts(client: Any, db_name: str) -> None:
    saver = MongoDBSaver(client, db_name, serde=ENCRYPTED)
    try:
        store = MongoDBStore.from_saver(saver)
        store.put(("users",), "k", SECRETS["top"])
        docs = run(store.collections, _find_all([STORE, REGISTRY, SCHEMA]))
        assert docs[0]["value_typed"]["type"] == "msgpack+aes"
        assert MARKER.encode() not in bson.encode(docs[0])
        assert store.get(("users",), "k").value == SECRETS["top"]
        assert MongoDBStore.from_saver(MongoDBSaver(client, db_name)).serde is None
    finally:
        client.drop_database(db_name)


async def test_plain_items_are_read_and_sealed_on_overwrite(make_astore: Any) -> None:
    plain = make_astore()
    await plain.aput(("n",), "old", {"text": MARKER, "v": 1})
    sealed = make_astore(serde=ENCRYPTED)
    assert (await sealed.aget(("n",), "old")).value == {"text": MARKER, "v": 1}
    assert [i.key for i in await sealed.asearch(("n",), filter={"v": 1})] == ["old"]
    await sealed.aput(("n",), "old", {"text": MARKER, "v": 2})
    [doc] = await _docs(sealed)
    assert "value" not in doc and MARKER.encode() not in bson.encode(doc)
    # a store without the serde says what is missing instead of failing on the document
    with pytest.raises(ValueError, match=r"stored serialized \('msgpack\+aes'\).*serde="):
        await plain.aget(("n",), "old")
    await plain.aput(("n",), "old", {"v": 3})
    [doc] = await _docs(plain)
    assert doc["value"] == {"v": 3} and "value_typed" not in doc


async def test_other_serdes_and_bad_ones(make_astore: Any) -> None:
    store = make_astore(serde=JsonPlusSerializer())
    await store.aput(("n",), "k", {"v": [1, 2]})
    [doc] = await _docs(store)
    assert doc["value_typed"]["type"] == "msgpack"
    assert [i.value for i in await store.asearch(("n",), filter={"v": 2})] == [{"v": [1, 2]}]
    # a type BSON has not (a set) is a type of its own: equal to nothing else, not ranged
    # with numbers, ordered after the BSON types inside a document
    await store.aput(("n",), "set", {"v": {"k": {1, 2}}})
    for filter in ({"v.k": 1}, {"v.k": {"$lt": 3}}, {"v": {"$lt": {"k": 1}}}):
        assert await store.asearch(("n",), filter=filter) == []
    for filter in ({"v.k": {"$exists": True}}, {"v": {"$gt": {"k": 1}}}):
        assert [i.key for i in await store.asearch(("n",), filter=filter)] == ["set"]
    with pytest.raises(TypeError, match="dumps_typed and loads_typed"):
        make_astore(serde=object())
