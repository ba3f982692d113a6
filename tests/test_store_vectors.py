"""Semantic search: exact cosine ranking (what runs here), the Atlas path, and indexing rules."""

from __future__ import annotations

import asyncio
import contextlib
import math
from datetime import datetime
from typing import Any

import pytest
from langgraph.store.base import PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from pymongo import UpdateOne
from pymongo.errors import OperationFailure

from mongo_ckpt.calls import Call
from mongo_ckpt.store.operations import StoreOperations
from mongo_ckpt.store.vectors import SEARCH_INDEX_NAME, Embedded, unit
from tests.backends import count_calls, maybe_await, total
from tests.store_support import DIMS, FakeEmbeddings, writes

DOCS = {
    "pasta": {"title": "Italian dinner", "body": "fresh pasta with tomato sauce"},
    "sushi": {"title": "Japanese lunch", "body": "sushi rice and raw fish"},
    "hike": {"title": "weekend plans", "body": "a long hike in the mountains"},
    "ski": {"title": "winter sports", "body": "ski trip to the mountains"},
    "taxes": {"title": "paperwork", "body": "file the tax return before april"},
}
QUERIES = ["pasta tomato", "mountains hike", "japanese fish", "april paperwork", "nothing"]


def _index(**extra: Any) -> dict[str, Any]:
    return {"dims": DIMS, "embed": FakeEmbeddings(), **extra}


# The tests that search rank exactly (exact_search=True), also on an Atlas server,
# where $vectorSearch would see new items only once its index has caught up.


def _scores(items: list[Any]) -> list[tuple[str, float | None]]:
    return [(i.key, None if i.score is None else round(i.score, 9)) for i in items]


async def test_scores_and_ranking_equal_in_memory_store(make_astore: Any) -> None:
    config = {"fields": ["title", "body"]}
    store = make_astore(index=_index(**config), exact_search=True)
    memory = InMemoryStore(index=_index(**config))  # type: ignore[arg-type]
    for key, value in DOCS.items():
        await store.aput(("notes",), key, value)
        memory.put(("notes",), key, value)
    for query in QUERIES:
        ours = await store.asearch(("notes",), query=query, limit=10)
        theirs = memory.search(("notes",), query=query, limit=10)
        assert sorted(_scores(ours)) == sorted(_scores(theirs)), query
        scores = [s for _, s in _scores(ours)]
        assert scores == sorted(scores, reverse=True)
    best = await store.asearch(("notes",), query="fresh pasta", limit=1)
    assert best[0].key == "pasta"


async def test_score_is_the_best_field(make_astore: Any) -> None:
    store = make_astore(index=_index(fields=["title", "body"]), exact_search=True)
    await store.aput(("n",), "k", {"title": "alpha beta", "body": "gamma delta"})
    [by_title] = await store.asearch(("n",), query="alpha beta")
    [by_body] = await store.asearch(("n",), query="gamma delta")
    assert by_title.score == pytest.approx(1.0)
    assert by_body.score == pytest.approx(1.0)


async def test_star_paths_embed_each_element(make_astore: Any) -> None:
    embeddings = FakeEmbeddings()
    store = make_astore(
        index={"dims": DIMS, "embed": embeddings, "fields": ["chunks[*].text"]}, exact_search=True
    )
    value = {"chunks": [{"text": "red apple"}, {"text": "blue ocean"}, {"text": "green tree"}]}
    await store.aput(("n",), "doc", value)
    await store.aput(("n",), "other", {"chunks": [{"text": "apple ocean tree"}]})
    assert embeddings.document_calls == [
        ["red apple", "blue ocean", "green tree"],
        ["apple ocean tree"],
    ]
    doc = await _raw(store, "doc")
    assert [e["path"] for e in doc["embeddings"]] == [
        "chunks[*].text.0",
        "chunks[*].text.1",
        "chunks[*].text.2",
    ]
    top = await store.asearch(("n",), query="blue ocean", limit=2)
    assert [i.key for i in top] == ["doc", "other"]
    assert top[0].score == pytest.approx(1.0)


