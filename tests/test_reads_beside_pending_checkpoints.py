"""Reads of the newest checkpoint beside pending ones (``reading.newest_stages``): a thread of
only pending checkpoints, a pending newest one, ``pending`` false or missing, and the
DeltaChannel state and history around a pending checkpoint."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_config,
)

from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import maybe_await
from tests.delta_graphs import Shape, builder, message_summary
from tests.graphs import thread
from tests.saver_support import Api, assert_no_orphans, put_chain

# -- 5. newest_stages: pending checkpoints, ids, namespaces (every backend) ---------------


async def set_pending(api: Api, config: Any) -> None:
    key = {k: config["configurable"][k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$set": {"pending": True}}))


async def test_a_thread_of_only_pending_checkpoints_reads_as_empty(api: Api) -> None:
    [only] = await put_chain(api, "t", 1)
    await set_pending(api, only)
    assert await api.get_tuple(generate_config("t")) is None
    assert await api.get_tuple(only) is None
    assert await api.list(generate_config("t")) == []


async def test_a_pending_newest_checkpoint_gives_the_one_before(api: Api) -> None:
    configs = await put_chain(api, "t", 3)
    sub = await put_chain(api, "t", 2, ns="sub")
    await set_pending(api, configs[-1])
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None and latest.config["configurable"] == configs[1]["configurable"]
    assert await api.get_tuple(configs[-1]) is None
    named = await api.get_tuple(configs[0])
    assert named is not None and named.checkpoint["channel_values"]["a"] == "t//a0"
    in_sub = await api.get_tuple(generate_config("t", checkpoint_ns="sub"))
    assert in_sub is not None and in_sub.config["configurable"] == sub[-1]["configurable"]
    await set_pending(api, sub[-1])
    await set_pending(api, sub[0])
    assert await api.get_tuple(generate_config("t", checkpoint_ns="sub")) is None
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None and latest.config["configurable"] == configs[1]["configurable"]
    other = await api.get_tuple(generate_config("u"))
    assert other is None


async def test_pending_false_and_missing_both_count_as_visible(api: Api) -> None:
    configs = await put_chain(api, "t", 2)
    key = {
        k: configs[-1]["configurable"][k] for k in ("thread_id", "checkpoint_ns", "checkpoint_id")
    }
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$set": {"pending": False}}))
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None and latest.config["configurable"] == configs[-1]["configurable"]
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$set": {"pending": None}}))
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None and latest.config["configurable"] == configs[-1]["configurable"]
    await assert_no_orphans(api)


# -- 6. DeltaChannel history and graphs around a pending checkpoint and a refusal ----------

DELTA_SHAPE = Shape(snapshot_frequency=3, writers=2, subgraph=False, durability="sync")


async def test_delta_state_with_a_pending_newest_checkpoint_is_the_one_before(api: Api) -> None:
    """The newest checkpoint pending: get_tuple and the DeltaChannel history of the latest
    are those of the checkpoint before, for the saver that wrote it (its memory expects
    the pending one) and a cold one."""
    graph = api.compile(builder(DELTA_SHAPE, delta=True))
    for n in range(4):
        message = HumanMessage(f"in{n}", id=f"in{n}")
        await api.invoke(graph, {"messages": [message]}, thread("t"))
    history = await api.history(graph, thread("t"))
    await set_pending(api, history[0].config)
    before = history[1].config
    summaries = []
    for reader in (api, api.reopened()):  # warm (it wrote the pending one), cold
        latest, named = await reader.get_tuple(thread("t")), await reader.get_tuple(before)
        assert latest is not None and named is not None
        assert latest.config["configurable"] == before["configurable"]
        assert (latest.checkpoint, latest.pending_writes) == (
            named.checkpoint,
            named.pending_writes,
        )
        at_latest = await reader.get_delta_channel_history(
            config=thread("t"), channels=["messages"]
        )
        at_id = await reader.get_delta_channel_history(config=before, channels=["messages"])
        assert at_latest == at_id
        g = reader.compile(builder(DELTA_SHAPE, delta=True))
        state = await reader.state(g, thread("t"))
        assert state.config["configurable"] == before["configurable"]
        summaries.append(message_summary(state.values["messages"]))
        by_id = await reader.state(g, before)
        assert message_summary(by_id.values["messages"]) == message_summary(
            history[1].values["messages"]
        )
    assert summaries[0] == summaries[1]
    # The run goes on from the checkpoint before the pending one.
    await api.invoke(graph, {"messages": [HumanMessage("again", id="again")]}, thread("t"))
    state = await api.state(graph, thread("t"))
    assert [m[1] for m in message_summary(state.values["messages"])][-1].startswith("w")


async def test_delta_history_at_a_pending_checkpoint_id(api: Api) -> None:
    graph = api.compile(builder(DELTA_SHAPE, delta=True))
    for n in range(3):
        await api.invoke(graph, {"messages": [HumanMessage(f"in{n}", id=f"in{n}")]}, thread("t"))
    history = await api.history(graph, thread("t"))
    await set_pending(api, history[0].config)
    cold = api.reopened()
    assert await cold.get_tuple(history[0].config) is None
    state = await cold.state(cold.compile(builder(DELTA_SHAPE, delta=True)), history[0].config)
    assert state.values == {} and state.next == ()
