"""One side of a rolling upgrade: a chat graph on ``MongoDBSaver``, one turn per line.

The test runs this file as a process of an earlier mongo-ckpt (its source tree first on
``PYTHONPATH``) beside the current release, and imports ``chat_graph`` for the current
side, so both answer with the same graph. Usage::

    python tests/rolling_release.py URI DB DIRECT

It sets up the saver and prints ``{"ready": <layout version it reads>, "module": <file>}``
(or ``{"refused": <error class>, "message": ...}`` and exits); then, for every line read
(a user's text), it runs one turn on thread ``t`` and prints ``{"read": n, "reply": ...,
"stored": m}``: the messages the graph had before the turn, its answer, and after.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

THREAD = {"configurable": {"thread_id": "t"}}


def chat_graph(checkpointer: Any) -> CompiledStateGraph:
    """A one-node chat whose answer says how many messages it was given."""

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"seen {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def turn(graph: CompiledStateGraph, text: str) -> dict[str, Any]:
    """One user turn on ``THREAD``: messages read before it, the answer, messages after."""
    read = len(graph.get_state(THREAD).values.get("messages", []))
    result = graph.invoke({"messages": [HumanMessage(text)]}, THREAD)
    messages = result["messages"]
    return {"read": read, "reply": messages[-1].content, "stored": len(messages)}


def main(uri: str, db_name: str, direct: bool) -> None:
    from pymongo import MongoClient

    import mongo_ckpt
    from mongo_ckpt import MongoDBSaver
    from mongo_ckpt.schema import SAVER_SCHEMA_VERSION

    client: MongoClient[dict[str, Any]] = MongoClient(uri, directConnection=direct)
    saver = MongoDBSaver(client, db_name)
    try:
        saver.setup()
    except Exception as exc:  # reported to the test, which checks the class
        print(json.dumps({"refused": type(exc).__name__, "message": str(exc)}), flush=True)
        return
    print(json.dumps({"ready": SAVER_SCHEMA_VERSION, "module": mongo_ckpt.__file__}), flush=True)
    graph = chat_graph(saver)
    for line in sys.stdin:
        print(json.dumps(turn(graph, line.strip())), flush=True)
    client.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
