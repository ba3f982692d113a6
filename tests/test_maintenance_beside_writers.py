"""Maintenance beside writers: idle-thread deletion, ``delete_thread``, ``prune`` and copies
racing puts, retries and graph turns. Each test reproduces one way a conversation was lost,
mixed or misreported, and asserts what the contract (docs/architecture.md, DESIGN.md §2) or
``InMemorySaver`` gives."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo.errors import AutoReconnect

from mongo_ckpt import ConflictingValueError, StaleParentError, maintenance
from mongo_ckpt.calls import CLIENT, Call
from mongo_ckpt.clock import server_now
from mongo_ckpt.drivers import aexecute, execute
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.maintenance import DOOMED, DOOMED_AT
from tests.backends import maybe_await
from tests.faults import _fail, _Wrapper
from tests.retry_support import graph_on, lost_reply, msg, three
from tests.saver_support import BOTH_PUT_PATHS, Api
from tests.stepping import Fork, Stepper

pytestmark = BOTH_PUT_PATHS


async def step_until(api: Api, operation: Any, stop: Any, hook: Any) -> None:
    """Run ``operation`` call by call on ``api``'s collections; before the first call for
    which ``stop(call)`` holds, await ``hook()``; then run it to its end."""
    result: Any = None
    error: Exception | None = None
    fired = False
    while True:
        try:
            call = operation.throw(error) if error is not None else operation.send(result)
        except StopIteration:
            break
        result = error = None
        if not fired and isinstance(call, Call) and stop(call):
            fired = True
            await hook()
        try:
            if api.is_async:
                result = await aexecute(api.saver.collections, call)
            else:
                result = execute(api.saver.collections, call)
        except Exception as exc:  # thrown back into the operation, as the drivers do
            error = exc
    assert fired, "the operation never made the call the test waits for"


def first_checkpoint(thread_id: str, text: str) -> tuple[Any, ...]:
    values = {"a": text}
    versions = {"a": "00000001.0000000001"}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return generate_config(thread_id), checkpoint, generate_metadata(step=-1), versions


# -- 1. idle-thread deletion deletes by thread, after its last look ------------------------


async def test_idle_delete_spares_a_conversation_started_after_its_look(api: Api) -> None:
    """``delete --idle-days`` (``delete_idle``, each batch of the sweep) judges a thread
    idle by a ``distinct`` of recent checkpoints, then deletes *every* checkpoint of the
    thread (``delete_many({"thread_id": {"$in": expired}})``), not the ones it tombstoned.
    A put with no parent (the first checkpoint of a new conversation on that thread id,
    after the old one was deleted, e.g. by another instance's sweep or ``delete_thread``;
    or a subgraph's first checkpoint in a new namespace) has no probe, so when it lands
    between the look and the delete it returns success and is deleted: the conversation is
    lost without an error. Contract: "a thread that became active is spared" and
    maintenance deletes "the documents of the checkpoints they chose: exact versions"."""
    await api.put(*first_checkpoint("t", "old conversation"))
    await asyncio.sleep(0.05)  # clocks of millisecond resolution
    cutoff = await api.run(server_now())  # the old conversation is idle since before it
    await asyncio.sleep(0.05)
    new = first_checkpoint("t", "new conversation")
    stored: dict[str, Any] = {}

    async def new_conversation() -> None:
        await api.delete_thread("t")  # the old one goes (another sweep, or the user)
        stored["config"] = await api.put(*new)  # a new conversation on the thread id

    operation = api.saver.ops.delete_idle(["t"], cutoff)
    await step_until(
        api,
        operation,
        lambda c: (c.collection, c.method) == (CHECKPOINTS, "delete_many"),
        new_conversation,
    )
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None, "the new conversation, put after the look, was deleted"
    assert latest.checkpoint["channel_values"] == {"a": "new conversation"}


# -- 2. a value a refused call marked stays marked once a later call names it ----------------


class CutBlobs(_Wrapper):
    """The first ``bulk_write`` on the values (or the client-level one, whose values come
    first) applies its first ``k`` requests, then the connection is lost
    (``AutoReconnect``)."""

    def __init__(self, collections: dict[str, Any], k: int) -> None:
        self.k, self.fired = k, False
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Any, args: tuple, kwargs: dict) -> Any:
        if self.fired or attr != "bulk_write" or name not in (BLOBS, CLIENT):
            return method(*args, **kwargs)
        self.fired = True
        return _fail(method(list(args[0])[: self.k], *args[1:], **kwargs))


async def test_value_adopted_after_a_refused_call_is_not_left_marked(api: Api) -> None:
    """A put cut after its first value (``messages``) is retried once with another
    ``messages`` value: ``ConflictingValueError``, and the value it inserted (``side``) is
    marked for maintenance, as documented. The put is then retried with its first values:
    it finds ``side`` stored, adopts it and stores the checkpoint, but leaves the mark on a
    value a stored checkpoint now names. Maintenance never clears it (it keeps named
    values), and ``_judge_parent`` treats a marked value as one being deleted: the next
    lost-reply retry after ``prune(keep_latest)`` (the documented case that "returns the
    stored checkpoint") raises ``StaleParentError`` for a checkpoint that is stored whole.
    """
    thread = await three(api)
    first = [msg(i) for i in range(4)]
    config, checkpoint, metadata, new = thread.prepare(first, side=["s"])
    assert list(new) == ["messages", "side"]
    cut = CutBlobs(api.saver.collections, k=1)  # the messages head lands, side does not
    try:
        with pytest.raises(AutoReconnect):
            await api.put(config, checkpoint, metadata, new)
    finally:
        cut.restore()
    other = {**checkpoint["channel_values"], "messages": [msg(0), msg(9)]}
    with pytest.raises(ConflictingValueError):  # a retry with another value: refused
        await api.put(config, {**checkpoint, "channel_values": other}, metadata, new)
    await api.put(config, checkpoint, metadata, new)  # the retry with its first values
    await thread.check(api)
    # The next turn: its checkpoint lands, the reply is lost; prune keeps it, drops c4.
    args = thread.prepare([msg(i) for i in range(5)])
    await lost_reply(api, CHECKPOINTS, lambda: api.put(*args))
    await api.prune(["t"], strategy="keep_latest")
    stored = await api.put(*args)  # the same call again: returns the stored checkpoint
    assert stored["configurable"]["checkpoint_id"] == thread.checkpoint_id
    await thread.check(api)
    marked_named = [
        (d["channel"], d["version"])
        for d in await api.docs(BLOBS, {DOOMED: {"$exists": True}})
    ]
    assert marked_named == [], "values stored checkpoints name are marked for deletion"


# -- 3. delete_thread beside a put whose values are all new --------------------------------


async def test_put_landing_inside_delete_thread_is_never_stored_without_its_values(
    api: Api,
) -> None:
    """``delete_thread`` deletes the checkpoints, then the writes, then the values (by
    thread). A put continuing the thread (a MessagesState turn: its only value is new)
    that lands between the first and the last delete finds its parent absent; since it
    inserted every value it names, ``_judge_parent`` accepts it as "a parent never
    stored", and the put returns success. ``delete_thread`` then deletes its values: the
    thread is left with a checkpoint whose value is gone, and every read of the thread
    (each later turn of the graph) raises ``MissingValueError``. "A checkpoint is stored
    whole or not at all, whatever runs next to it": the thread must read as deleted (or
    hold the put whole)."""
    position = 0
    while True:  # the put lands before each call of delete_thread in turn
        thread = f"t{position}"
        configs = [generate_config(thread)]
        for step in range(1, 4):
            versions = {"messages": f"{step:08}"}
            checkpoint = generate_checkpoint(
                channel_values={"messages": [f"m{i}" for i in range(step)]},
                channel_versions=versions,
            )
            metadata = generate_metadata(step=step)
            configs.append(await api.put(configs[-1], checkpoint, metadata, versions))
        deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, thread))
        for _ in range(position):
            await deleting.step()
        versions = {"messages": f"{4:08}"}
        checkpoint = generate_checkpoint(
            channel_values={"messages": [f"m{i}" for i in range(4)]}, channel_versions=versions
        )
        with contextlib.suppress(StaleParentError):  # refused: fine
            await api.put(configs[-1], checkpoint, generate_metadata(step=4), versions)
        await deleting.finish()
        assert deleting.raised is None
        latest = await api.get_tuple(generate_config(thread))  # raises MissingValueError
        if latest is not None:
            assert latest.checkpoint["channel_values"]["messages"] == [f"m{i}" for i in range(4)]
        if deleting.calls <= position:
            break
        position += 1
    assert position > 3  # the put landed after the checkpoints' delete too


# -- 4. a copy inherits the source's activity time ------------------------------------------


async def test_copy_of_an_idle_thread_is_not_expired_at_once(api: Api) -> None:
    """``copy_thread`` replaces the target's documents with the source's, ``created_at``
    included, so the copy (written now) carries the source's last activity. Copying a
    thread idle for longer than ``ttl`` (to branch or restore it) produces a thread the
    next sweep deletes at once; one idle for ``ttl - 1 day`` expires tomorrow.
    ``created_at`` is documented as "write time on the server's clock (never the
    client's)" and drives "seconds of inactivity": the copy was just written."""
    saver = api.reopened(ttl=3600)
    await saver.put(*first_checkpoint("src", "kept"))
    # The sweep the put started, done before "src" ages: not one that would delete it.
    assert await saver.join_sweep(timeout=60)
    await asyncio.sleep(0.05)
    # The source was last active two hours ago (as stored by the server, aged here).
    old = (await api.run(server_now())) - timedelta(hours=2)
    await maybe_await(
        api.raw(CHECKPOINTS).update_many({"thread_id": "src"}, {"$set": {"created_at": old}})
    )
    await saver.copy_thread("src", "dst")
    swept = await saver.sweep_expired()
    assert "dst" not in swept, "the copy made a moment ago expired as idle"
    copied = await saver.get_tuple(generate_config("dst"))
    assert copied is not None and copied.checkpoint["channel_values"] == {"a": "kept"}


# -- 5. an equal value in another key order is a conflict -----------------------------------


async def test_retry_with_an_equal_dict_in_another_key_order_is_accepted(api: Api) -> None:
    """A retried put compares values by their serialized bytes: a dict equal to the stored
    one (``==``) but built in another key order (a retry on another instance that rebuilt
    the state, e.g. from JSON) raises ``ConflictingValueError`` although nothing differs.
    ``InMemorySaver`` accepts the put, and the contract refuses only "a retry with a
    different value"."""
    config, checkpoint, metadata, versions = first_checkpoint("t", "x")
    first = {**checkpoint, "channel_values": {"a": {"x": 1, "y": 2}}}
    await lost_reply(api, CHECKPOINTS, lambda: api.put(config, first, metadata, versions))
    again = {**checkpoint, "channel_values": {"a": {"y": 2, "x": 1}}}
    assert again["channel_values"] == first["channel_values"]
    stored = await api.reopened().put(config, again, metadata, versions)
    got = await api.get_tuple(stored)
    assert got.checkpoint["channel_values"] == {"a": {"x": 1, "y": 2}}


# -- 6. two maintenance calls on one thread: one's spare lifts the other's tombstones --------


async def test_idle_recheck_beside_prune_keeps_prunes_tombstones(api: Api) -> None:
    """Tombstones carry one token: ``delete_idle`` (the CLI's ``delete --idle-days`` after
    its prompt, each batch of the sweep) overwrites every checkpoint of the thread with its
    own token and, finding the thread active again, unsets the tombstones carrying *its*
    token: those ``prune`` set on the checkpoints it is about to delete go too. A fork
    from such a checkpoint (``update_state`` at an old checkpoint, here with a
    DeltaChannel replayed from its parent's history) then passes the parent probe and is
    stored after prune's last look; prune deletes the parent, and the fork's history has a
    hole (``MissingHistoryError``). Contract: "no checkpoint is stored on a parent about to
    go"; the fork must be refused (``StaleParentError``) or keep its parent."""
    early = await api.run(server_now())
    await asyncio.sleep(0.05)
    fork = await Fork.build(api, "history")  # c1..c4; the fork continues from c2
    pruning = Stepper(api, maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest"))
    for _ in range(4):  # plan, clock, tombstones on c1..c3, the look at the thread
        await pruning.step()
    doomed = await api.count(CHECKPOINTS, {DOOMED: {"$exists": True}})
    assert doomed == 3
    # The re-check of an idle-thread deletion chosen before the thread's last turn.
    await api.run(api.saver.ops.delete_idle(["t"], early))
    writer = Stepper(api, fork.put(api))
    await writer.finish()
    await pruning.finish()
    assert pruning.raised is None
    if writer.raised is not None:
        assert isinstance(writer.raised, StaleParentError)
        return
    fork_config = {
        "configurable": {**fork.parent["configurable"], "checkpoint_id": fork.checkpoint["id"]}
    }
    assert await api.get_tuple(fork_config) is not None
    await api.get_delta_channel_history(config=fork_config, channels=["d"])


# -- 7. a retry more than STRAY_AGE after its first attempt -----------------------------------


def old_id(moment: Any) -> ObjectId:
    """A unique ObjectId generated at ``moment``."""
    return ObjectId(ObjectId.from_datetime(moment).binary[:4] + ObjectId().binary[4:])


async def test_late_retry_beside_prune_is_never_stored_without_its_values(api: Api) -> None:
    """The first attempt of a put stored its values and died before its checkpoint (a
    crash, an outage); the same put is retried after a restart more than ``STRAY_AGE``
    (one hour) later. Its bulk write finds the heads stored, inserts nothing and adopts
    them, but they keep the first attempt's ``_id``, so to maintenance they are old
    values no checkpoint names. A ``prune`` of the thread running between the retry's value
    write and its checkpoint write deletes them as strays; the checkpoint then lands
    (its parent is stored, the probe matches) and the put returns success, naming values
    that are gone: every read of the thread raises ``MissingValueError``. "The same call
    again is harmless ... after a restart"; "a checkpoint is stored whole or not at all"."""
    thread = await three(api)
    args = thread.prepare([msg(i) for i in range(4)], side=["s"])
    await lost_reply(api, BLOBS, lambda: api.put(*args))  # values stored, no checkpoint
    # ... two hours ago: the same documents, with the _id they would then have got.
    then = (await api.run(server_now())) - timedelta(hours=2)
    version = args[3]["messages"]
    for doc in await api.docs(BLOBS, {"version": {"$in": list(args[3].values())}}):
        await maybe_await(api.raw(BLOBS).delete_one({"_id": doc["_id"]}))
        await maybe_await(
            api.raw(BLOBS).insert_one({**doc, "_id": old_id(then)})
        )
    assert await api.count(BLOBS, {"channel": "messages", "version": version}) == 1
    restarted = api.reopened()
    operation = restarted.saver.ops.put(*args)

    async def prune() -> None:
        await restarted.prune(["t"], strategy="keep_latest")

    await step_until(
        restarted,
        operation,
        lambda c: (c.collection, c.method) == (CHECKPOINTS, "bulk_write"),
        prune,
    )
    await thread.check(restarted)  # raises MissingValueError


# -- 8. a lease that runs out after the re-check -------------------------------------------


async def test_lease_running_out_after_the_recheck_does_not_delete_a_forks_parent(
    api: Api,
) -> None:
    """``_delete_checkpoints`` re-checks its lease (``_lease_renewed``) before it marks,
    not before it deletes: the marks (``update_many`` on every write and value of the
    doomed checkpoints, unbounded) run after the check. When they outlast the rest of the
    lease (here: the tombstones are aged 11 minutes while the first mark runs, as a
    paused process or a long mark would), a fork from a doomed checkpoint finds the
    tombstone expired, is accepted, and prune then deletes its parent: the fork's
    DeltaChannel history has a hole (``MissingHistoryError``). Contract: "maintenance
    that outlives a lease re-checks before it deletes"."""
    fork = await Fork.build(api, "history")  # c1..c4; the fork continues from c2
    stored: dict[str, Any] = {}

    async def slow_mark_then_fork() -> None:
        now = await api.run(server_now())
        aged = {"$set": {DOOMED_AT: now - timedelta(minutes=11)}}
        await maybe_await(api.raw(CHECKPOINTS).update_many({DOOMED: {"$exists": True}}, aged))
        writer = Stepper(api, fork.put(api))
        await writer.finish()
        stored["raised"] = writer.raised

    operation = maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest")
    await step_until(
        api,
        operation,
        lambda c: (c.collection, c.method) == (WRITES, "update_many"),
        slow_mark_then_fork,
    )
    if stored["raised"] is not None:
        assert isinstance(stored["raised"], StaleParentError)
        return
    fork_config = {
        "configurable": {**fork.parent["configurable"], "checkpoint_id": fork.checkpoint["id"]}
    }
    assert await api.get_tuple(fork_config) is not None
    await api.get_delta_channel_history(config=fork_config, channels=["d"])


async def test_graph_turn_inside_delete_thread_leaves_a_readable_thread(api: Api) -> None:
    """The same with a real graph: a MessagesState thread is deleted while a new turn on
    the thread id starts (the user opens a fresh conversation as the old one is being
    deleted). The turn reads no checkpoint (they went first), runs, and stores its
    checkpoints, all with values of their own; ``delete_thread`` then deletes the values
    by thread. The turn returned its answer, but the thread cannot be read again
    (``MissingValueError``), and every later turn fails. ``InMemorySaver``: the thread
    holds the new turn, or nothing."""
    graph = graph_on(api)
    position = 0
    while True:  # the turn runs before each call of delete_thread in turn
        config = {"configurable": {"thread_id": f"t{position}"}}
        for turn in range(2):
            message = HumanMessage(f"h{turn}", id=f"h{turn}")
            await api.invoke(graph, {"messages": [message]}, config)
        deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, f"t{position}"))
        for _ in range(position):
            await deleting.step()
        with contextlib.suppress(StaleParentError):  # refused: fine
            await api.invoke(graph, {"messages": [HumanMessage("new", id="new")]}, config)
        await deleting.finish()
        assert deleting.raised is None
        state = await api.state(graph, config)  # raises MissingValueError
        contents = [m.content for m in state.values.get("messages", [])]
        assert contents in ([], ["new", "#1"])
        if deleting.calls <= position:
            break
        position += 1
