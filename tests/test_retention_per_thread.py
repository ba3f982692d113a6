"""A thread's own ttl: set by ``set_thread_ttl`` or by ``configurable["thread_ttl"]`` on its
puts, kept in the threads collection, it decides the thread's expiry instead of the
saver's ``ttl`` (``"never"``: never; ``"default"``: the saver's again). It goes with the
thread, is copied with it, and a bad one is refused before anything is written. With
``refresh_on_read``, a read of the thread counts as its activity.

Checkpoints are aged by rewriting their ``created_at`` (``Api.age``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo import DeleteMany
from pymongo.errors import AutoReconnect

from mongo_ckpt import MongoDBSaver, maintenance, thread_settings
from mongo_ckpt.calls import Call, NextBatch
from mongo_ckpt.clock import server_now
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, THREADS
from tests.backends import count_calls, maybe_await
from tests.delta_graphs import Shape, builder, documents
from tests.faults import Fault, Faults
from tests.graphs import thread
from tests.saver_support import Api
from tests.stepping import drive

TTL = 3600.0
SMALL = Shape(snapshot_frequency=3, writers=1, subgraph=False, durability="async")


async def put_one(api: Api, thread_id: str, **configurable: Any) -> None:
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    config = generate_config(thread_id)
    config["configurable"].update(configurable)
    await api.put(config, checkpoint, generate_metadata(), {"a": "1"})


async def own_ttls(api: Api) -> dict[str, Any]:
    docs = await api.docs(THREADS)
    own = [d for d in docs if "ttl" in d or d.get("never")]
    return {d["thread_id"]: "never" if d.get("never") else d["ttl"] for d in own}


def deletes_settings(step: Call | NextBatch) -> bool:
    """Whether ``step`` is a deleting call's delete of thread settings."""
    return (
        isinstance(step, Call)
        and (step.collection, step.method) == (THREADS, "bulk_write")
        and any(isinstance(request, DeleteMany) for request in step.args[0])
    )


async def threads(api: Api) -> set[str]:
    return {d["thread_id"] for d in await api.docs(CHECKPOINTS)}


async def test_a_threads_own_ttl_decides_its_expiry(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=10 * TTL)
    ages = {"default": 2, "never": 2, "longer": 2, "shorter": 0.75, "reset": 2, "young": 0.75}
    for thread_id in ages:
        await put_one(api, thread_id)
    assert await api.join_sweep(timeout=60)  # the first put's sweep, before the ageing
    for thread_id, age in ages.items():
        await api.age(thread_id, age * TTL)
    await api.set_thread_ttl("never", "never")
    await api.set_thread_ttl("longer", 10 * TTL)
    await api.set_thread_ttl("shorter", TTL / 2)
    await api.set_thread_ttl("reset", "never")
    await api.set_thread_ttl("reset", "default")

    assert await api.sweep_expired() == ["default", "reset", "shorter"]

    assert await threads(api) == {"never", "longer", "young"}
    assert await own_ttls(api) == {"never": "never", "longer": 10 * TTL}  # gone with theirs
    assert await api.sweep_expired() == []


async def test_without_a_saver_ttl_only_threads_with_their_own_expire(api: Api) -> None:
    for thread_id in ("idle", "own"):
        await put_one(api, thread_id)
        await api.age(thread_id, 2 * TTL)
    await api.set_thread_ttl("own", TTL)
    assert await api.sweep_expired() == ["own"]
    assert await threads(api) == {"idle"}


async def test_a_run_sets_it_from_configurable_once_per_value(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=10 * TTL)
    graph = api.compile(builder(SMALL, delta=True))
    message = {"messages": [HumanMessage("hi", id="in0")]}
    await api.invoke(graph, message, thread("kept", thread_ttl="never"))
    calls = count_calls(api.saver.collections)
    for number in (1, 2):  # later runs without it, and with it again: no write of it
        message = {"messages": [HumanMessage("again", id=f"in{number}")]}
        config = thread("kept", thread_ttl="never") if number == 2 else thread("kept")
        await api.invoke(graph, message, config)
    assert calls[(THREADS, "update_one")] == 0
    await api.invoke(graph, message, thread("other", thread_ttl=TTL / 2))
    assert await own_ttls(api) == {"kept": "never", "other": TTL / 2}
    for thread_id in ("kept", "other"):
        await api.age(thread_id, 2 * TTL)

    assert await api.sweep_expired() == ["other"]
    state = await api.state(graph, thread("kept"))
    assert [m.id for m in state.values["messages"]][:1] == ["in0"]


