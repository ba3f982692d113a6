"""Conversation memory across invocations with ``add_messages``; threads stay isolated."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, RemoveMessage

from tests.graphs import chat_builder, contents, thread
from tests.saver_support import Api


def say(text: str) -> dict:
    return {"messages": [HumanMessage(text)]}


async def test_conversation_memory(api: Api) -> None:
    graph = api.compile(chat_builder())
    await api.invoke(graph, say("hi"), thread("alice"))
    await api.invoke(graph, say("hello"), thread("bob"))
    first_turn = (await api.state(graph, thread("alice"))).values["messages"]

    # The next turn comes in a new process: everything it remembers is in the database.
    api = api.reopened()
    graph = api.compile(chat_builder())
    result = await api.invoke(graph, say("again"), thread("alice"))
    assert contents(result["messages"]) == [
        ("human", "hi"),
        ("ai", "#1: hi"),
        ("human", "again"),
        ("ai", "#3: again"),
    ]
    assert [m.id for m in result["messages"][:2]] == [m.id for m in first_turn]
    assert all(m.id for m in result["messages"])

    bob = (await api.state(graph, thread("bob"))).values["messages"]
    assert contents(bob) == [("human", "hello"), ("ai", "#1: hello")]
    assert not {m.id for m in bob} & {m.id for m in result["messages"]}
    assert (await api.state(graph, thread("carol"))).values == {}

    alice_checkpoints = await api.list(thread("alice"))
    assert len(alice_checkpoints) == 6  # input, bot, done: per turn
    assert {c.config["configurable"]["thread_id"] for c in alice_checkpoints} == {"alice"}
    assert len(await api.list(thread("bob"))) == 3


async def test_forget_messages(api: Api) -> None:
    """``RemoveMessage`` through ``update_state`` is remembered by later turns."""
    graph = api.compile(chat_builder())
    config = thread("alice")
    await api.invoke(graph, say("secret"), config)
    await api.invoke(graph, say("weather?"), config)
    messages = (await api.state(graph, config)).values["messages"]

    await api.update(graph, config, {"messages": [RemoveMessage(m.id) for m in messages[:2]]})

    api = api.reopened()
    graph = api.compile(chat_builder())
    result = await api.invoke(graph, say("and now?"), config)
    assert contents(result["messages"]) == [
        ("human", "weather?"),
        ("ai", "#3: weather?"),
        ("human", "and now?"),
        ("ai", "#3: and now?"),
    ]
