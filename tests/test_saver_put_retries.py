"""A ``put`` repeated with the same arguments, or on a parent that is not stored, and the
clock a put trusts: the stored value is the truth (a retry names the stored chain of a
list delta and refuses another value), a take-back removes only what its own call
inserted, a parent never stored is accepted, and tombstones and ``created_at`` follow the
server's clock, not the client's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import ConflictingValueError, StaleParentError, documents, maintenance
from mongo_ckpt.clock import aware, server_now
from mongo_ckpt.documents import TOUCHED_AT
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.maintenance import DOOMED, DOOMED_AT
from tests.backends import maybe_await
from tests.retry_support import (
    T,
    Thread,
    checkpoint_at,
    graph_on,
    lost_reply,
    msg,
    three,
)
from tests.saver_support import BOTH_PUT_PATHS, Api, assert_no_orphans
from tests.stepping import Stepper

pytestmark = BOTH_PUT_PATHS

ENCRYPTED = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef" * 2)


RETRIES = ["warm", "other-instance", "restart", "evicted"]


def retrier(api: Api, how: str) -> Api:
    """The saver a retry runs on: the same warm one, another one beside it, a new one
    after a restart, or the same one whose cache no longer holds the thread."""
    if how == "warm":
        return api
    if how == "evicted":
        api.saver.memory.forget(["t"])
        return api
    return api.reopened()


# -- 1. a retried put names the stored value ------------------------------------------


@pytest.mark.parametrize("how", RETRIES)
@pytest.mark.parametrize("lost", [BLOBS, CHECKPOINTS])
async def test_retried_put_of_a_list_delta_reads_back(api: Api, how: str, lost: str) -> None:
    thread = await three(api)
    args = thread.prepare([msg(i) for i in range(4)])
    await lost_reply(api, lost, lambda: api.put(*args))
    again = retrier(api, how)
    await again.put(*args)
    await thread.check(again)
    await thread.put(again, [msg(i) for i in range(5)])  # the next one builds on it
    await thread.check(again)
    await again.prune(["t"], strategy="keep_latest")  # the bases the latest needs stay
    await thread.check(again)
    assert len(await again.list(T)) == 1
    await assert_no_orphans(again)


@pytest.mark.parametrize("how", RETRIES)
async def test_retried_put_with_another_value_is_refused(api: Api, how: str) -> None:
    thread = await three(api)
    first = [HumanMessage("a", id="a"), HumanMessage("b", id="b"), HumanMessage("c", id="c")]
    config, checkpoint, metadata, new = thread.prepare(first)
    await lost_reply(api, BLOBS, lambda: api.put(config, checkpoint, metadata, new))
    again = retrier(api, how)
    before = await api.thread_docs("t")
    other = [first[0], HumanMessage("X", id="X"), HumanMessage("Y", id="Y")]
    changed = {
        **checkpoint,
        "channel_values": {**checkpoint["channel_values"], "messages": other, "side": ["s"]},
        "channel_versions": {**checkpoint["channel_versions"], "side": "00000009"},
    }
    with pytest.raises(ConflictingValueError) as raised:
        await again.put(config, changed, metadata, {**new, "side": "00000009"})
    error = raised.value
    assert (error.thread_id, error.checkpoint_ns, error.channel) == ("t", "", "messages")
    assert error.version == new["messages"] and "names one value" in str(error)
    assert isinstance(error, ValueError)
    # Nothing readable changed: no checkpoint; the one value this call inserted is marked.
    after = await api.thread_docs("t")
    assert after[CHECKPOINTS] == before[CHECKPOINTS]
    # By ``_id``: the value write refreshes ``touched_at`` of the heads it found stored.
    inserted = [d for d in after[BLOBS] if d["_id"] not in {b["_id"] for b in before[BLOBS]}]
    assert [(d["channel"], d.get(DOOMED)) for d in inserted] == [("side", True)]
    await thread.check(again)
    # The put with its first value completes; the next one reads back unstitched.
    await again.put(config, checkpoint, metadata, new)
    await thread.put(again, [*first, HumanMessage("Z", id="Z")])
    await thread.check(again)
    await again.prune(["t"], strategy="keep_latest")
    await thread.check(again)
    await assert_no_orphans(again)


async def test_retried_put_with_a_tuple_of_the_stored_list_is_the_same_value(api: Api) -> None:
    thread = await three(api)
    args = thread.prepare([msg(i) for i in range(4)])
    await lost_reply(api, BLOBS, lambda: api.put(*args))
    config, checkpoint, metadata, new = args
    values = {
        **checkpoint["channel_values"],
        "messages": tuple(checkpoint["channel_values"]["messages"]),
    }
    await api.reopened().put(config, {**checkpoint, "channel_values": values}, metadata, new)
    await thread.check(api)


async def test_graph_turn_retried_after_a_lost_reply(api: Api) -> None:
    """A graph turn whose last checkpoint write lost its reply, run again on a restarted
    saver at the same checkpoint: every state of the thread reads back whole."""
    graph = graph_on(api)
    config = {"configurable": {"thread_id": "g"}}
    for turn in range(3):
        await api.invoke(graph, {"messages": [HumanMessage(f"h{turn}", id=f"h{turn}")]}, config)
    history = [s.values for s in await api.history(graph, config)]
    latest = await api.get_tuple(config)
    restarted = api.reopened()
    # The same put as the graph's last one, repeated by a saver that never saw the thread.
    parent = latest.parent_config
    new = dict(latest.checkpoint["channel_versions"])
    await restarted.put(parent, latest.checkpoint, latest.metadata, new)
    again = graph_on(restarted)
    assert [s.values for s in await restarted.history(again, config)] == history
    await restarted.invoke(again, {"messages": [HumanMessage("h3", id="h3")]}, config)
    state = await restarted.state(again, config)
    assert len(state.values["messages"]) == 8


# -- 2. a take-back removes only what its call inserted ---------------------------------


@pytest.mark.parametrize("how", RETRIES)
async def test_retry_after_prune_keeps_the_checkpoint_it_retries(api: Api, how: str) -> None:
    thread = await three(api)
    args = thread.prepare([msg(i) for i in range(4)])
    await lost_reply(api, CHECKPOINTS, lambda: api.put(*args))
    await api.prune(["t"], strategy="keep_latest")  # keeps c4, deletes its parent c3
    again = retrier(api, how)
    stored = await again.put(*args)
    assert stored["configurable"]["checkpoint_id"] == thread.checkpoint_id
    assert [i.config["configurable"]["checkpoint_id"] for i in await again.list(T)] == [
        thread.checkpoint_id
    ]
    await thread.check(again)
    assert await again.count(BLOBS, {DOOMED: {"$exists": True}}) == 0
    await assert_no_orphans(again)


async def test_refused_retry_takes_back_only_what_it_inserted(api: Api) -> None:
    """The first attempt stored its checkpoint (its reply lost), then maintenance tombstoned
    the parent: the refused retry deletes and marks nothing the first attempt stored."""
    thread = await three(api)
    args = thread.prepare([msg(i) for i in range(4)], side=["s"])
    await lost_reply(api, CHECKPOINTS, lambda: api.put(*args))
    await tombstone_parent(api, thread, timedelta(0), parent=2)
    before = await api.thread_docs("t")
    with pytest.raises(StaleParentError):
        await api.put(*args)
    after = await api.thread_docs("t")
    # The same value documents: the retry's value write only refreshes their ``touched_at``.
    untouched = [
        [{k: v for k, v in d.items() if k != TOUCHED_AT} for d in docs[BLOBS]]
        for docs in (before, after)
    ]
    assert untouched[0] == untouched[1]
    unstamped = [
        [{k: v for k, v in d.items() if k != "created_at"} for d in docs[CHECKPOINTS]]
        for docs in (before, after)
    ]
    assert unstamped[0] == unstamped[1]  # the checkpoint stays, as the first attempt stored it
    assert await api.count(BLOBS, {DOOMED: {"$exists": True}}) == 0


# -- 3. a parent never stored is accepted ------------------------------------------------


async def test_put_on_a_parent_never_stored_is_stored(api: Api) -> None:
    config = {"configurable": {**T["configurable"], "checkpoint_id": "1ef999"}}
    values = {"messages": [msg(0)], "other": "x"}
    versions = {"messages": "00000001", "other": "00000001"}
    stored = await api.put(config, checkpoint_at(1, values, versions), {"step": 1}, versions)
    got = await api.get_tuple(stored)
    assert got.checkpoint["channel_values"] == values
    assert got.parent_config["configurable"]["checkpoint_id"] == "1ef999"
    await assert_no_orphans(api)


async def test_put_on_a_parent_never_stored_naming_a_missing_value_is_refused(
    api: Api,
) -> None:
    config = {"configurable": {**T["configurable"], "checkpoint_id": "1ef999"}}
    values = {"messages": [msg(0)], "other": "x"}
    versions = {"messages": "00000001", "other": "00000001"}
    with pytest.raises(StaleParentError):
        await api.put(config, checkpoint_at(1, values, versions), {}, {"other": "00000001"})
    assert await api.get_tuple(T) is None
    assert await api.count(BLOBS, {DOOMED: {"$exists": False}}) == 0


async def test_copy_of_a_thread_in_list_order_newest_first(api: Api) -> None:
    """A thread copied from ``InMemorySaver`` in ``list()`` order (each checkpoint stored
    before its parent) reads back as the source does."""
    memory = InMemorySaver()
    source = graph_on(Api(memory))
    config = {"configurable": {"thread_id": "c"}}
    for turn in range(3):
        source.invoke({"messages": [HumanMessage(f"h{turn}", id=f"h{turn}")]}, config)
    items = list(memory.list(config))
    for item in items:  # newest first: every parent is put after its child
        parent = item.parent_config or {
            "configurable": {**config["configurable"], "checkpoint_ns": ""}
        }
        versions = item.checkpoint["channel_versions"]
        new = {ch: versions[ch] for ch in item.checkpoint["channel_values"] if ch in versions}
        await api.put(parent, item.checkpoint, item.metadata, new)
    expected = [s.values for s in source.get_state_history(config)]
    assert [s.values for s in await api.history(graph_on(api), config)] == expected


async def test_update_state_at_a_checkpoint_not_in_the_thread(api: Api) -> None:
    graph = graph_on(api)
    config = {"configurable": {"thread_id": "u", "checkpoint_ns": "", "checkpoint_id": "1ef0"}}
    stored = await api.update(graph, config, {"messages": [HumanMessage("hi", id="hi")]})
    state = await api.state(graph, stored)
    assert [m.content for m in state.values["messages"]] == ["hi"]


# -- 4. the server's clock decides ---------------------------------------------------------


@pytest.fixture(params=[-timedelta(hours=2), timedelta(minutes=11)], ids=["behind", "ahead"])
def skew(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[timedelta]:
    """The client's clock ``skew`` off, as the saver's own code reads it."""
    offset: timedelta = request.param

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return datetime.now(tz) + offset

    monkeypatch.setattr(documents, "datetime", Skewed, raising=False)
    yield offset


async def tombstone_parent(api: Api, thread: Thread, age: timedelta, parent: int = 1) -> None:
    """Tombstone the thread's ``parent``-th latest checkpoint as maintenance does, ``age``
    old on the server's clock."""
    now = await api.run(server_now())
    config = thread.configs[-parent]["configurable"]
    parent = {**T["configurable"], "checkpoint_id": config["checkpoint_id"]}
    update = {"$set": {DOOMED: ObjectId(), DOOMED_AT: now - age}}
    await maybe_await(api.raw(CHECKPOINTS).update_one(parent, update))