async def test_index_false_and_per_put_fields(make_astore: Any) -> None:
    embeddings = FakeEmbeddings()
    store = make_astore(
        index={"dims": DIMS, "embed": embeddings, "fields": ["title"]}, exact_search=True
    )
    await store.aput(("n",), "plain", {"title": "kiwi", "body": "mango"}, index=False)
    await store.aput(("n",), "by-body", {"title": "kiwi", "body": "mango"}, index=["body"])
    await store.aput(("n",), "default", {"title": "kiwi", "body": "mango"})
    assert embeddings.document_calls == [["mango"], ["kiwi"]]
    assert "embeddings" not in await _raw(store, "plain")

    found = await store.asearch(("n",), query="mango", limit=10)
    assert _scores(found)[0] == ("by-body", 1.0)
    assert found[-1].key == "plain" and found[-1].score is None  # unembedded items come last
    assert {i.key for i in found} == {"plain", "by-body", "default"}

    # overwriting with index=False drops the old vectors
    await store.aput(("n",), "by-body", {"title": "kiwi", "body": "mango"}, index=False)
    assert "embeddings" not in await _raw(store, "by-body")
    assert [i.score for i in await store.asearch(("n",), query="mango")][-2:] == [None, None]


async def test_query_with_filter_prefix_and_pages(make_astore: Any) -> None:
    store = make_astore(index=_index(fields=["text"]), exact_search=True)
    for i in range(6):
        ns = ("docs", "even" if i % 2 == 0 else "odd")
        await store.aput(ns, f"d{i}", {"text": "apple " * (i + 1) + "pear " * (6 - i), "i": i})
    ranked = await store.asearch(("docs",), query="apple", limit=10)
    assert [i.key for i in ranked] == ["d5", "d4", "d3", "d2", "d1", "d0"]
    page = await store.asearch(("docs",), query="apple", limit=2, offset=2)
    assert [i.key for i in page] == ["d3", "d2"]
    odd = await store.asearch(("docs", "odd"), query="apple", filter={"i": {"$lt": 5}})
    assert [i.key for i in odd] == ["d3", "d1"]
    assert await store.asearch(("docs",), query="apple", limit=0) == []


async def test_query_without_index_is_a_plain_search(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("n",), "k", {"text": "anything"})
    [found] = await store.asearch(("n",), query="unrelated")
    assert found.key == "k" and found.score is None


async def test_batch_embeds_once_for_documents_and_once_per_query(make_astore: Any) -> None:
    embeddings = FakeEmbeddings()
    store = make_astore(
        index={"dims": DIMS, "embed": embeddings, "fields": ["text"]}, exact_search=True
    )
    await store.asetup()
    calls = count_calls(store.collections)
    await store.abatch(
        [
            PutOp(("n",), "a", {"text": "one"}),
            SearchOp(("n",), query="one"),
            PutOp(("n",), "b", {"text": "two"}),
            SearchOp(("n",), query="one"),
            SearchOp(("n",), query="two"),
        ]
    )
    assert embeddings.document_calls == [["one", "two"]]
    assert embeddings.query_calls == ["one", "two"]
    assert dict(calls) == {("store", "find"): 3, **writes(store)}


async def test_wrong_dimensions_touch_nothing(make_astore: Any) -> None:
    store = make_astore(index={"dims": DIMS + 1, "embed": FakeEmbeddings()}, exact_search=True)
    await store.asetup()
    calls = count_calls(store.collections)
    with pytest.raises(ValueError, match=f"{DIMS} dimensions; IndexConfig dims is {DIMS + 1}"):
        await store.aput(("n",), "k", {"text": "x"})
    assert total(calls) == 0
    with pytest.raises(ValueError, match="dims"):
        make_astore(index={"embed": FakeEmbeddings()}, exact_search=True)


