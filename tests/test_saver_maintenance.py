"""Value documents written only for new versions; ``list`` selection and order; and the
maintenance calls (``delete_thread``, ``delete_for_runs``, ``copy_thread``, ``prune``)
touching only their own threads and leaving no orphan documents."""

from __future__ import annotations

from operator import add
from typing import Annotated

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from mongo_ckpt import ThreadExistsError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.saver_support import Api, assert_no_orphans, put_chain, values_at


class State(TypedDict):
    foo: str
    bar: Annotated[list[str], add]


def _graph_builder() -> StateGraph:
    builder = StateGraph(State)
    builder.add_node("node_a", lambda state: {"foo": "a"})
    builder.add_node("node_b", lambda state: {"bar": ["b"]})
    builder.add_edge(START, "node_a")
    builder.add_edge("node_a", "node_b")
    builder.add_edge("node_b", END)
    return builder


def _thread(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}}


async def test_only_new_versions_get_blobs(api: Api) -> None:
    configs = await put_chain(api, "t", 5)
    # ``a`` changes at every checkpoint, ``b`` only at the first.
    assert await api.count(BLOBS, {"channel": "a"}) == 5
    assert await api.count(BLOBS, {"channel": "b"}) == 1
    for step, config in enumerate(configs):
        found = await api.get_tuple(config)
        assert found.checkpoint["channel_values"] == values_at(step, "t")

    graph = _graph_builder().compile(checkpointer=api.saver)
    await api.invoke(graph, {"foo": "x", "bar": []}, _thread("g"))
    history = await api.history(graph, _thread("g"))
    assert [s.values for s in history] == [
        {"foo": "a", "bar": ["b"]},
        {"foo": "a", "bar": []},
        {"foo": "x", "bar": []},
        {"bar": []},  # the input checkpoint: only the reducer channel's empty default
    ]
    # Three checkpoints hold ``foo`` and ``bar``, each was written twice.
    for channel in ("foo", "bar"):
        assert await api.count(BLOBS, {"thread_id": "g", "channel": channel}) == 2


async def test_list_selection(api: Api) -> None:
    t = await put_chain(api, "t", 5, user="alice")
    child = await put_chain(api, "t", 2, ns="child", user="alice")
    u = await put_chain(api, "u", 3, user="bob")

    def steps(found: list) -> list[int]:
        return [item.metadata["step"] for item in found]

    root = generate_config("t")
    everything = await api.list(_thread("t"))
    assert len(everything) == 7
    ids = [item.config["configurable"]["checkpoint_id"] for item in everything]
    assert ids == sorted(ids, reverse=True), "newest first"
    assert [item.config for item in await api.list(root)] == t[::-1]
    assert [
        item.config for item in await api.list(generate_config("t", checkpoint_ns="child"))
    ] == (child[::-1])

    assert [item.config for item in await api.list(root, filter={"step": 2})] == [t[2]]
    assert len(await api.list(None, filter={"step": 1})) == 3
    assert [item.config for item in await api.list(None, filter={"user": "bob"})] == u[::-1]
    assert [item.config for item in await api.list(None, filter={"user": "bob", "step": 2})] == [
        u[2]
    ]
    assert await api.list(None, filter={"user": "carol"}) == []

    assert steps(await api.list(root, before=t[3])) == [2, 1, 0]
    assert steps(await api.list(root, limit=2)) == [4, 3]
    assert steps(await api.list(root, before=t[3], limit=2)) == [2, 1]
    assert [item.config for item in await api.list(t[2])] == [t[2]]
    assert await api.list(t[2], before=t[2]) == []
    [latest] = await api.list(root, limit=1)
    assert latest.checkpoint["channel_values"] == values_at(4, "t")
    assert latest.parent_config == t[3]


async def test_delete_thread(api: Api) -> None:
    await put_chain(api, "t", 3, writes=True)
    await put_chain(api, "t", 2, ns="child", writes=True)
    await put_chain(api, "u", 2, writes=True)
    others = await api.thread_docs("u")
    await api.delete_thread("t")
    assert await api.thread_docs("t") == {CHECKPOINTS: [], BLOBS: [], WRITES: []}
    assert await api.thread_docs("u") == others