async def test_live_tombstone_refuses_whatever_the_client_clock(api: Api, skew: timedelta) -> None:
    thread = await three(api)
    await tombstone_parent(api, thread, timedelta(0))
    with pytest.raises(StaleParentError):
        await thread.put(api, [msg(i) for i in range(4)])
    assert len(await api.list(T)) == 3


async def test_expired_tombstone_counts_as_none_whatever_the_client_clock(
    api: Api, skew: timedelta
) -> None:
    thread = await three(api)
    await tombstone_parent(api, thread, timedelta(minutes=11))
    await thread.put(api, [msg(i) for i in range(4)])
    await thread.check(api)
    assert len(await api.list(T)) == 4


async def test_created_at_is_the_servers_time(api: Api, skew: timedelta) -> None:
    thread = await three(api)
    server = await api.run(server_now())
    for doc in await api.docs(CHECKPOINTS, {"thread_id": "t"}):
        assert abs(aware(doc["created_at"]) - server) < timedelta(minutes=1), skew
    assert thread.checkpoint_id


async def test_a_version_other_checkpoints_name_keeps_its_first_value(api: Api) -> None:
    """A put naming as new a version that earlier checkpoints name (the conformance suite's
    threads do) is stored, sharing the thread's first value of that version."""
    configs = [T]
    for step in range(3):
        checkpoint = checkpoint_at(step + 1, {"step": step}, {"step": 1})
        configs.append(await api.put(configs[-1], checkpoint, {"step": step}, {"step": 1}))
    for config in configs[1:]:
        assert (await api.get_tuple(config)).checkpoint["channel_values"] == {"step": 0}
    await assert_no_orphans(api)


