"""One process of the two-writer reproduction in ``tests/test_write_fencing.py`` (this
module holds no tests): ``python -m tests.fencing_worker URI DB ROLE FENCED DIR``.

Both processes run a chat turn on thread ``t``. ``first`` (holding the lease, when
``FENCED`` is ``1``) pauses inside its node, after LangGraph read the thread, until
``DIR/resume`` exists, telling it by ``DIR/paused``: a pod paused mid-run. ``second``
takes the lease over (fenced) and runs a whole turn meanwhile. Each prints ``ok`` or the
name of the error its run ended in.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from pymongo import MongoClient

from mongo_ckpt import MongoDBSaver


def main(uri: str, db: str, role: str, fenced: str, folder: str) -> None:
    here = Path(folder)

    def bot(state: MessagesState) -> dict:
        if role == "first":
            (here / "paused").touch()
            deadline = time.monotonic() + 60
            while not (here / "resume").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return {"messages": [AIMessage(f"{role} saw {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    client: MongoClient = MongoClient(uri)
    saver = MongoDBSaver(client, db)
    configurable = {"thread_id": "t"}
    if fenced == "1":
        configurable["thread_owner"] = saver.lease_thread("t", take_over=role == "second")
    try:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(role)]}, {"configurable": configurable})
        print("ok")
    except Exception as exc:  # the outcome is the output
        print(type(exc).__name__)
    finally:
        client.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
