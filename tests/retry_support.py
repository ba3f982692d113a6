"""Puts retried after a lost reply: a three-checkpoint thread, a graph (no tests here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph
from pymongo.errors import AutoReconnect

from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import BLOBS
from tests.faults import _fail, _Wrapper
from tests.saver_support import Api

T = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


class LoseReply(_Wrapper):
    """The first ``bulk_write`` on ``collection`` is applied, then its reply is lost. In a
    client-level bulk write (namespace ``namespace`` for the collection), its requests up
    to the last on ``collection`` are applied, then the connection is lost: for the values
    of a put, before its checkpoint, as when they are sent apart."""

    def __init__(self, collections: dict[str, Any], collection: str, namespace: str) -> None:
        self.collection, self.namespace, self.fired = collection, namespace, False
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        if self.fired or attr != "bulk_write" or name not in (self.collection, CLIENT):
            return method(*args, **kwargs)
        requests = list(args[0])
        if name == CLIENT:
            on = [i for i, r in enumerate(requests) if r._namespace == self.namespace]
            if not on:
                return method(*args, **kwargs)
            requests = requests[: on[-1] + 1]
        self.fired = True
        return _fail(method(requests, *args[1:], **kwargs))


async def lost_reply(api: Api, collection: str, put: Callable[[], Any]) -> None:
    """Run ``put`` with the reply of its first bulk write on ``collection`` lost (or its
    client-level bulk write cut after its last request on ``collection``)."""
    namespace = f"{api.saver.db.name}.{api.saver.layout.by_logical()[collection]}"
    wrapper = LoseReply(api.saver.collections, collection, namespace)
    try:
        with pytest.raises(AutoReconnect):
            await put()
    finally:
        wrapper.restore()
    assert wrapper.fired


def checkpoint_at(n: int, values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    return {
        **empty_checkpoint(),
        "id": f"1ef{n:012d}",
        "channel_values": dict(values),
        "channel_versions": dict(versions),
    }


class Thread:
    """Checkpoints of thread ``t``: ``messages`` (a list, stored as deltas) and ``other``
    (a list written once); ``put`` makes one, ``retry`` repeats the last one."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = [T]
        self.versions: dict[str, Any] = {}
        self.expected: dict[str, dict[str, Any]] = {}
        self.last: tuple[Any, ...] = ()

    def prepare(self, messages: list[Any], **changed: Any) -> tuple[Any, ...]:
        n = len(self.expected) + 1
        new = {"messages": f"{n:08}", **{ch: f"{n:08}" for ch in changed}}
        if n == 1:
            new["other"] = f"{n:08}"
        self.versions = {**self.versions, **new}
        previous = self.expected[self.checkpoint_id] if self.expected else {"other": ["fixed"]}
        values = {**previous, **changed, "messages": messages}
        checkpoint = checkpoint_at(n, values, self.versions)
        self.expected[checkpoint["id"]] = values
        metadata = {"source": "loop", "step": n, "parents": {}}
        self.last = (self.configs[-1], checkpoint, metadata, new)
        self.configs.append(
            {"configurable": {**T["configurable"], "checkpoint_id": checkpoint["id"]}}
        )
        return self.last

    @property
    def checkpoint_id(self) -> str:
        return self.configs[-1]["configurable"]["checkpoint_id"]

    async def put(self, api: Api, messages: list[Any], **changed: Any) -> dict[str, Any]:
        return await api.put(*self.prepare(messages, **changed))

    async def check(self, api: Api) -> None:
        """Every stored checkpoint reads back as it was put, through ``list`` and
        ``get_tuple``."""
        for item in await api.list(T):
            cid = item.config["configurable"]["checkpoint_id"]
            assert item.checkpoint["channel_values"] == self.expected[cid], cid
            again = await api.get_tuple(item.config)
            assert again.checkpoint["channel_values"] == self.expected[cid], cid


def msg(i: int) -> HumanMessage:
    return HumanMessage(f"message {i}", id=f"m{i}")


async def three(api: Api) -> Thread:
    """c1..c3 on ``api``: ``messages`` grows by one message per checkpoint (c2 and c3 are
    list deltas)."""
    thread = Thread()
    for n in range(1, 4):
        await thread.put(api, [msg(i) for i in range(n)])
    assert await api.count(BLOBS, {"channel": "messages", "base": {"$exists": True}}) == 2
    return thread


def graph_on(api: Api) -> Any:
    def bot(state: MessagesState) -> dict[str, Any]:
        return {
            "messages": [AIMessage(f"#{len(state['messages'])}", id=f"ai{len(state['messages'])}")]
        }

    return api.compile(StateGraph(MessagesState).add_node("bot", bot).add_edge(START, "bot"))