async def test_put_between_delete_threads_calls_is_refused(api: Api) -> None:
    """``delete_thread`` deletes the checkpoints, then the values: a put landing in
    between finds its parent absent and values no stored checkpoint names, and is refused
    (never stored naming values about to go)."""
    thread = await three(api)
    deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, "t"))
    while await api.count(CHECKPOINTS, {"thread_id": "t"}):
        await deleting.step()  # until the checkpoints are gone, their values not yet
    with pytest.raises(StaleParentError):
        await thread.put(api, [msg(i) for i in range(4)])
    await deleting.finish()
    assert deleting.raised is None
    assert await api.get_tuple(T) is None
    assert await api.count(BLOBS, {DOOMED: {"$exists": False}}) == 0


@pytest.mark.parametrize("same", [True, False], ids=["same-value", "other-value"])
async def test_encrypted_retry_compares_plain_values(api: Api, same: bool) -> None:
    """With ``EncryptedSerializer`` each attempt's stored bytes differ: a retry is judged
    by the values, so the same value is accepted and another one refused."""
    secret = api.reopened(serde=ENCRYPTED)
    thread = await three(secret)
    config, checkpoint, metadata, new = thread.prepare([msg(i) for i in range(4)])
    await lost_reply(secret, BLOBS, lambda: secret.put(config, checkpoint, metadata, new))
    restarted = api.reopened(serde=ENCRYPTED)
    if same:
        await restarted.put(config, checkpoint, metadata, new)
    else:
        values = {**checkpoint["channel_values"], "messages": [msg(0), msg(9)]}
        with pytest.raises(ConflictingValueError):
            await restarted.put(config, {**checkpoint, "channel_values": values}, metadata, new)
        del thread.expected[checkpoint["id"]]
    await thread.check(restarted)