async def test_delete_for_runs(api: Api) -> None:
    await put_chain(api, "t", 4, run_ids=["r1", "r1", "r2", "r2"], writes=True)
    await put_chain(api, "u", 2, run_ids=["r3", "r3"], writes=True)
    others = await api.thread_docs("u")
    await api.delete_for_runs(["r1"])
    assert await api.thread_docs("u") == others
    kept = await api.list(generate_config("t"))
    assert [item.metadata["run_id"] for item in kept] == ["r2", "r2"]
    # ``b`` was written by the deleted run; the surviving checkpoints still read it.
    assert [item.checkpoint["channel_values"] for item in kept] == [
        values_at(3, "t"),
        values_at(2, "t"),
    ]
    assert [item.pending_writes for item in kept] == [
        [("task-3", "w", "w3")],
        [("task-2", "w", "w2")],
    ]
    await assert_no_orphans(api)
    assert await api.count(BLOBS, {"thread_id": "t"}) == 3  # a at steps 2 and 3, and b

    await api.delete_for_runs(["r2", "unknown"])
    assert await api.thread_docs("t") == {CHECKPOINTS: [], BLOBS: [], WRITES: []}
    assert await api.thread_docs("u") == others


async def test_copy_thread(api: Api) -> None:
    await put_chain(api, "t", 3, writes=True)
    await put_chain(api, "t", 2, ns="child", writes=True)
    await put_chain(api, "u", 2, writes=True)
    source, others = await api.thread_docs("t"), await api.thread_docs("u")
    before = await api.list(_thread("t"))

    await api.copy_thread("t", "c")
    assert await api.thread_docs("t") == source
    assert await api.thread_docs("u") == others

    def renamed(config: dict | None) -> dict | None:
        if config is None:
            return None
        return {"configurable": {**config["configurable"], "thread_id": "c"}}

    await api.delete_thread("t")  # the copy does not depend on the source
    copied = await api.list(_thread("c"))
    assert [item.config for item in copied] == [renamed(item.config) for item in before]
    assert [item.parent_config for item in copied] == [
        renamed(item.parent_config) for item in before
    ]
    for old, new in zip(before, copied):
        assert new.checkpoint == old.checkpoint
        assert new.metadata == old.metadata
        assert new.pending_writes == old.pending_writes
    await assert_no_orphans(api)


async def test_copy_thread_refuses_a_target_with_checkpoints(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    await put_chain(api, "u", 1)
    source, target = await api.thread_docs("t"), await api.thread_docs("u")
    with pytest.raises(ThreadExistsError, match="thread 'u' already has checkpoints") as caught:
        await api.copy_thread("t", "u")
    assert isinstance(caught.value, ValueError) and caught.value.target_thread_id == "u"
    assert await api.thread_docs("t") == source and await api.thread_docs("u") == target
    # The same copy again (after a lost reply, or a cut) is not a second history.
    await api.copy_thread("t", "c")
    copied = await api.thread_docs("c")
    await api.copy_thread("t", "c")
    # The same documents; ``created_at`` is the time of the latest copy (new activity).
    again = await api.thread_docs("c")
    for docs in (copied, again):
        for doc in docs[CHECKPOINTS]:
            doc.pop("created_at")
    assert again == copied
    await put_chain(api, "c", 1)  # once the copy has its own checkpoints, it is refused
    with pytest.raises(ThreadExistsError):
        await api.copy_thread("t", "c")


async def test_prune_keep_latest(api: Api) -> None:
    t = await put_chain(api, "t", 4, writes=True)
    child = await put_chain(api, "t", 3, ns="child", writes=True)
    await put_chain(api, "u", 2, writes=True)
    others = await api.thread_docs("u")
    await api.prune(["t"], strategy="keep_latest")
    assert await api.thread_docs("u") == others
    kept = await api.list(_thread("t"))
    assert sorted(item.config["configurable"]["checkpoint_id"] for item in kept) == sorted(
        [t[-1]["configurable"]["checkpoint_id"], child[-1]["configurable"]["checkpoint_id"]]
    )
    for item in kept:
        ns = item.config["configurable"]["checkpoint_ns"]
        step = item.metadata["step"]
        # ``b`` was stored with the first checkpoint, which is gone.
        assert item.checkpoint["channel_values"] == values_at(step, "t", ns)
        assert item.pending_writes == [(f"task-{step}", "w", f"w{step}")]
    await assert_no_orphans(api)
    assert await api.count(BLOBS, {"thread_id": "t"}) == 4  # a and b, per namespace


async def test_prune_delete(api: Api) -> None:
    await put_chain(api, "t", 3, writes=True)
    await put_chain(api, "t", 2, ns="child", writes=True)
    await put_chain(api, "v", 2, writes=True)
    await put_chain(api, "u", 2, writes=True)
    others = await api.thread_docs("u")
    await api.prune(["t", "v"], strategy="delete")
    for gone in ("t", "v"):
        assert await api.thread_docs(gone) == {CHECKPOINTS: [], BLOBS: [], WRITES: []}
    assert await api.thread_docs("u") == others
