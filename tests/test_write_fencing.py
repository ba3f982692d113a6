"""Write fencing: a run whose ``configurable`` holds ``thread_owner`` writes only while
that owner holds the thread's lease. Another owner takes a running lease only with
``take_over``; the writer it was taken from then raises ``ThreadLeaseLost`` at its next
put or put_writes having written nothing, and stays fenced after the new owner releases.
A fenced put costs no extra command where the server has the client-level bulk write."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.types import Command
from pymongo.errors import AutoReconnect

from mongo_ckpt import MongoDBSaver, ThreadLeaseHeld, ThreadLeaseLost
from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import CHECKPOINTS, THREADS, WRITES
from tests.backends import count_calls, maybe_await, sync_client, uri_for
from tests.clock_skew import skewed_client_clock
from tests.faults import Fault, Faults, Interleave
from tests.graphs import chat_builder, thread
from tests.saver_support import Api, put_chain, put_write_calls
from tests.subgraph_support import parent_builder

REPO = Path(__file__).resolve().parents[1]


def owned(thread_id: str, owner: str) -> Any:
    return thread(thread_id, thread_owner=owner)


async def say(api: Api, graph: Any, owner: str, text: str) -> Any:
    return await api.invoke(graph, {"messages": [HumanMessage(text)]}, owned("t", owner))


async def test_a_writer_whose_lease_was_taken_over_writes_nothing(api: Api) -> None:
    graph = api.compile(chat_builder())
    first = await api.lease_thread("t")
    await say(api, graph, first, "one")
    with pytest.raises(ThreadLeaseHeld, match="take it over with take_over=True"):
        await api.lease_thread("t")
    second = await api.lease_thread("t", take_over=True)
    assert second != first

    before = await api.counts()
    with pytest.raises(ThreadLeaseLost, match="'t' is leased to another owner"):
        await say(api, graph, first, "stale")
    latest = await api.get_tuple(thread("t"))
    assert latest is not None
    with pytest.raises(ThreadLeaseLost):
        stale = {"configurable": {**latest.config["configurable"], "thread_owner": first}}
        await api.put_writes(stale, [("w", 1)], "task")
    assert await api.counts() == before

    await say(api, graph, second, "two")
    state = await api.state(graph, thread("t"))
    assert [m.content for m in state.values["messages"]][::2] == ["one", "two"]
    assert await api.release_thread("t", second)
    with pytest.raises(ThreadLeaseLost):  # released, still not the stale writer's
        await say(api, graph, first, "stale again")
    third = await api.lease_thread("t")  # released: free without take_over
    await say(api, graph, third, "three")


async def test_an_expired_lease_is_free_by_the_servers_clock(api: Api) -> None:
    first = await api.lease_thread("t", seconds=30)
    with skewed_client_clock(timedelta(hours=1)), pytest.raises(ThreadLeaseHeld) as held:
        await api.lease_thread("t")
    assert held.value.until is not None
    moment = datetime.now(timezone.utc) - timedelta(seconds=31)
    aged = {"$set": {"leased_at": moment}}
    await maybe_await(api.raw(THREADS).update_one({"thread_id": "t"}, aged))
    with skewed_client_clock(-timedelta(hours=1)):
        second = await api.lease_thread("t")
    assert second != first
    assert await api.lease_thread("t", owner=second) == second  # renewed by its owner


def test_the_lease_block_holds_the_lease_and_releases_it(saver: MongoDBSaver) -> None:
    with saver.thread_lease("t", seconds=120) as owner:
        with pytest.raises(ThreadLeaseHeld):
            saver.lease_thread("t")
        assert saver.lease_thread("t", owner=owner) == owner
    assert saver.lease_thread("t") != owner


async def test_the_async_lease_block_holds_the_lease_and_releases_it(asaver: Any) -> None:
    async with asaver.athread_lease("t") as owner:
        with pytest.raises(ThreadLeaseHeld):
            await asaver.alease_thread("t")
    assert await asaver.alease_thread("t") != owner


async def test_unfenced_writers_and_bad_input(api: Api) -> None:
    await put_chain(api, "t", 2)  # writes without thread_owner are not checked
    await api.lease_thread("t")
    await put_chain(api, "u", 1)
    for owner in ("", 7):
        with pytest.raises(ValueError, match="thread_owner"):
            await api.put(owned("t", owner), generate_checkpoint(), {}, {})
    for seconds in (0, -1, 400 * 24 * 3600):
        with pytest.raises(ValueError, match="a lease lasts"):
            await api.lease_thread("t", seconds=seconds)


async def test_fenced_writes_cost_no_command_with_the_client_bulk_write(api: Api) -> None:
    owner = await api.lease_thread("t")
    (config,) = await put_chain(api, "t", 1)
    fenced = {"configurable": {**config["configurable"], "thread_owner": owner}}
    checkpoint = generate_checkpoint(channel_values={}, channel_versions={})
    counter = count_calls(api.saver.collections)
    await api.put(fenced, checkpoint, generate_metadata(step=1), {})
    expected = put_write_calls(api.saver, values=False)
    if not api.saver.uses_client_bulk_write:
        expected[(THREADS, "bulk_write")] = 1
    assert dict(counter) == expected
    assert await api.count(CHECKPOINTS, {"thread_id": "t"}) == 2
    counter.clear()
    await api.put_writes({"configurable": {**config["configurable"], "thread_owner": owner}},
                         [("w", 1)], "task")
    two = {(THREADS, "bulk_write"): 1, (WRITES, "bulk_write"): 1}
    one = {(CLIENT, "bulk_write"): 1}
    assert dict(counter) == (one if api.saver.uses_client_bulk_write else two)


def two_writers(tmp_path: Path, fenced: bool) -> tuple[str, str, list[str], int]:
    """langgraph #8796: a writer pauses mid-turn, another runs a turn on the same thread,
    the first resumes. Returns each one's outcome, the messages at the thread's tip, and
    how many checkpoints the tip does not reach (a fork)."""
    uri, db = uri_for("wire"), f"t_fence_{uuid.uuid4().hex[:8]}"
    client = sync_client("wire")
    saver = MongoDBSaver(client, db)
    chat_builder().compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage("seed")]}, thread("t")
    )

    def start(role: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "tests.fencing_worker", uri, db, role,
                   str(int(fenced)), str(tmp_path)]
        return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)

    try:
        first = start("first")
        deadline = time.monotonic() + 60
        while not (tmp_path / "paused").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second, _ = start("second").communicate(timeout=60)
        (tmp_path / "resume").touch()
        outcome, _ = first.communicate(timeout=60)
        every = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(thread("t"))}
        tip = saver.get_tuple(thread("t"))
        assert tip is not None
        reached, at = set(), tip
        while at is not None:
            reached.add(at.config["configurable"]["checkpoint_id"])
            at = every.get((at.parent_config or {}).get("configurable", {}).get("checkpoint_id"))
        messages = [m.content for m in tip.checkpoint["channel_values"]["messages"]]
        return outcome.strip(), second.strip(), messages, len(set(every) - reached)
    finally:
        client.drop_database(db)
        client.close()


def test_two_processes_without_fencing_fork_the_thread(tmp_path: Path) -> None:
    first, second, messages, unreachable = two_writers(tmp_path, fenced=False)
    assert (first, second) == ("ok", "ok")
    assert unreachable > 0  # the second writer's turn is not in the tip's history
    assert "second" not in messages and any(m.startswith("first saw") for m in messages)


def test_two_processes_with_fencing_keep_one_history(tmp_path: Path) -> None:
    first, second, messages, unreachable = two_writers(tmp_path, fenced=True)
    assert (first, second) == ("ThreadLeaseLost", "ok")
    assert unreachable == 0
    assert "second" in messages and not any(m.startswith("first saw") for m in messages)


async def fenced_put(api: Api, thread_id: Any, owner: str) -> Any:
    return await api.put(owned(thread_id, owner), generate_checkpoint(), generate_metadata(), {})


async def test_thread_ids_and_owners_are_checked_as_everywhere(api: Api) -> None:
    first = await api.lease_thread(7)  # thread 7 is "7", as for every other method
    await api.lease_thread("7", take_over=True)
    with pytest.raises(ThreadLeaseLost):
        await fenced_put(api, 7, first)
    victim = await api.lease_thread("victim", seconds=3600)
    for call in (
        lambda: api.lease_thread({"$ne": None}, take_over=True),
        lambda: api.release_thread({"$ne": None}, victim),
    ):
        with pytest.raises(TypeError, match="thread_id"):
            await call()
    for owner in ({"$ne": None}, None, "", 7, b"x"):
        with pytest.raises(ValueError, match="owner token"):
            await api.release_thread("victim", owner)
    for owner in ("", 7, b"x"):
        with pytest.raises(ValueError, match="owner token"):
            await api.lease_thread("t", owner=owner)
    for seconds in ("60", True, None, [60], float("nan"), float("inf")):
        with pytest.raises(ValueError, match="a lease lasts"):
            await api.lease_thread("t", seconds=seconds)
    with pytest.raises(ValueError, match="take_over is True or False"):
        await api.lease_thread("victim", take_over="no")
    await fenced_put(api, "victim", victim)  # nothing above touched its lease


async def test_a_taken_over_owner_stays_fenced_after_the_thread_is_deleted(api: Api) -> None:
    stale = await api.lease_thread("t")
    await api.set_thread_ttl("t", 3600)
    await fenced_put(api, "t", stale)
    current = await api.lease_thread("t", take_over=True)
    await api.delete_thread("t")
    (settings,) = await api.docs(THREADS, {"thread_id": "t"})
    assert "ttl" not in settings  # the settings go with the thread; the lease stays
    with pytest.raises(ThreadLeaseLost):
        await fenced_put(api, "t", stale)
    await fenced_put(api, "t", current)


def test_take_over_and_renewal_win_against_a_writing_owner(saver: MongoDBSaver) -> None:
    owner = saver.lease_thread("t", seconds=600)
    threads = saver.collections[THREADS]

    def renew() -> None:  # the owner's fenced writes land between take's read and its write
        time.sleep(0.002)  # leased_at is in milliseconds
        threads.update_one({"thread_id": "t"}, {"$currentDate": {"leased_at": True}})

    interleave = Interleave(saver.collections, renew)
    try:
        assert saver.lease_thread("t", owner=owner, seconds=900) == owner
        assert saver.lease_thread("t", take_over=True) != owner
    finally:
        interleave.restore()


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_a_stale_run_writes_nothing_in_each_durability(api: Api, durability: str) -> None:
    graph = api.compile(chat_builder())
    first = await api.lease_thread("t")
    run = {"durability": durability}
    await api.invoke(graph, {"messages": [HumanMessage("one")]}, owned("t", first), **run)
    second = await api.lease_thread("t", take_over=True)
    before = await api.counts()
    with pytest.raises(ThreadLeaseLost):
        await api.invoke(graph, {"messages": [HumanMessage("x")]}, owned("t", first), **run)
    assert await api.counts() == before
    await api.invoke(graph, {"messages": [HumanMessage("two")]}, owned("t", second), **run)


async def test_a_stale_resume_of_a_subgraph_writes_nothing(api: Api) -> None:
    graph = api.compile(parent_builder(Counter()))
    first = await api.lease_thread("t")
    await api.invoke(graph, {"topic": "x"}, owned("t", first))
    namespaces = {d["checkpoint_ns"] for d in await api.docs(CHECKPOINTS, {"thread_id": "t"})}
    assert len(namespaces) > 1
    second = await api.lease_thread("t", take_over=True)
    before = await api.counts()
    with pytest.raises(ThreadLeaseLost):
        await api.invoke(graph, Command(resume="ok"), owned("t", first))
    assert await api.counts() == before
    assert (await api.invoke(graph, Command(resume="ok"), owned("t", second)))["published"]


async def test_settings_reads_and_copies_keep_the_lease(api: Api) -> None:
    await api.set_thread_ttl("t", 3600)  # settings before the lease
    owner = await api.lease_thread("t")
    await fenced_put(api, "t", owner)
    await api.set_thread_ttl("t", "never")
    await api.set_thread_ttl("t", "default")
    await api.reopened(refresh_on_read=True).get_tuple(thread("t"))
    await api.copy_thread("t", "copy")
    (copied,) = await api.docs(THREADS, {"thread_id": "copy"}) or [{}]
    assert not {"owner", "leased_at", "lease_seconds"} & set(copied)
    await api.lease_thread("copy")  # the copy is free
    await fenced_put(api, "t", owner)
    with pytest.raises(ThreadLeaseHeld):
        await api.lease_thread("t")


async def test_the_owner_token_is_not_stored_in_checkpoint_metadata(api: Api) -> None:
    owner = await api.lease_thread("t")
    await fenced_put(api, "t", owner)
    (stored,) = await api.list(thread("t"))
    assert "thread_owner" not in stored.metadata
    assert await api.list(None, filter={"thread_owner": owner}) == []


def test_a_lease_whose_reply_was_lost_is_taken_again_with_its_token(saver: MongoDBSaver) -> None:
    faults = Faults(saver.collections)
    try:
        saver.lease_thread("probe")
        update = next(i for i, call in enumerate(faults.calls) if call[1] == "update_one")
        faults.arm(Fault(update, "after"))
        with pytest.raises(AutoReconnect):
            saver.lease_thread("t", owner="token-of-this-run")
    finally:
        faults.restore()
    assert saver.lease_thread("t", owner="token-of-this-run") == "token-of-this-run"
