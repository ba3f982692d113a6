"""Human in the loop: ``interrupt()`` + ``Command(resume=...)`` and ``interrupt_before``."""

from __future__ import annotations

from collections import Counter

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from tests.graphs import (
    SEED_FINAL,
    SEED_INPUT,
    seed_builder,
    thread,
)
from tests.saver_support import Api


class Form(TypedDict, total=False):
    topic: str
    name: str
    email: str
    summary: str


def form_builder(calls: Counter) -> StateGraph:
    """START -> prepare -> ask (two interrupts in one node) -> finish -> END."""

    def prepare(state: Form) -> dict:
        calls["prepare"] += 1
        return {"topic": state["topic"].upper()}

    def ask(state: Form) -> dict:
        calls["ask"] += 1
        name = interrupt({"question": "name?", "topic": state["topic"]})
        email = interrupt({"question": "email?", "name": name})
        return {"name": name, "email": email}

    def finish(state: Form) -> dict:
        calls["finish"] += 1
        return {"summary": f"{state['topic']}: {state['name']} <{state['email']}>"}

    builder = StateGraph(Form)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder


async def test_interrupt_and_resume(api: Api) -> None:
    calls: Counter = Counter()
    builder = form_builder(calls)
    graph = api.compile(builder)
    config = thread("t1")

    first = await api.invoke(graph, {"topic": "billing"}, config)
    assert [i.value for i in first["__interrupt__"]] == [{"question": "name?", "topic": "BILLING"}]
    state = await api.state(graph, config)
    assert state.next == ("ask",)
    assert state.values == {"topic": "BILLING"}
    assert [i.value for i in state.interrupts] == [{"question": "name?", "topic": "BILLING"}]
    assert state.interrupts == state.tasks[0].interrupts
    assert calls == {"prepare": 1, "ask": 1}

    # Each resume comes through a new saver: the interrupt and the earlier answer are stored.
    api = api.reopened()
    graph = api.compile(builder)
    second = await api.invoke(graph, Command(resume="Ada"), config)
    assert [i.value for i in second["__interrupt__"]] == [{"question": "email?", "name": "Ada"}]
    assert (await api.state(graph, config)).next == ("ask",)

    api = api.reopened()
    graph = api.compile(builder)
    final = await api.invoke(graph, Command(resume="ada@example.org"), config)
    assert final == {
        "topic": "BILLING",
        "name": "Ada",
        "email": "ada@example.org",
        "summary": "BILLING: Ada <ada@example.org>",
    }
    # A resumed node restarts from its beginning; nodes before it never run again.
    assert calls == {"prepare": 1, "ask": 3, "finish": 1}
    state = await api.state(graph, config)
    assert (state.next, state.interrupts, state.values) == ((), (), final)


async def test_interrupt_before(api: Api) -> None:
    calls: Counter = Counter()
    builder = seed_builder(calls)
    graph = api.compile(builder, interrupt_before=["node_b"])
    config = thread("t1")

    assert await api.invoke(graph, SEED_INPUT, config) == {"foo": "a", "bar": ["a"]}
    state = await api.state(graph, config)
    assert state.next == ("node_b",)
    assert state.values == {"foo": "a", "bar": ["a"]}
    assert (state.metadata["source"], state.metadata["step"]) == ("loop", 1)
    assert calls == {"node_a": 1}

    api = api.reopened()
    graph = api.compile(builder, interrupt_before=["node_b"])
    assert await api.invoke(graph, None, config) == SEED_FINAL
    assert calls == {"node_a": 1, "node_b": 1}
    history = await api.history(graph, config)
    assert [s.next for s in history] == [(), ("node_b",), ("node_a",), ("__start__",)]
    assert history[0].values == SEED_FINAL