async def test_it_goes_and_is_copied_with_its_thread(api: Api) -> None:
    await put_one(api, "source")
    await api.set_thread_ttl("source", "never")
    await api.copy_thread("source", "copy")
    assert await own_ttls(api) == {"source": "never", "copy": "never"}
    await api.delete_thread("source")
    assert await own_ttls(api) == {"copy": "never"}


async def test_keep_latest_prunes_by_the_threads_own_ttl(api: Api) -> None:
    api = api.reopened(ttl=10 * TTL, sweep_interval=10 * TTL, ttl_strategy="keep_latest")
    config = generate_config("t")
    for step in range(1, 4):
        checkpoint = generate_checkpoint(channel_values={"a": step}, channel_versions={"a": step})
        config = await api.put(config, checkpoint, generate_metadata(), {"a": step})
    assert await api.join_sweep(timeout=60)
    await api.set_thread_ttl("t", TTL)
    await api.age("t", 2 * TTL)
    assert await api.sweep_expired() == ["t"]
    [latest] = await api.list(generate_config("t"))
    assert latest.checkpoint["channel_values"] == {"a": 3}
    assert await own_ttls(api) == {"t": TTL}  # the thread stays, with its setting


BAD = [0, -1, float("inf"), float("nan"), True, "forever", None, 101 * 365 * 24 * 3600]


@pytest.mark.parametrize("ttl", BAD, ids=repr)
async def test_a_bad_ttl_is_refused_and_nothing_written(api: Api, ttl: Any) -> None:
    await put_one(api, "t")
    await api.set_thread_ttl("t", 60)
    before = await api.counts(), await own_ttls(api)
    with pytest.raises(ValueError, match="a thread's ttl is a number of seconds"):
        await api.set_thread_ttl("t", ttl)
    if ttl is not None:  # in configurable, None is no setting
        with pytest.raises(ValueError, match="a thread's ttl is a number of seconds"):
            await put_one(api, "u", thread_ttl=ttl)
    assert (await api.counts(), await own_ttls(api)) == before


@pytest.mark.parametrize("mode", ["before", "after"])
@pytest.mark.parametrize("again", ["never", 60.0])
async def test_a_lost_setting_write_and_the_call_again(api: Api, mode: str, again: Any) -> None:
    """The write is lost before it is sent, or its reply after it applied; the call again,
    with the same value or another, leaves the one it sets."""
    await put_one(api, "t")
    faults = Faults(api.saver.collections)
    try:
        faults.arm(Fault(0, mode))
        with pytest.raises(AutoReconnect):
            await api.set_thread_ttl("t", 60.0)
        assert faults.fired
        assert await own_ttls(api) == ({} if mode == "before" else {"t": 60.0})
        faults.arm(None)
        await api.set_thread_ttl("t", again)
    finally:
        faults.restore()
    assert await own_ttls(api) == {"t": again}


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
async def test_idle_deletion_spares_a_thread_kept_since_its_selection(
    api: Api, strategy: str
) -> None:
    """Threads chosen idle earlier (``delete --idle-days`` after its prompt, or a batch of
    the sweep) are judged again by their own ttl and last read, as stored when their
    batch starts."""
    reading = api.reopened(refresh_on_read=True)
    chosen = ["kept", "plain", "read"]
    for thread_id in chosen:
        for _ in range(2):
            await put_one(api, thread_id)
        await api.age(thread_id, 2 * TTL)
    cutoff = await api.run(server_now())  # all idle since before it
    await api.set_thread_ttl("kept", "never")
    assert await reading.get_tuple(generate_config("read")) is not None
    before = {t: await documents(api.saver, t) for t in ("kept", "read")}

    deleted = await api.run(api.saver.ops.delete_idle(chosen, cutoff, strategy))

    assert deleted.threads == ["plain"]
    assert {t: await documents(api.saver, t) for t in ("kept", "read")} == before


