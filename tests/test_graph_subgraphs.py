"""A subgraph as a node: its checkpoints live under ``checkpoint_ns`` ``<node>:<task id>``."""

from __future__ import annotations

import re
from collections import Counter

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from tests.graphs import thread
from tests.saver_support import Api

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class Article(TypedDict, total=False):
    topic: str
    text: str
    published: bool


def parent_builder(calls: Counter) -> StateGraph:
    """START -> plan -> child [draft -> review (interrupts)] -> publish -> END."""

    def plan(state: Article) -> dict:
        calls["plan"] += 1
        return {}

    def draft(state: Article) -> dict:
        calls["draft"] += 1
        return {"text": f"draft about {state['topic']}"}

    def review(state: Article) -> dict:
        calls["review"] += 1
        verdict = interrupt({"review": state["text"]})
        return {"text": f"{state['text']} ({verdict})"}

    def publish(state: Article) -> dict:
        calls["publish"] += 1
        return {"published": True}

    child = StateGraph(Article)
    child.add_node("draft", draft)
    child.add_node("review", review)
    child.add_edge(START, "draft")
    child.add_edge("draft", "review")
    child.add_edge("review", END)

    parent = StateGraph(Article)
    parent.add_node("plan", plan)
    parent.add_node("child", child.compile())
    parent.add_node("publish", publish)
    parent.add_edge(START, "plan")
    parent.add_edge("plan", "child")
    parent.add_edge("child", "publish")
    parent.add_edge("publish", END)
    return parent


async def test_subgraph_namespaces(api: Api) -> None:
    calls: Counter = Counter()
    builder = parent_builder(calls)
    graph = api.compile(builder)
    config = thread("t1")

    first = await api.invoke(graph, {"topic": "mongo"}, config)
    assert [i.value for i in first["__interrupt__"]] == [{"review": "draft about mongo"}]

    state = await api.state(graph, config, subgraphs=True)
    assert state.next == ("child",)
    assert state.values == {"topic": "mongo"}
    (task,) = state.tasks
    assert task.name == "child"
    inner = task.state
    assert inner.next == ("review",)
    assert inner.values == {"topic": "mongo", "text": "draft about mongo"}
    assert [i.value for i in inner.interrupts] == [{"review": "draft about mongo"}]
    namespace = inner.config["configurable"]["checkpoint_ns"]
    assert re.fullmatch(f"child:{UUID}", namespace)
    assert namespace == f"child:{task.id}"
    root_id = state.config["configurable"]["checkpoint_id"]
    assert inner.metadata["parents"] == {"": root_id}

    # Without subgraphs=True the task only points at the subgraph's namespace.
    (plain_task,) = (await api.state(graph, config)).tasks
    assert plain_task.state["configurable"]["checkpoint_ns"] == namespace

    # The saver keeps each namespace's checkpoints apart.
    nested = await api.list(thread("t1", checkpoint_ns=namespace))
    assert [c.metadata["step"] for c in nested] == [1, 0, -1]
    assert {c.config["configurable"]["checkpoint_ns"] for c in nested} == {namespace}
    assert all(c.metadata["parents"] == {"": root_id} for c in nested)
    root = await api.list(thread("t1", checkpoint_ns=""))
    assert [c.metadata["step"] for c in root] == [1, 0, -1]
    assert {c.config["configurable"]["checkpoint_ns"] for c in root} == {""}
    # A config without checkpoint_ns lists the thread's checkpoints of every namespace.
    everything = await api.list(thread("t1"))
    assert (
        sorted(c.config["configurable"]["checkpoint_ns"] for c in everything)
        == [""] * 3 + [namespace] * 3
    )

    api = api.reopened()
    graph = api.compile(builder)
    final = await api.invoke(graph, Command(resume="approved"), config)
    assert final == {"topic": "mongo", "text": "draft about mongo (approved)", "published": True}
    # Inside the subgraph only the interrupted node runs again.
    assert calls == {"plan": 1, "draft": 1, "review": 2, "publish": 1}
    state = await api.state(graph, config, subgraphs=True)
    assert (state.next, state.tasks, state.values) == ((), (), final)
    nested = await api.list(thread("t1", checkpoint_ns=namespace))
    assert nested[0].checkpoint["channel_values"]["text"] == "draft about mongo (approved)"
