"""The DeltaChannel history read with the tuple, in the scenarios of a deployment.

Each test loads a DeltaChannel state on an instance that expects (or wrongly expects) the
checkpoint its ``get_tuple`` finds, and compares the tuple and the history it then returns
with what a cold instance and ``BaseCheckpointSaver``'s own walk give.
"""

from __future__ import annotations

from operator import add
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer
from typing_extensions import TypedDict

from tests.delta_conversation import FREQUENCY, Conversation
from tests.delta_graphs import message_summary
from tests.graphs import thread
from tests.lengths import Length
from tests.perf.conversation import DELTA, chat_graph, human_message
from tests.saver_support import Api

CHANNEL = "messages"


async def base_walk(api: Api, config: Any) -> Any:
    """``BaseCheckpointSaver``'s default walk (get_tuple + parent_config) on a cold instance."""
    cold = api.reopened().saver
    if api.is_async:
        return await BaseCheckpointSaver.aget_delta_channel_history(
            cold, config=config, channels=[CHANNEL]
        )
    return BaseCheckpointSaver.get_delta_channel_history(cold, config=config, channels=[CHANNEL])


async def load_checked(api: Api, config: Any) -> Any:
    """get_tuple then the history on ``api`` (as LangGraph loads), against a cold instance."""
    found = await api.get_tuple(config)
    cold = await api.reopened().get_tuple(config)
    assert (found is None) == (cold is None)
    if found is None:
        return None
    assert found.config == cold.config
    assert found.checkpoint == cold.checkpoint
    assert found.pending_writes == cold.pending_writes
    history = await api.get_delta_channel_history(config=found.config, channels=[CHANNEL])
    assert history == await base_walk(api, found.config)
    return found


async def test_other_instance_wrote_many_turns_beyond_the_limit(api: Api) -> None:
    other = api.reopened()
    talk = Conversation(api, other)
    for _ in range(FREQUENCY + 2):
        await talk.turn(0)
    for _ in range(3 * FREQUENCY + 1):
        await talk.turn(1)
    await load_checked(api, thread("t"))
    await talk.check_state(0)
    await talk.turn(0)
    await talk.check_state(0)


async def same_state(api: Api, config: Any, frequency: int = FREQUENCY) -> None:
    """The graph state at ``config`` on ``api`` equals a cold instance's."""
    cold = api.reopened()
    state = await api.state(chat_graph(api.saver, DELTA, frequency), config)
    expected = await cold.state(chat_graph(cold.saver, DELTA, frequency), config)
    assert state.config == expected.config
    assert message_summary(state.values["messages"]) == message_summary(expected.values["messages"])


async def run(api: Api, graph: Any, turn: int, config: Any) -> Any:
    return await api.invoke(graph, {"messages": [human_message(turn)]}, config)