async def test_reads_refresh_a_threads_activity_when_asked(api: Api) -> None:
    reading = api.reopened(ttl=TTL, sweep_interval=10 * TTL, refresh_on_read=True)
    for thread_id in ("read", "unread"):
        await put_one(reading, thread_id)
    assert await reading.join_sweep(timeout=60)
    for thread_id in ("read", "unread"):
        await reading.age(thread_id, 2 * TTL)
    calls = count_calls(api.saver.collections)
    assert await api.get_tuple(generate_config("unread")) is not None
    assert not [call for call in calls if call[0] == THREADS]  # off by default: no write
    calls = count_calls(reading.saver.collections)
    for _ in range(3):
        assert await reading.get_tuple(generate_config("read")) is not None
    assert calls[(THREADS, "update_one")] == 1  # once a minute per thread and instance

    assert await reading.sweep_expired() == ["unread"]
    assert await threads(reading) == {"read"}


async def test_the_sweep_leaves_a_thread_read_since_untouched(api: Api) -> None:
    """The sweep judges a thread by its last read before its tombstones: a put continuing
    a thread read since (its checkpoints idle) is never refused by them."""
    reading = api.reopened(refresh_on_read=True)
    for thread_id in ("read", "unread"):
        await put_one(reading, thread_id)
        await reading.age(thread_id, 2 * TTL)
    latest = await reading.get_tuple(generate_config("read"))
    assert latest is not None
    seen: list[str] = []

    async def put_after_the_tombstones(step: Call | NextBatch) -> None:
        if isinstance(step, Call) and step.collection == CHECKPOINTS:
            if seen[-1:] == ["update_many"] and step.method == "find" and "put" not in seen:
                values, versions = {"a": "y"}, {"a": "2"}
                checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
                await reading.put(latest.config, checkpoint, generate_metadata(), versions)
                seen.append("put")
            seen.append(step.method)

    sweep = maintenance.sweep_expired(reading.saver.memory.forget, TTL)
    assert await drive(reading, sweep, put_after_the_tombstones) == ["unread"]
    assert "put" in seen and len(await reading.list(generate_config("read"))) == 2


@pytest.mark.parametrize("mode", ["before", "after"])
async def test_a_lost_read_record_and_the_read_again(api: Api, mode: str) -> None:
    """The read's record of activity is lost: the read fails, and the read again records
    it (the instance does not take the lost one as recorded)."""
    reading = api.reopened(refresh_on_read=True)
    await put_one(reading, "t")
    faults = Faults(reading.saver.collections)
    try:
        faults.arm(Fault(1, mode))  # the tuple's read, then the record
        with pytest.raises(AutoReconnect):
            await reading.get_tuple(generate_config("t"))
        assert faults.calls[1][:2] == (THREADS, "update_one")
        faults.arm(None)
        assert await reading.get_tuple(generate_config("t")) is not None
        assert faults.calls[-1][:2] == (THREADS, "update_one")
    finally:
        faults.restore()
    [doc] = await api.docs(THREADS)
    assert doc["thread_id"] == "t" and "active_at" in doc


@pytest.mark.parametrize("deleting", ["sweep", "delete_thread"])
async def test_a_new_conversation_during_a_deletion_keeps_its_setting(
    api: Api, deleting: str
) -> None:
    """The thread's old checkpoints go; a new conversation on its id stores its first
    checkpoint with ``thread_ttl="never"`` before the deleting call removes the settings it
    read: that setting, written since, stays, and keeps the new conversation forever."""
    api = api.reopened(ttl=TTL, sweep_interval=10 * TTL)
    await put_one(api, "t")
    assert await api.join_sweep(timeout=60)
    await api.set_thread_ttl("t", TTL / 2)
    await api.age("t", 2 * TTL)
    started: list[bool] = []

    async def new_conversation(step: Call | NextBatch) -> None:
        if deletes_settings(step) and not started:
            started.append(True)
            assert await api.get_tuple(generate_config("t")) is None
            await put_one(api, "t", thread_ttl="never")

    forget = api.saver.memory.forget
    deleting_call = (
        maintenance.sweep_expired(forget, TTL)
        if deleting == "sweep"
        else maintenance.delete_thread(forget, "t")
    )
    await drive(api, deleting_call, new_conversation)
    assert started and await own_ttls(api) == {"t": "never"}
    await api.age("t", 2 * TTL)
    assert await api.sweep_expired() == []
    assert len(await api.list(generate_config("t"))) == 1