def test_sync_store_semantic_search(make_store: Any) -> None:
    store = make_store(index=_index(fields=["body"]), exact_search=True)
    for key, value in DOCS.items():
        store.put(("notes",), key, value)
    assert store.search(("notes",), query="sushi rice", limit=1)[0].key == "sushi"


async def test_setup_detects_vector_search_once(make_astore: Any, request: Any) -> None:
    store = make_astore(index=_index())
    assert store.ops.vector_search is None
    await store.asetup()
    backend = request.node.callspec.params["aclient"][0]
    if backend != "mongodb":  # mongomock and SecantusDB have no Atlas Search
        assert store.ops.vector_search is False
    assert isinstance(store.ops.vector_search, bool)
    calls = count_calls(store.collections)
    await store.asetup()
    assert ("store", "aggregate") not in calls  # asked once per store
    exact = make_astore(index=_index(), exact_search=True)
    calls = count_calls(exact.collections)
    await exact.asetup()
    # The first store recorded the layout version: reading it is all setup does here.
    assert dict(calls) == {("schema", "find_one"): 1}


async def test_atlas_vector_search_on_a_server_that_has_it(make_astore: Any) -> None:
    """Runs ``$vectorSearch`` end to end where the server has Atlas Search (the ``atlas``
    service of docker/compose.yml); elsewhere the exact mode above is what runs."""
    store = make_astore(index=_index(fields=["body"]))
    await store.asetup()
    if not store.ops.vector_search:
        pytest.skip("this server has no Atlas Vector Search (exact search is tested above)")
    for key, value in DOCS.items():
        await store.aput(("notes",), key, value)
    found: list[Any] = []
    for _ in range(240):  # the search index is built, then updated, asynchronously
        with contextlib.suppress(OperationFailure):  # the index may not be queryable yet
            found = await store.asearch(("notes",), query="sushi rice raw fish", limit=len(DOCS))
        if len(found) == len(DOCS):  # every document indexed, so the best one among them
            break
        await asyncio.sleep(0.5)
    found = await store.asearch(("notes",), query="sushi rice raw fish", limit=2)
    assert [i.key for i in found][:1] == ["sushi"]
    assert found[0].score == pytest.approx(1.0)
    doc = await _raw(store, "sushi")
    assert len(doc["embedding"]) == DIMS


async def _raw(store: Any, key: str) -> dict[str, Any]:
    return await maybe_await(store.collections["store"].find_one({"key": key}))


# -- the Atlas Vector Search path, driven without a server -------------------


def _drive(operation: Any, replies: list[Any]) -> tuple[list[Call], Any]:
    """Run an operation generator, answering its calls with ``replies`` in turn."""
    calls: list[Call] = []
    try:
        step = operation.send(None)
        for reply in replies:
            calls.append(step)
            step = operation.send(reply)
        raise AssertionError(f"the operation made more calls than expected: {step}")
    except StopIteration as stop:
        return calls, stop.value


def test_setup_creates_the_atlas_index_when_missing() -> None:
    ops = StoreOperations({"dims": 3, "embed": FakeEmbeddings()})
    calls, available = _drive(ops.ensure_search_index(), [[], None])
    assert available is True
    assert calls[0].method == "aggregate"
    assert calls[0].args[0] == [{"$listSearchIndexes": {"name": SEARCH_INDEX_NAME}}]
    model = calls[1].args[0].document
    assert calls[1].method == "create_search_index"
    assert model["type"] == "vectorSearch" and model["name"] == SEARCH_INDEX_NAME
    assert model["definition"]["fields"][0] == {
        "type": "vector",
        "path": "embedding",
        "numDimensions": 3,
        "similarity": "cosine",
    }
    calls, _ = _drive(ops.ensure_search_index(), [[{"name": SEARCH_INDEX_NAME}]])
    assert [c.method for c in calls] == ["aggregate"]  # present: nothing created


