"""Conversation memory across invocations with ``add_messages``; threads stay isolated."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, RemoveMessage

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from tests.graphs import AsyncRunner, Runner, SyncRunner, chat_builder, contents, thread


def say(text: str) -> dict:
    return {"messages": [HumanMessage(text)]}


async def check_conversation_memory(run: Runner) -> None:
    graph = run.compile(chat_builder())
    await run.invoke(graph, say("hi"), thread("alice"))
    await run.invoke(graph, say("hello"), thread("bob"))
    first_turn = (await run.state(graph, thread("alice"))).values["messages"]

    # The next turn comes in a new process: everything it remembers is in the database.
    run = run.reopened()
    graph = run.compile(chat_builder())
    result = await run.invoke(graph, say("again"), thread("alice"))
    assert contents(result["messages"]) == [
        ("human", "hi"),
        ("ai", "#1: hi"),
        ("human", "again"),
        ("ai", "#3: again"),
    ]
    assert [m.id for m in result["messages"][:2]] == [m.id for m in first_turn]
    assert all(m.id for m in result["messages"])

    bob = (await run.state(graph, thread("bob"))).values["messages"]
    assert contents(bob) == [("human", "hello"), ("ai", "#1: hello")]
    assert not {m.id for m in bob} & {m.id for m in result["messages"]}
    assert (await run.state(graph, thread("carol"))).values == {}

    alice_checkpoints = await run.checkpoints(thread("alice"))
    assert len(alice_checkpoints) == 6  # input, bot, done: per turn
    assert {c.config["configurable"]["thread_id"] for c in alice_checkpoints} == {"alice"}
    assert len(await run.checkpoints(thread("bob"))) == 3


async def check_forget_messages(run: Runner) -> None:
    """``RemoveMessage`` through ``update_state`` is remembered by later turns."""
    graph = run.compile(chat_builder())
    config = thread("alice")
    await run.invoke(graph, say("secret"), config)
    await run.invoke(graph, say("weather?"), config)
    messages = (await run.state(graph, config)).values["messages"]

    await run.update(graph, config, {"messages": [RemoveMessage(m.id) for m in messages[:2]]})

    run = run.reopened()
    graph = run.compile(chat_builder())
    result = await run.invoke(graph, say("and now?"), config)
    assert contents(result["messages"]) == [
        ("human", "weather?"),
        ("ai", "#3: weather?"),
        ("human", "and now?"),
        ("ai", "#3: and now?"),
    ]


async def test_conversation_memory_sync(saver: MongoDBSaver) -> None:
    await check_conversation_memory(SyncRunner(saver))


async def test_conversation_memory_async(asaver: AsyncMongoDBSaver) -> None:
    await check_conversation_memory(AsyncRunner(asaver))


async def test_forget_messages_sync(saver: MongoDBSaver) -> None:
    await check_forget_messages(SyncRunner(saver))


async def test_forget_messages_async(asaver: AsyncMongoDBSaver) -> None:
    await check_forget_messages(AsyncRunner(asaver))
