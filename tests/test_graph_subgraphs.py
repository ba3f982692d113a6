"""A subgraph as a node: its checkpoints live under ``checkpoint_ns`` ``<node>:<task id>``."""

from __future__ import annotations

import re
from collections import Counter

from langgraph.types import Command

from tests.graphs import thread
from tests.saver_support import Api
from tests.subgraph_support import parent_builder

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


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
