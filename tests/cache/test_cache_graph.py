"""Graphs compiled with the cache: a node with a ``CachePolicy`` runs once per input until
its TTL passes or its cache is cleared, in subgraphs too, encrypted with
``EncryptedSerializer``, and under concurrent runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, TypedDict

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, StateGraph
from langgraph.types import CachePolicy

from mongo_ckpt.cache.operations import CACHE
from tests.backends import count_calls, maybe_await
from tests.cache.support import CacheApi, Clock

MARKER = "plaintext-marker-c4c3"
ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef" * 2)


class State(TypedDict, total=False):
    question: str
    user: str
    answer: str


def counted_graph(runs: Counter, policy: CachePolicy, *, async_node: bool) -> StateGraph:
    """``START -> answer``; ``answer`` counts its runs in ``runs``."""

    def answer(state: State) -> State:
        runs[state["question"]] += 1
        return {"answer": f"{MARKER}: {state['question']} ({runs[state['question']]})"}

    async def aanswer(state: State) -> State:
        return answer(state)

    builder = StateGraph(State)
    builder.add_node("answer", aanswer if async_node else answer, cache_policy=policy)
    builder.add_edge(START, "answer")
    return builder


async def invoke(api: CacheApi, graph: Any, state: State) -> State:
    if api.is_async:
        return await graph.ainvoke(state)
    return await asyncio.to_thread(graph.invoke, state)


async def clear_cache(api: CacheApi, graph: Any) -> None:
    if api.is_async:
        await graph.aclear_cache()
    else:
        graph.clear_cache()


def compiled(api: CacheApi, runs: Counter, policy: CachePolicy) -> Any:
    return counted_graph(runs, policy, async_node=api.is_async).compile(cache=api.cache)


async def test_a_cached_node_runs_once_per_input_until_its_ttl(
    cache_api: CacheApi, clock: Clock
) -> None:
    runs: Counter = Counter()
    graph = compiled(cache_api, runs, CachePolicy(ttl=60))
    first = await invoke(cache_api, graph, {"question": "q1"})
    counter = count_calls(cache_api.cache.collections)
    assert await invoke(cache_api, graph, {"question": "q1"}) == first
    assert runs == {"q1": 1}
    assert counter == {(CACHE, "find"): 1}  # the second run: served from MongoDB
    await invoke(cache_api, graph, {"question": "q2"})
    assert runs == {"q1": 1, "q2": 1}
    clock.advance(61)
    assert await invoke(cache_api, graph, {"question": "q1"}) != first
    assert runs == {"q1": 2, "q2": 1}


async def test_a_result_too_large_for_a_document_runs_again_instead_of_failing(
    cache_api: CacheApi,
) -> None:
    """A node whose result is over 16 MiB: every run succeeds, the node running each time
    (``InMemoryCache`` would serve the second; the checkpointer stores it in parts)."""
    runs: Counter = Counter()

    def answer(state: State) -> State:
        runs[state["question"]] += 1
        return {"answer": "x" * (17 * 2**20)}

    builder = StateGraph(State)
    builder.add_node("answer", answer, cache_policy=CachePolicy(ttl=60))
    builder.add_edge(START, "answer")
    graph = builder.compile(cache=cache_api.cache)
    for _ in range(2):
        assert len((await invoke(cache_api, graph, {"question": "big"}))["answer"]) == 17 * 2**20
    assert runs == {"big": 2} and await cache_api.docs() == []


async def test_clear_cache_runs_the_node_again(cache_api: CacheApi) -> None:
    runs: Counter = Counter()
    graph = compiled(cache_api, runs, CachePolicy())
    await invoke(cache_api, graph, {"question": "q"})
    await invoke(cache_api, graph, {"question": "q"})
    assert runs == {"q": 1}
    await clear_cache(cache_api, graph)
    assert await cache_api.docs() == []
    await invoke(cache_api, graph, {"question": "q"})
    assert runs == {"q": 2}


async def test_a_custom_key_func_decides_what_is_the_same_input(cache_api: CacheApi) -> None:
    runs: Counter = Counter()
    policy = CachePolicy(key_func=lambda state: state["question"].lower(), ttl=None)
    graph = compiled(cache_api, runs, policy)
    await invoke(cache_api, graph, {"question": "Hello", "user": "a"})
    await invoke(cache_api, graph, {"question": "Hello", "user": "b"})  # same key
    assert runs == {"Hello": 1}
    await invoke(cache_api, graph, {"question": "HELLO", "user": "a"})  # same key, lowered
    assert runs == {"Hello": 1}
    [doc] = await cache_api.docs()
    assert doc["namespace"][-1] == "answer" and "expires_at" not in doc


async def test_a_node_in_a_subgraph_is_cached(cache_api: CacheApi) -> None:
    runs: Counter = Counter()
    # A subgraph's nodes use the cache the subgraph is compiled with (as with InMemoryCache).
    inner = counted_graph(runs, CachePolicy(ttl=120), async_node=cache_api.is_async)
    outer = StateGraph(State)
    outer.add_node("inner", inner.compile(cache=cache_api.cache))
    outer.add_edge(START, "inner")
    graph = outer.compile()
    first = await invoke(cache_api, graph, {"question": "deep"})
    assert await invoke(cache_api, graph, {"question": "deep"}) == first
    assert runs == {"deep": 1}
    assert {doc["namespace"][-1] for doc in await cache_api.docs()} == {"answer"}


async def test_encrypted_values_hold_no_plaintext(cache_api: CacheApi) -> None:
    plain = cache_api.cache
    cache = type(plain)(plain.client, f"{plain.db.name}_enc", serde=ENCRYPTED)
    api = CacheApi(cache)
    try:
        runs: Counter = Counter()
        graph = compiled(api, runs, CachePolicy(ttl=60))
        first = await invoke(api, graph, {"question": f"secret {MARKER}"})
        assert await invoke(api, graph, {"question": f"secret {MARKER}"}) == first
        assert sum(runs.values()) == 1
        docs = await api.docs()
        assert docs and all(doc["encoding"].endswith("+aes") for doc in docs)
        assert MARKER.encode() not in await api.raw_bytes()
    finally:
        await maybe_await(plain.client.drop_database(cache.db.name))
    # The same graph on the plain cache stores the marker where a search finds it.
    await invoke(cache_api, compiled(cache_api, Counter(), CachePolicy()), {"question": MARKER})
    assert MARKER.encode() in await cache_api.raw_bytes()


async def test_concurrent_runs_read_and_write_the_same_keys(cache_api: CacheApi) -> None:
    runs: Counter = Counter()
    graph = compiled(cache_api, runs, CachePolicy(ttl=300))
    questions = [f"q{i % 5}" for i in range(40)]
    results = await asyncio.gather(
        *(invoke(cache_api, graph, {"question": q}) for q in questions)
    )
    assert all(r["answer"].startswith(f"{MARKER}: {q} (") for r, q in zip(results, questions))
    # Once the first runs' entries are written, every run is served from the cache.
    before = dict(runs)
    again = await asyncio.gather(*(invoke(cache_api, graph, {"question": q}) for q in questions))
    assert dict(runs) == before
    stored = {doc["key"] for doc in await cache_api.docs()}
    assert len(stored) == 5
    for r, q in zip(again, questions):
        assert r["answer"].startswith(f"{MARKER}: {q} (")


async def test_many_tasks_set_and_get_the_same_keys(cache_api: CacheApi) -> None:
    ns = ("__pregel_ns_writes", "graph", "node")

    async def worker(i: int) -> dict[Any, Any]:
        await cache_api.set({(ns, f"k{j}"): ({"by": i, "j": j}, 60) for j in range(5)})
        return await cache_api.get([(ns, f"k{j}") for j in range(5)])

    seen = await asyncio.gather(*(worker(i) for i in range(30)))
    for found in seen:  # each read sees a whole value of some writer for every key
        assert set(found) == {(ns, f"k{j}") for j in range(5)}
        assert all(v["j"] == int(key[1][1:]) and 0 <= v["by"] < 30 for key, v in found.items())
    assert len(await cache_api.docs()) == 5
