"""A user's script on the documented API; ``mypy --strict`` must accept it (test_typing.py)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import CachePolicy
from pymongo import AsyncMongoClient, MongoClient
from pymongo.write_concern import WriteConcern

from mongo_ckpt import (
    AsyncMongoDBSaver,
    ClientClosedError,
    ConflictingValueError,
    MissingHistoryError,
    MissingValueError,
    MongoDBSaver,
    SchemaTooNewError,
    SchemaUpgradeRequired,
    StaleParentError,
    ThreadExistsError,
    __version__,
)
from mongo_ckpt.cache import AsyncMongoDBCache, CacheInputError, CacheTypeError, MongoDBCache
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore

ERRORS: tuple[type[Exception], ...] = (
    ClientClosedError, ConflictingValueError, MissingHistoryError, MissingValueError,
    SchemaTooNewError, SchemaUpgradeRequired, StaleParentError, ThreadExistsError,
    CacheInputError, CacheTypeError,
)
VERSION: str = __version__


def reply(state: MessagesState) -> dict[str, list[HumanMessage]]:
    return {"messages": [HumanMessage("hello")]}


def build() -> StateGraph[MessagesState]:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def sync_usage(uri: str) -> int:
    with MongoDBSaver.from_conn_string(uri, "agents", timeoutMS=5_000) as saver:
        saver.setup()
        store = MongoDBStore.from_saver(saver)
        store.put(("users", "1"), "prefs", {"theme": "dark"})
        item = store.get(("users", "1"), "prefs")
        graph = build().compile(checkpointer=saver, store=store)
        inputs: MessagesState = {"messages": [HumanMessage("hi")]}
        graph.invoke(inputs, {"configurable": {"thread_id": "1"}})
        found = saver.get_tuple({"configurable": {"thread_id": "1"}})
        steps = [t.metadata["step"] for t in saver.list({"configurable": {"thread_id": "1"}})]
        return len(steps) + (1 if found and item else 0)


def explicit_clients(uri: str) -> None:
    saver = MongoDBSaver(MongoClient(uri), "agents", write_concern=WriteConcern(w=1))
    MongoDBStore(MongoClient(uri), "agents", collection_name="memories")
    MongoDBStore(MongoClient(uri)["agents"]["memories"], ttl_config={"default_ttl": 5})
    AsyncMongoDBSaver(AsyncMongoClient(uri), "agents")
    AsyncMongoDBStore(AsyncMongoClient(uri), "agents")
    saver.delete_thread("1")


def official_order(uri: str) -> None:
    with MongoDBSaver.from_conn_string(uri, "agents", "cks", "writes", 3600) as saver:
        saver.setup()
    with MongoDBStore.from_conn_string(uri, "agents", "memories", {"default_ttl": 5}) as store:
        store.setup()


async def async_usage(uri: str) -> str | None:
    async with AsyncMongoDBSaver.from_conn_string(uri, "agents") as saver:
        await saver.asetup()
        store = AsyncMongoDBStore.from_saver(saver)
        await store.aput(("users", "1"), "name", {"value": "Ada"})
        graph = build().compile(checkpointer=saver, store=store)
        inputs: MessagesState = {"messages": [HumanMessage("hi")]}
        await graph.ainvoke(inputs, {"configurable": {"thread_id": "1"}})
        item = await store.aget(("users", "1"), "name")
        value = item.value["value"] if item else None
        return value if isinstance(value, str) else None


def cached_node(uri: str) -> int:
    with MongoDBSaver.from_conn_string(uri, "agents") as saver:
        cache: MongoDBCache[Any] = MongoDBCache.from_saver(saver)
        builder = StateGraph(MessagesState)
        builder.add_node("reply", reply, cache_policy=CachePolicy(ttl=60))
        builder.add_edge(START, "reply")
        graph = builder.compile(checkpointer=saver, cache=cache)
        graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "1"}})
        graph.clear_cache()
        return len(cache.get([(("__pregel_ns_writes",), "key")]))


async def async_cache(uri: str) -> object:
    async with AsyncMongoDBCache[Any].from_conn_string(
        uri, "agents", collection_name="node_cache"
    ) as cache:
        await cache.setup()
        await cache.aset({(("users", "1"), "answer"): ({"text": "hi"}, 30)})
        await cache.aclear([("users", "1")])
        return (await cache.aget([(("users", "1"), "answer")])).get((("users", "1"), "answer"))