async def test_other_instance_forked_from_an_old_checkpoint(api: Api) -> None:
    other = api.reopened()
    mine, theirs = (
        chat_graph(api.saver, DELTA, FREQUENCY),
        chat_graph(other.saver, DELTA, FREQUENCY),
    )
    for n in range(2 * FREQUENCY + 1):
        await run(api, mine, n, thread("t"))
    await load_checked(api, thread("t"))
    history = await api.history(mine, thread("t"))
    old = history[len(history) // 2 + 1].config
    # Another instance time-travels to an old checkpoint and continues a branch from it.
    forked = await other.update(theirs, old, {"messages": [human_message(100)]})
    for n in range(3):
        await run(other, theirs, 200 + n, forked if n == 0 else thread("t"))
    await load_checked(api, thread("t"))
    await same_state(api, thread("t"))
    # And the branch this instance wrote, by id.
    await load_checked(api, history[0].config)
    await same_state(api, history[0].config)


async def test_time_travel_by_id_on_both_branches(api: Api) -> None:
    graph = chat_graph(api.saver, DELTA, FREQUENCY)
    for n in range(2 * FREQUENCY + 1):
        await run(api, graph, n, thread("t"))
    history = await api.history(graph, thread("t"))
    for snap in history:
        await load_checked(api, snap.config)
    old = history[len(history) // 2].config
    forked = await api.update(graph, old, {"messages": [human_message(100)]})
    await run(api, graph, 101, forked)
    for snap in await api.history(graph, thread("t")):
        await load_checked(api, snap.config)
        await same_state(api, snap.config)


def mixed_graph(saver: Any, frequency: int = FREQUENCY, big: int = 0) -> Any:
    """A DeltaChannel ``messages`` and a plain list channel ``log`` (stored as list deltas)
    written by the same node; ``big`` bytes more in each log entry."""
    channel = DeltaChannel(_messages_delta_reducer, snapshot_frequency=frequency)
    State = TypedDict("State", {CHANNEL: Annotated[list, channel], "log": Annotated[list, add]})

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {
            "messages": [AIMessage(content=f"ai {n}", id=f"ai-{n}")],
            "log": [f"entry {n} " + "x" * big],
        }

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


async def test_list_deltas_beside_a_delta_channel(api: Api) -> None:
    other = api.reopened()
    mine, theirs = mixed_graph(api.saver), mixed_graph(other.saver)
    reference = mixed_graph(InMemorySaver())
    for n in range(3 * FREQUENCY):
        on, graph = (api, mine) if n % 3 else (other, theirs)
        message = {"messages": [human_message(n)], "log": [f"human {n}"]}
        result = await on.invoke(graph, message, thread("t"))
        expected = reference.invoke(message, thread("t"))
        assert result["log"] == expected["log"]
        assert message_summary(result["messages"]) == message_summary(expected["messages"])
        await load_checked(api, thread("t"))
        state = await api.state(mine, thread("t"))
        assert state.values["log"] == expected["log"]
    for snap in await api.history(mine, thread("t")):
        await load_checked(api, snap.config)


async def replaying_turns(api: Api, graph: Any, turns: int = 2 * FREQUENCY + 1) -> Any:
    """Turns until the latest checkpoint replays the channel; that tuple."""
    for n in range(turns):
        await run(api, graph, n, thread("t"))
        latest = await api.reopened().get_tuple(thread("t"))
        if n > FREQUENCY and CHANNEL not in latest.checkpoint["channel_values"]:
            return latest
    raise AssertionError("no replaying checkpoint")


def with_options(api: Api, **options: Any) -> Api:
    """``api`` reopened with saver ``options``, its own ``reopened`` keeping them."""
    opened = api.reopened(**options)
    plain = opened.reopened
    opened.reopened = lambda db_name=None, **more: plain(db_name, **{**options, **more})  # type: ignore[method-assign]
    return opened


async def test_encrypted_serializer(api: Api) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    enc = with_options(api, serde=serde)
    talk = Conversation(enc)
    for _ in range(2 * FREQUENCY + 1):
        await talk.turn(0)
        await load_checked(enc, thread("t"))
    await talk.check_state(0)


async def test_thread_id_with_the_join_separator(api: Api) -> None:
    from mongo_ckpt.layout import JOIN_SEP

    # Two threads whose join keys collide: "a" in namespace "" and "a<SEP>" ... the
    # separator inside the thread id.
    talks = [Conversation(api, thread_id=f"a{JOIN_SEP}"), Conversation(api, thread_id="a")]
    for _ in range(2 * FREQUENCY + 1):
        for talk in talks:
            await talk.turn(0)
            await load_checked(api, thread(talk.thread_id))
            await talk.check_state(0)


async def test_durability_exit_and_sync(api: Api) -> None:
    graph = chat_graph(api.saver, DELTA, FREQUENCY)
    reference = chat_graph(InMemorySaver(), DELTA, FREQUENCY)
    for n in range(3 * FREQUENCY):
        durability = ("exit", "sync", "async")[n % 3]
        message = {"messages": [human_message(n)]}
        result = await api.invoke(graph, message, thread("t"), durability=durability)
        expected = reference.invoke(message, thread("t"), durability=durability)
        assert message_summary(result["messages"]) == message_summary(expected["messages"])
        await load_checked(api, thread("t"))


async def run_as(api: Api, graph: Any, turn: int, run_id: str) -> Any:
    config = {**thread("t"), "metadata": {"run_id": run_id}}
    return await api.invoke(graph, {"messages": [human_message(turn)]}, config)


async def test_delete_for_runs_of_the_head_on_this_and_another_instance(api: Api) -> None:
    other = api.reopened()
    graph = chat_graph(api.saver, DELTA, FREQUENCY)
    for n in range(2 * FREQUENCY + 1):
        await run_as(api, graph, n, f"run-{n}")
    await load_checked(api, thread("t"))
    # This instance deletes the run that wrote the latest checkpoint: its head is gone.
    await api.delete_for_runs([f"run-{2 * FREQUENCY}"])
    await load_checked(api, thread("t"))
    await same_state(api, thread("t"))
    await run_as(api, graph, 100, "run-100")
    await run_as(api, graph, 101, "run-101")
    # Another instance deletes the latest run: this one still expects its head.
    await other.delete_for_runs(["run-101"])
    await load_checked(api, thread("t"))
    await same_state(api, thread("t"))
    await run_as(api, graph, 102, "run-102")
    await same_state(api, thread("t"))


async def test_copied_threads_share_checkpoint_ids(api: Api) -> None:
    other = api.reopened()
    graph = chat_graph(api.saver, DELTA, FREQUENCY)
    for n in range(2 * FREQUENCY + 1):
        await run(api, graph, n, thread("t"))
    await load_checked(api, thread("t"))
    await api.copy_thread("t", "t2")
    theirs = chat_graph(other.saver, DELTA, FREQUENCY)
    await run(other, theirs, 50, thread("t2"))
    await run(api, graph, 51, thread("t"))
    for config in (thread("t"), thread("t2")):
        await load_checked(api, config)
        await same_state(api, config)
    # The same checkpoint id in both threads, asked by id on this instance.
    ids = [s.config["configurable"]["checkpoint_id"] for s in await api.history(graph, thread("t"))]
    copied = {
        s.config["configurable"]["checkpoint_id"] for s in await api.history(graph, thread("t2"))
    }
    for ident in [i for i in ids if i in copied][:4]:
        for tid in ("t", "t2"):
            config = thread(tid, checkpoint_ns="", checkpoint_id=ident)
            await load_checked(api, config)
            await same_state(api, config)


async def test_subgraph_namespaces_on_two_instances(api: Api) -> None:
    from langchain_core.messages import HumanMessage

    from tests.delta_graphs import Shape, builder

    shape = Shape(snapshot_frequency=2, writers=2, subgraph=True, durability="async")
    other = api.reopened()
    graphs = [api.compile(builder(shape, True)), other.compile(builder(shape, True))]
    apis = [api, other]
    for n in range(4):
        message = HumanMessage(f"input {n}", id=f"in{n}")
        await apis[n % 2].invoke(graphs[n % 2], {CHANNEL: [message]}, thread("t"))
        await load_checked(api, thread("t"))
    for tup in await api.list(thread("t")):
        await load_checked(api, tup.config)
        ns = tup.config["configurable"]["checkpoint_ns"]
        await load_checked(api, thread("t", checkpoint_ns=ns))


async def test_a_seed_and_a_target_value_of_several_parts(api: Api) -> None:
    """A DeltaChannel seed and a list value over ``payload.CHUNK_SIZE`` (stored in parts)."""
    from mongo_ckpt.payload import CHUNK_SIZE

    graph = mixed_graph(api.saver, frequency=3, big=CHUNK_SIZE // 3)
    reference = mixed_graph(InMemorySaver(), frequency=3, big=CHUNK_SIZE // 3)
    for n in range(6):
        message = {"messages": [HumanMessage("h" * (CHUNK_SIZE // 3), id=f"h{n}")], "log": []}
        result = await api.invoke(graph, message, thread("t"))
        expected = reference.invoke(message, thread("t"))
        assert result["log"] == expected["log"]
        assert message_summary(result["messages"]) == message_summary(expected["messages"])
        await load_checked(api, thread("t"))


async def test_generated_threads_played_by_two_instances(api: Api, length: Length) -> None:
    """The generated scenarios of ``tests/delta_graphs.py`` with each step on the other
    instance: every checkpoint, and the latest of every namespace, loads as a cold
    instance and the base class's walk find it, on both instances."""
    from tests.delta_graphs import builder, generate, play

    other = api.reopened()
    apis = [api, other]
    for seed in range(length.times(4)):
        shape, steps = generate(seed)
        graphs = [a.compile(builder(shape, True)) for a in apis]
        thread_id = f"g{seed}"
        for n, step in enumerate(steps):
            await play(apis[n % 2], graphs[n % 2], shape, [step], thread_id)
            for on in apis:
                await load_checked(on, thread(thread_id))
        for on in apis:
            for tup in await on.list(thread(thread_id)):
                await load_checked(on, tup.config)
                ns = tup.config["configurable"]["checkpoint_ns"]
                await load_checked(on, thread(thread_id, checkpoint_ns=ns))