def test_atlas_search_uses_vector_search_then_ranks_exactly() -> None:
    ops = StoreOperations({"dims": 2, "embed": FakeEmbeddings()})
    ops.vector_search = True
    plan = ops.plan([SearchOp(("a", "b"), query="q", filter={"n": {"$gt": 1}}, limit=2)])
    embedded = Embedded(queries={"q": unit([1.0, 0.0], 2)})
    docs = [_doc("far", [0.0, 1.0]), _doc("near", [1.0, 0.0]), _doc("mid", unit([1.0, 1.0], 2))]
    calls, results = _drive(ops.run_plan(plan, embedded), [docs])
    [call] = calls
    stage = call.args[0][0]["$vectorSearch"]
    assert call.method == "aggregate"
    assert stage["path"] == "embedding" and stage["queryVector"] == [1.0, 0.0]
    assert stage["filter"] == {"prefixes": "a\x00b"}
    assert stage["limit"] >= 2 and stage["numCandidates"] >= stage["limit"]
    assert call.args[0][1]["$match"]["value.n"] == {"$gt": 1}  # value filters after the ANN step
    assert [(i.key, round(i.score, 6)) for i in results[0]] == [("near", 1.0), ("mid", 0.707107)]


def test_atlas_puts_store_the_mean_vector() -> None:
    ops = StoreOperations({"dims": 2, "embed": FakeEmbeddings()})
    ops.vector_search = True
    plan = ops.plan([PutOp(("a",), "k", {"text": "x"})])
    embedded = Embedded(items={("a", "k"): [("a", [1.0, 0.0]), ("b", [0.0, 1.0])]})
    [call, _registry], _ = _drive(ops.run_plan(plan, embedded), [None, None])
    upsert = next(r for r in call.args[0] if isinstance(r, UpdateOne))
    fields = upsert._doc[0]["$replaceRoot"]["newRoot"]  # an update pipeline of literals
    assert fields["embedding"]["$literal"] == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
    assert [e["path"] for e in fields["embeddings"]["$literal"]] == ["a", "b"]


def _doc(key: str, vector: list[float]) -> dict[str, Any]:
    return {
        "_id": key,
        "ns": "a\x00b",
        "key": key,
        "namespace": ["a", "b"],
        "value": {"n": 2},
        "created_at": datetime(2026, 1, 1),
        "updated_at": datetime(2026, 1, 1),
        "embeddings": [{"path": "text", "vector": vector}],
    }


def test_exact_search_streams_and_keeps_only_the_page(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """25 candidates read in replies of 10 (``MAX_READ_BATCH``, 1,000 in the library):
    never more than offset + limit kept between them, and the page equals InMemoryStore's."""
    from mongo_ckpt.store import operations

    index = _index(fields=["text"])
    store = make_store(index=index, exact_search=True)
    reference = InMemoryStore(index=_index(fields=["text"]))  # type: ignore[arg-type]
    words = ["red", "green", "blue", "apple", "pear", "sky", "sea", "tree"]
    ops = [
        PutOp(("big",), f"k{i:04}", {"text": f"{words[i % 8]} {words[i * 3 % 8]} n{i}"})
        for i in range(25)
    ]
    store.batch(ops)
    reference.batch(ops)
    held: list[int] = []
    real_best = operations.best

    def recording_best(*args: Any) -> Any:
        kept = real_best(*args)
        held.append(len(kept))
        return kept

    monkeypatch.setattr(operations, "best", recording_best)
    monkeypatch.setattr(operations, "MAX_READ_BATCH", 10)
    calls = count_calls(store.collections)
    found = store.search(("big",), query="blue sea", limit=4, offset=2)
    assert held == [6, 6, 6]  # one per reply
    assert dict(calls) == {("store", "find"): 1}
    expected = reference.search(("big",), query="blue sea", limit=4, offset=2)
    assert [(i.key, round(i.score, 9)) for i in found] == [
        (i.key, round(i.score, 9)) for i in expected
    ]
