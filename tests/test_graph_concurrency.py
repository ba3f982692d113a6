"""Many threads (conversations) run at once on one saver; each keeps only its own state."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from tests.graphs import chat_builder, contents, thread
from tests.saver_support import Api

THREADS = 20


async def test_concurrent_threads(api: Api) -> None:
    graph = api.compile(chat_builder())

    async def converse(thread_id: str) -> dict:
        for turn in (1, 2):
            message = {"messages": [HumanMessage(f"{thread_id} turn {turn}")]}
            result = await api.invoke(graph, message, thread(thread_id))
        return result

    thread_ids = [f"user-{n}" for n in range(THREADS)]
    results = await asyncio.gather(*(converse(t) for t in thread_ids))

    stored = await asyncio.gather(*(api.list(thread(t)) for t in thread_ids))
    for thread_id, result, checkpoints in zip(thread_ids, results, stored):
        assert contents(result["messages"]) == [
            ("human", f"{thread_id} turn 1"),
            ("ai", f"#1: {thread_id} turn 1"),
            ("human", f"{thread_id} turn 2"),
            ("ai", f"#3: {thread_id} turn 2"),
        ]
        assert checkpoints[0].checkpoint["channel_values"]["messages"] == result["messages"]
        assert len(checkpoints) == 6
        assert {c.config["configurable"]["thread_id"] for c in checkpoints} == {thread_id}
        ids = [c.config["configurable"]["checkpoint_id"] for c in checkpoints]
        for newer, older in zip(checkpoints, checkpoints[1:]):
            assert newer.parent_config == older.config
        assert len(set(ids)) == 6
