"""A failing node next to a successful one: the success is kept as a pending write."""

from __future__ import annotations

import threading
from collections import Counter
from operator import add
from typing import Annotated

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from tests.graphs import committed, thread
from tests.saver_support import BOTH_PUT_PATHS, Api

pytestmark = BOTH_PUT_PATHS

DURABILITY = pytest.mark.parametrize("durability", ["sync", "async", "exit"])


class Log(TypedDict):
    log: Annotated[list[str], add]


def parallel_builder(calls: Counter, ok_committed: threading.Event) -> StateGraph:
    """START -> (ok, flaky) in one superstep -> END; flaky fails on its first run only,
    once ok's run is committed (``ok_committed``, see ``tests.graphs.committed``)."""

    def ok(state: Log) -> dict:
        calls["ok"] += 1
        return {"log": ["ok"]}

    def flaky(state: Log) -> dict:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            # A failure cancels the tasks still running: let ok be committed first.
            assert ok_committed.wait(timeout=60)
            raise RuntimeError("flaky is down")
        return {"log": ["flaky"]}

    builder = StateGraph(Log)
    builder.add_node("ok", ok)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "ok")
    builder.add_edge(START, "flaky")
    builder.add_edge("ok", END)
    builder.add_edge("flaky", END)
    return builder


@DURABILITY
async def test_resume_after_failure(
    api: Api, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter = Counter()
    builder = parallel_builder(calls, committed(monkeypatch, "ok"))
    config = thread("t1")
    with pytest.raises(RuntimeError, match="flaky is down"):
        await api.invoke(api.compile(builder), {"log": ["in"]}, config, durability=durability)
    assert calls == {"ok": 1, "flaky": 1}

    # A new process sees the failed superstep: ok's result and flaky's error are stored.
    api = api.reopened()
    graph = api.compile(builder)
    state = await api.state(graph, config)
    assert state.next == ("flaky",)
    assert state.values == {"log": ["in", "ok"]}
    tasks = {t.name: t for t in state.tasks}
    assert tasks["ok"].result == {"log": ["ok"]}
    assert tasks["ok"].error is None
    assert "flaky is down" in tasks["flaky"].error
    assert tasks["flaky"].result is None

    assert await api.invoke(graph, None, config, durability=durability) == {
        "log": ["in", "flaky", "ok"]
    }
    assert calls == {"ok": 1, "flaky": 2}
    state = await api.state(graph, config)
    assert (state.next, state.values) == ((), {"log": ["in", "flaky", "ok"]})
