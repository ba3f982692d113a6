"""Loads the checkpointer and store of ``langgraph.json`` through langgraph-api's own code,
as the server's lifespan does, runs a graph on them and prints what happened as JSON.

Run by ``tests/test_platform.py`` in a fresh interpreter (``python -m tests.platform_server``)
because langgraph-api reads its configuration (``LANGGRAPH_CHECKPOINTER``,
``LANGGRAPH_STORE``...) from the environment when it is first imported, and sets process-wide
logging.
"""

from __future__ import annotations

import asyncio
import json
import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from pymongo.errors import InvalidOperation
from typing_extensions import TypedDict


class State(TypedDict):
    items: Annotated[list[str], operator.add]


async def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    count = len(await store.asearch(("memories",)))
    await store.aput(("memories",), f"m{count}", {"n": count})
    return {"items": [f"seen {count}"]}


def graph_builder() -> StateGraph:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder


async def serve() -> dict[str, Any]:
    from langgraph_api import _checkpointer as api_checkpointer
    from langgraph_api import store as api_store

    # The order of langgraph_runtime_inmem.lifespan: checkpointer, then the custom store.
    await api_checkpointer.start_checkpointer()
    await api_store.collect_store_from_env()
    checkpointer = await api_checkpointer.get_checkpointer()  # the server's adapter
    store = await api_store.get_store()
    saver = checkpointer._inner  # type: ignore[attr-defined]

    graph = graph_builder().compile(checkpointer=checkpointer, store=store)
    config = {"configurable": {"thread_id": "1"}}
    await graph.ainvoke({"items": []}, config)
    result = await graph.ainvoke({"items": []}, config)
    history = [snapshot async for snapshot in graph.aget_state_history(config)]
    memory = await store.aget(("memories",), "m1")
    # Deleting a thread on the server prunes it with strategy="delete_all".
    await checkpointer.aprune(["1"], strategy="delete_all")
    after_delete = await graph.aget_state(config)
    sweeper = store._sweeper  # type: ignore[attr-defined]
    report = {
        "checkpointer": f"{type(saver).__module__}.{type(saver).__qualname__}",
        "store": f"{type(store).__module__}.{type(store).__qualname__}",
        "db": [saver.db.name, store.db.name],  # type: ignore[attr-defined]
        "items": result["items"],
        "history": len(history),
        "memory": memory.value if memory else None,
        "values_after_delete": after_delete.values,
        "sweeping": sweeper is not None and not sweeper.done(),
    }
    client = saver.client
    await client.drop_database(saver.db.name)
    await api_store.exit_store()
    await api_checkpointer.exit_checkpointer()
    report["sweeper_stopped"] = sweeper is not None and sweeper.done()
    try:
        await client[saver.db.name].command("ping")
        report["client_closed"] = False
    except InvalidOperation:
        report["client_closed"] = True
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(serve())))