async def test_a_copy_follows_its_sources_ttl(api: Api) -> None:
    api = api.reopened(ttl=TTL, sweep_interval=10 * TTL)
    await put_one(api, "source")
    await api.set_thread_ttl("target", 1)  # left over on the target id
    await api.copy_thread("source", "target")
    assert await own_ttls(api) == {}
    await api.set_thread_ttl("source", 60)
    await api.delete_thread("target")
    await api.copy_thread("source", "target")
    assert await own_ttls(api) == {"source": 60, "target": 60}


def test_numbers_of_any_real_type_are_seconds() -> None:
    assert thread_settings.check_ttl(numpy.int64(60)) == 60.0
    assert thread_settings.check_ttl(numpy.float32(1.5)) == 1.5
    with pytest.raises(ValueError, match="a thread's ttl"):
        thread_settings.check_ttl(numpy.bool_(True))


@pytest.mark.parametrize("ttl", [True, numpy.bool_(True), "60"], ids=repr)
def test_the_savers_ttl_is_a_number(client: Any, ttl: Any) -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number of seconds"):
        MongoDBSaver(client, "unused", ttl=ttl)


async def test_a_short_own_ttl_makes_reads_count_sooner(api: Api) -> None:
    """A read records activity at most once per tenth of the thread's own ttl (when this
    instance stored it): reads every 0.3 s keep a thread with a ttl of 2 s."""
    reading = api.reopened(ttl=TTL, sweep_interval=10 * TTL, refresh_on_read=True)
    await put_one(reading, "t")
    assert await reading.join_sweep(timeout=60)
    await reading.set_thread_ttl("t", 2)
    await reading.age("t", 2 * TTL)
    for _ in range(8):
        assert await reading.get_tuple(generate_config("t")) is not None
        await asyncio.sleep(0.3)
    assert await reading.sweep_expired() == []


async def test_no_command_of_the_sweep_names_more_threads_than_a_batch(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leftovers of cut calls in many threads (values marked, checkpoints gone) are read
    and deleted a batch of threads at a time too."""
    monkeypatch.setattr(maintenance, "SWEEP_BATCH", 2)
    for i in range(6):
        await put_one(api, f"t{i}")
    await maybe_await(api.raw(BLOBS).update_many({}, {"$set": {maintenance.DOOMED: True}}))
    await maybe_await(api.raw(CHECKPOINTS).delete_many({}))
    widest: list[int] = []

    def named(value: Any) -> int:
        if isinstance(value, dict):
            found = value.get("thread_id")
            own = len(found["$in"]) if isinstance(found, dict) and "$in" in found else 0
            return max([own, *(named(v) for v in value.values())])
        if isinstance(value, (list, tuple)):
            return max([0, *(named(v) for v in value)])
        return 0

    async def count(step: Call | NextBatch) -> None:
        if isinstance(step, Call):
            widest.append(max(named(list(step.args)), named(dict(step.kwargs))))

    await drive(api, maintenance.sweep_expired(api.saver.memory.forget, TTL, batch=2), count)
    assert await api.count(BLOBS) == 0 and max(widest) == 2


async def test_a_read_during_a_deletion_does_not_pass_the_ttl_on(api: Api) -> None:
    """A read of the thread records its activity while ``delete_thread`` deletes it: the
    settings it read still go, and a new conversation on the id follows the saver's ttl."""
    await put_one(api, "t")
    await api.set_thread_ttl("t", "never")
    touched: list[bool] = []

    async def read_meanwhile(step: Call | NextBatch) -> None:
        if deletes_settings(step) and not touched:
            touched.append(True)
            await api.run(thread_settings.touch("t"))

    await drive(api, maintenance.delete_thread(api.saver.memory.forget, "t"), read_meanwhile)
    await put_one(api, "t")
    assert touched and await own_ttls(api) == {}


def test_a_huge_number_is_refused_as_a_ttl() -> None:
    with pytest.raises(ValueError, match="a thread's ttl"):
        thread_settings.check_ttl(10**400)
