"""mongomock clients work as handed in: the first write needs no patch by the user.

The suite patches mongomock when it imports ``tests.backends``, so the check runs in a
fresh interpreter where nothing has patched it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio

    import mongomock
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph
    from mongomock_motor import AsyncMongoMockClient

    from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
    from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore

    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda s: {"messages": [AIMessage(f"#{len(s['messages'])}")]})
    builder.add_edge(START, "reply")
    config = {"configurable": {"thread_id": "t"}}

    client = mongomock.MongoClient()
    graph = builder.compile(checkpointer=MongoDBSaver(client, "db"))
    for text in ("one", "two"):
        graph.invoke({"messages": [("user", text)]}, config)
    print("sync saver", len(graph.get_state(config).values["messages"]))
    store = MongoDBStore(mongomock.MongoClient(), "db")
    store.put(("users",), "a", {"x": 1})
    store.put(("users",), "a", {"x": 2})
    print("sync store", store.get(("users",), "a").value)

    async def main():
        client = AsyncMongoMockClient()
        graph = builder.compile(checkpointer=AsyncMongoDBSaver(client, "db"))
        for text in ("one", "two"):
            await graph.ainvoke({"messages": [("user", text)]}, config)
        print("async saver", len((await graph.aget_state(config)).values["messages"]))
        store = AsyncMongoDBStore(AsyncMongoMockClient(), "db")
        await store.aput(("users",), "a", {"x": 1})
        await store.aput(("users",), "a", {"x": 2})
        print("async store", (await store.aget(("users",), "a")).value)

    asyncio.run(main())
    """
)


def test_mongomock_clients_write_without_a_manual_patch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "sync saver 4",
        "sync store {'x': 2}",
        "async saver 4",
        "async store {'x': 2}",
    ]
