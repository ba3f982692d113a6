"""Attacks on the parent probe that names the parent's document by its ``_id``
(``maintenance.probe_parent``'s ``stored_id``, ``memory._Seen.stored_id``): a remembered
``_id`` that no longer names the parent makes the probe miss, and the put then decides in
more round trips (``judge_parent``'s ``find``, the confirmation) with its checkpoint
stored ``pending`` in between."""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from pymongo.errors import AutoReconnect

from mongo_ckpt import StaleParentError, maintenance
from mongo_ckpt.clock import aware, server_now
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, PENDING, SCHEMA
from tests.backends import Target, count_calls, maybe_await, target_params
from tests.faults import MODES, Fault, Faults
from tests.graphs import SEED_INPUT, SeedState, thread
from tests.probe_support import probes, record_requests
from tests.saver_support import (
    BOTH_PUT_PATHS,
    LOGICAL,
    Api,
    assert_no_orphans,
    put_chain,
    values_at,
)
from tests.stepping import MAINTENANCE as FORK_MAINTENANCE
from tests.stepping import STEPPED, Fork, Stepper, maintenance_calls, step_until

pytestmark = BOTH_PUT_PATHS


async def restore_under_new_ids(api: Api, thread_id: str) -> None:
    """The thread's checkpoints stored again under new ``_id``s (a restored export)."""
    raw = api.raw(CHECKPOINTS)
    for doc in await api.docs(CHECKPOINTS, {"thread_id": thread_id}):
        await maybe_await(raw.delete_one({"_id": doc["_id"]}))
        await maybe_await(raw.insert_one({**doc, "_id": ObjectId()}))


def next_put(api: Api, parent: dict[str, Any], step: int) -> tuple[Any, str]:
    """The put of ``put_chain``'s next checkpoint on ``parent``, as an operation."""
    versions = {"a": f"{step + 1:08}", "b": f"{1:08}"}
    checkpoint = generate_checkpoint(channel_values=values_at(step, "t"), channel_versions=versions)
    metadata = generate_metadata(step=step)
    op = api.saver.ops.put(parent, checkpoint, metadata, {"a": versions["a"]})
    return op, checkpoint["id"]


async def stored(api: Api, checkpoint_id: str, thread_id: str = "t") -> dict[str, Any] | None:
    docs = await api.docs(CHECKPOINTS, {"thread_id": thread_id, "checkpoint_id": checkpoint_id})
    return docs[0] if docs else None


# -- 1. prune keep_latest beside a put on the latest whose probe missed ---------------


async def _prune_beside_a_pending_put_on_the_latest(api: Api, stale: bool) -> tuple[Any, str]:
    configs = await put_chain(api, "t", 3)
    latest = configs[-1]
    if stale:
        await restore_under_new_ids(api, "t")
    op, child_id = next_put(api, latest, 3)
    writer = Stepper(api, op)
    parent_id = latest["configurable"]["checkpoint_id"]

    async def child_written() -> bool:
        return await stored(api, child_id) is not None

    async def parent_tombstoned() -> bool:
        parent = await stored(api, parent_id)
        return parent is not None and maintenance.DOOMED in parent

    await step_until(writer, child_written)  # its checkpoint's command (with the probe) ran
    pruning = Stepper(api, maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest"))
    await step_until(pruning, parent_tombstoned, or_end=True)  # its look, its tombstones
    await writer.finish()
    await pruning.finish()
    assert pruning.raised is None
    return writer.raised, parent_id


async def test_prune_beside_a_put_on_the_latest_keeps_a_latest_checkpoint(api: Api) -> None:
    """Found by this attack (fixed in ``maintenance.prune_plan``). Thread ``t`` c0..c2; the
    saver's memory names c2 by an ``_id`` the thread was restored away from. A put of c3
    on c2: its probe misses, so c3 stays
    ``pending`` across two more round trips. ``prune(keep_latest)`` looks meanwhile: its
    plan (``maintenance.prune_plan``) counts the pending c3 as the namespace's latest and
    tombstones c2 (and c0, c1); the put's ``judge_parent`` then finds c2 tombstoned and
    takes c3 back. Expected: c3 stored, or refused with c2 (the latest) kept. Before the
    fix: c3 refused AND c2 deleted, the thread had no checkpoint left. Now prune keeps
    the latest visible checkpoint and any pending one newer than it."""
    raised, parent_id = await _prune_beside_a_pending_put_on_the_latest(api, stale=True)
    left = [t.checkpoint["id"] for t in await api.list({"configurable": {"thread_id": "t"}})]
    if raised is not None:
        assert isinstance(raised, StaleParentError)
        assert parent_id in left, f"the refused put's parent, the latest, is gone: {left}"
    assert left, "prune(keep_latest) and a put on the latest left the thread empty"
    await assert_no_orphans(api)


async def test_prune_beside_a_put_on_the_latest_whose_probe_names_its_id(api: Api) -> None:
    """The same interleaving when the remembered ``_id`` is right: the probe passes and the
    checkpoint is confirmed in the command that wrote it, so prune finds it latest."""
    raised, parent_id = await _prune_beside_a_pending_put_on_the_latest(api, stale=False)
    assert raised is None
    left = [t.checkpoint["id"] for t in await api.list({"configurable": {"thread_id": "t"}})]
    assert len(left) == 1 and parent_id not in left
    await assert_no_orphans(api)


# -- 2. forks from a checkpoint being deleted, with the probe's ``_id`` stale ---------

MAINTENANCE = {
    **FORK_MAINTENANCE,
    "delete_thread": lambda forget: maintenance.delete_thread(forget, "t"),
}


def _triples(calls: int, every: bool) -> list[tuple[int, int, int]]:
    """Positions (after how many maintenance calls) of the put's checkpoint command, of its
    ``judge_parent`` read and of what follows (the confirmation): each first position with
    the next right after it, one later, and at the end; on a server (slower) the read
    right after the command, and what follows right after it or at the end."""

    def later(p: int) -> set[int]:
        return {p, min(p + 1, calls), calls}

    if not every:
        return sorted({(a, a, c) for a in range(calls + 1) for c in (a, calls)})
    return sorted({(a, b, c) for a in range(calls + 1) for b in later(a) for c in later(b)})


@pytest.mark.mock_by_default
@pytest.mark.parametrize("target", target_params(STEPPED), indirect=True)
@pytest.mark.parametrize("shares", ["values", "history"])
@pytest.mark.parametrize("name", sorted(MAINTENANCE))
async def test_fork_with_a_stale_id_from_a_checkpoint_being_deleted(
    api: Api, target: Target, name: str, shares: str
) -> None:
    """``test_saver_fork_races`` with the thread restored under new ``_id``s before the fork:
    its probe misses, and maintenance runs between the put's checkpoint command, its read
    of the parent and its confirmation. The put is stored whole (its history too) or
    refused and leaves nothing behind; nothing pending is listed; every listed checkpoint
    reads back whole; one more prune leaves no orphan."""
    calls = await maintenance_calls(api, MAINTENANCE[name])
    outcomes = {"stored": 0, "refused": 0}
    problems: list[str] = []
    for first, second, third in _triples(calls, every=target.backend == "mock"):
        fork = await Fork.build(api, shares)
        await restore_under_new_ids(api, "t")
        fork_id = fork.checkpoint["id"]
        deleting = Stepper(api, MAINTENANCE[name](api.saver.memory.forget))
        writer = Stepper(api, fork.put(api))
        where = (name, first, second, third)

        async def fork_written(fork_id: str = fork_id, writer: Stepper = writer) -> bool:
            return await stored(api, fork_id) is not None or writer.done

        for _ in range(first):
            await deleting.step()
        await step_until(writer, fork_written)
        for _ in range(second - first):
            await deleting.step()
        await writer.step()  # judge_parent's read of the parent
        for _ in range(third - second):
            await deleting.step()
        await writer.finish()
        await deleting.finish()
        assert deleting.raised is None, (where, deleting.raised)

        fork_config = {"configurable": {**fork.parent["configurable"], "checkpoint_id": fork_id}}
        if writer.raised is not None:
            assert isinstance(writer.raised, StaleParentError), (where, writer.raised)
            assert await api.get_tuple(fork_config) is None, where
            outcomes["refused"] += 1
        else:
            fork.expected[fork_id] = fork.values
            outcomes["stored"] += 1
        listed = await api.list(generate_config("t"))
        for item in listed:
            cid = item.config["configurable"]["checkpoint_id"]
            assert item.checkpoint["channel_values"] == fork.expected[cid], where
            found = await api.get_tuple(item.config)
            assert found.checkpoint["channel_values"] == fork.expected[cid], where
        if name == "prune" and not listed:
            problems.append(f"{where}: prune(keep_latest) left the thread empty")
        if writer.raised is None and name in ("prune", "delete_for_runs"):
            assert await api.get_tuple(fork_config) is not None, where
        history = writer.raised is None and shares == "history" and name != "delete_thread"
        if history and await api.get_tuple(fork_config) is not None:
            await api.get_delta_channel_history(config=fork_config, channels=["d"])
        await api.prune(["t"], strategy="keep_latest")
        try:
            await assert_no_orphans(api)
        except AssertionError as exc:
            problems.append(f"{where}: after one more prune: {str(exc).splitlines()[0]}")
        await api.delete_thread("t")
    print(f"\n{name}, stale fork sharing {shares}: {calls} calls, {outcomes}")
    assert not problems, "\n".join(problems)


# -- 3. a put confirmed after the maintenance call that found it pending --------------


async def _accepted_after_a_miss(api: Api) -> tuple[Fork, str, Stepper]:
    """The fork's put, stepped until ``judge_parent`` has read the parent (untombstoned,
    under a new ``_id``: the probe missed) and accepted, before its confirmation."""
    fork = await Fork.build(api)
    await restore_under_new_ids(api, "t")
    fork_id = fork.checkpoint["id"]
    writer = Stepper(api, fork.put(api))

    async def fork_written() -> bool:
        return await stored(api, fork_id) is not None

    await step_until(writer, fork_written)
    assert await writer.step()  # judge_parent's read: the parent is there, untombstoned
    return fork, fork_id, writer


async def test_a_fork_confirmed_after_maintenance_ended_leaves_no_value_marked(api: Api) -> None:
    """The fork's probe misses on a stale ``_id``, its ``judge_parent`` finds the parent
    untombstoned and accepts; ``delete_for_runs`` runs whole before the confirmation (a
    separate call): it finds the fork pending with its parent doomed
    (``maintenance._stillborn``), marks the value the fork shares with the parent, and
    ``_unmark_confirmed`` finds it still pending. The put, once confirmed, finds its parent
    gone and lifts the marks (``maintenance.unmark_after_late_confirmation``): no value
    stays marked under a visible checkpoint."""
    fork, fork_id, writer = await _accepted_after_a_miss(api)
    deleting = Stepper(api, maintenance.delete_for_runs(api.saver.memory.forget, ["old"]))
    await deleting.finish()
    assert deleting.raised is None
    await writer.finish()
    assert writer.raised is None
    config = {"configurable": {**fork.parent["configurable"], "checkpoint_id": fork_id}}
    found = await api.get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"] == fork.values
    await api.prune(["t"], strategy="keep_latest")
    marked = await api.docs(BLOBS, {"thread_id": "t", maintenance.DOOMED: True})
    assert [(d["channel"], d["version"]) for d in marked] == []


async def test_a_late_confirmation_keeps_the_marks_of_a_call_deleting_the_fork(api: Api) -> None:
    """The same late confirmation, with ``delete_thread`` tombstoning the fork itself and
    marking its values between the confirmation and the put's read after it: those marks
    are the deleting call's, so the put leaves them, and the thread is deleted whole."""
    fork, fork_id, writer = await _accepted_after_a_miss(api)
    assert await writer.step()  # the confirmation
    assert await api.count(CHECKPOINTS, {PENDING: True}) == 0
    deleting = Stepper(api, maintenance.delete_thread(api.saver.memory.forget, "t"))

    async def values_marked() -> bool:
        return await api.count(BLOBS, {"thread_id": "t", maintenance.DOOMED: True}) > 0

    await step_until(deleting, values_marked)
    assert not deleting.done
    await writer.finish()
    assert writer.raised is None
    assert await values_marked()
    await deleting.finish()
    assert deleting.raised is None
    for collection in (CHECKPOINTS, BLOBS):
        assert await api.count(collection, {"thread_id": "t"}) == 0, collection


# -- 4. the same window before this change: a parent with an expired tombstone --------


async def test_prune_beside_a_put_on_a_latest_with_an_expired_tombstone(api: Api) -> None:
    """Found by this attack, reachable before it too (fixed in ``prune_plan``). The window
    of the finding above without a
    stale ``_id``: the latest checkpoint carries a tombstone older than the lease (a
    maintenance call cut long ago), so the probe misses and ``judge_parent`` reads the
    server's clock before it accepts. ``prune(keep_latest)`` in between takes the pending
    checkpoint for the latest and tombstones its parent anew; the put is refused and the
    thread was left empty. The root cause was in ``maintenance.prune_plan`` (a pending
    checkpoint counted as the latest); a stale remembered ``_id`` opens the same window."""
    configs = await put_chain(api, "t", 3)
    latest = configs[-1]
    parent_id = latest["configurable"]["checkpoint_id"]
    now = await api.run(server_now())
    expired = now - maintenance.TOMBSTONE_LEASE - timedelta(minutes=1)
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent_id}
    await maybe_await(
        api.raw(CHECKPOINTS).update_one(key, maintenance.tombstone(ObjectId(), expired))
    )
    op, child_id = next_put(api, latest, 3)
    writer = Stepper(api, op)

    async def child_written() -> bool:
        return await stored(api, child_id) is not None

    async def parent_tombstoned_anew() -> bool:
        parent = await stored(api, parent_id)
        return parent is not None and aware(parent[maintenance.DOOMED_AT]) > expired

    await step_until(writer, child_written)
    pruning = Stepper(api, maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest"))
    await step_until(pruning, parent_tombstoned_anew, or_end=True)
    await writer.finish()
    await pruning.finish()
    left = [t.checkpoint["id"] for t in await api.list({"configurable": {"thread_id": "t"}})]
    assert left, f"prune(keep_latest) left the thread empty; the put raised {writer.raised!r}"


# -- 5. ``_id``s of other types, and a stale one naming another document --------------


def _new_id(kind: str, doc: dict[str, Any]) -> Any:
    """A new ``_id`` of ``kind`` for checkpoint ``doc``: as an import or a migration by
    another tool may have stored it."""
    if kind == "str":
        return f"imported-{ObjectId()}"
    if kind == "document":
        return {
            "thread": doc["thread_id"],
            "checkpoint": doc["checkpoint_id"],
            "n": str(ObjectId()),
        }
    if kind == "int":
        return int(ObjectId().binary.hex()[-12:], 16)
    return ObjectId()


async def restore_with(api: Api, thread_id: str, kind: str) -> dict[str, Any]:
    """The thread's checkpoints stored again under new ``_id``s of ``kind``; the new ids."""
    raw = api.raw(CHECKPOINTS)
    ids: dict[str, Any] = {}
    for doc in await api.docs(CHECKPOINTS, {"thread_id": thread_id}):
        await maybe_await(raw.delete_one({"_id": doc["_id"]}))
        ids[doc["checkpoint_id"]] = _new_id(kind, doc)
        await maybe_await(raw.insert_one({**doc, "_id": ids[doc["checkpoint_id"]]}))
    return ids


@pytest.mark.parametrize("kind", ["str", "document", "int"])
async def test_ids_of_other_types_are_named_and_a_stale_one_costs_a_find(
    api: Api, kind: str
) -> None:
    """Checkpoints stored under ``_id``s of another type (imported): a ``get_tuple`` learns
    the ``_id``, the next put's probe names it and passes (the usual calls); stored again
    under new ones, the probe misses, and the put costs two ``find``s (the parent before the
    confirmation, the parent and the checkpoint after it) and the confirmation more (no
    clock read), and reads back."""
    configs = await put_chain(api, "t", 2)
    ids = await restore_with(api, "t", kind)
    latest = await api.get_tuple(configs[-1])
    sent = record_requests(api)
    counter = count_calls(api.saver.collections)
    op, child_id = next_put(api, latest.config, 2)
    await api.run(op)
    usual = Counter(counter)
    assert [p.get("_id") for p in probes(sent)] == [
        ids[configs[-1]["configurable"]["checkpoint_id"]]
    ]
    assert usual[(CHECKPOINTS, "find")] == 0 and usual[(SCHEMA, "find_one_and_update")] == 0

    # Stored again under new ``_id``s: the saver's memory names the child by the old one.
    await restore_with(api, "t", kind)
    counter.clear()
    child = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": child_id}}
    op, grandchild_id = next_put(api, child, 3)
    await api.run(op)
    extra = Counter(counter)
    extra.subtract(usual)
    assert +extra == Counter({(CHECKPOINTS, "find"): 2, (CHECKPOINTS, "bulk_write"): 1}), extra
    assert await api.count(CHECKPOINTS, {PENDING: True}) == 0
    found = await api.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert found.checkpoint["id"] == grandchild_id
    assert found.checkpoint["channel_values"] == values_at(3, "t")
    assert found.parent_config["configurable"]["checkpoint_id"] == child_id
    await assert_no_orphans(api)


async def _swap_ids(api: Api, first: str, second: str) -> None:
    """Checkpoints ``first`` and ``second`` of thread ``t`` stored again, each under the
    other's ``_id``."""
    raw = api.raw(CHECKPOINTS)
    docs = {d["checkpoint_id"]: d for d in await api.docs(CHECKPOINTS, {"thread_id": "t"})}
    a, b = docs[first], docs[second]
    await maybe_await(raw.delete_many({"_id": {"$in": [a["_id"], b["_id"]]}}))
    await maybe_await(raw.insert_many([{**a, "_id": b["_id"]}, {**b, "_id": a["_id"]}]))


@pytest.mark.parametrize("tombstoned", [False, True], ids=["kept", "tombstoned"])
async def test_a_stale_id_naming_another_checkpoint(api: Api, tombstoned: bool) -> None:
    """The remembered ``_id`` of the parent now names another checkpoint of the thread (the
    ids were reassigned): the probe's insert would take that ``_id`` (an ``E11000`` on
    ``_id`` rather than on the key, at the probe's index), so it is a miss like any other:
    the put is stored, or refused when the parent carries a live tombstone, and the other
    checkpoint is untouched."""
    configs = await put_chain(api, "t", 3)
    parent_id = configs[-1]["configurable"]["checkpoint_id"]
    sibling_id = configs[0]["configurable"]["checkpoint_id"]
    before = await api.get_tuple(configs[0])
    await _swap_ids(api, sibling_id, parent_id)
    if tombstoned:
        now = await api.run(server_now())
        key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent_id}
        update = maintenance.tombstone(ObjectId(), now)
        await maybe_await(api.raw(CHECKPOINTS).update_one(key, update))
    sent = record_requests(api)
    op, child_id = next_put(api, configs[-1], 3)
    if tombstoned:
        with pytest.raises(StaleParentError):
            await api.run(op)
        assert await stored(api, child_id) is None
    else:
        await api.run(op)
        found = await api.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert found.checkpoint["id"] == child_id
    docs = {d["checkpoint_id"]: d for d in await api.docs(CHECKPOINTS, {"thread_id": "t"})}
    assert [p["_id"] for p in probes(sent)] == [docs[sibling_id]["_id"]]
    assert await api.count(CHECKPOINTS, {"thread_id": "t"}) == 3 + (not tombstoned)
    assert await api.count(CHECKPOINTS, {PENDING: True}) == 0
    after = await api.get_tuple(configs[0])
    assert after.checkpoint == before.checkpoint and after.metadata == before.metadata


# -- 6. another instance stores the thread again; a retry after a fault ---------------


async def test_another_instance_stores_the_thread_again_under_the_same_ids(api: Api) -> None:
    """Instance A wrote c0..c2 and remembers their ``_id``s. Instance B resets the thread
    from a copy of itself (``copy_thread`` out, ``delete_thread``, ``copy_thread`` back):
    the same checkpoint ids under new ``_id``s. A's put on c2 misses on the stale ``_id``,
    finds c2 untombstoned and is stored; after B deletes the thread alone, the same kind of
    put (naming a value only the deleted thread held) is refused and leaves nothing."""
    other = api.reopened()
    configs = await put_chain(api, "t", 3)
    await other.copy_thread("t", "tmp")
    await other.delete_thread("t")
    await other.copy_thread("tmp", "t")
    await other.delete_thread("tmp")
    op, child_id = next_put(api, configs[-1], 3)
    await api.run(op)
    found = await api.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert found.checkpoint["id"] == child_id
    assert found.checkpoint["channel_values"] == values_at(3, "t")
    history = [t.checkpoint["id"] for t in await api.list({"configurable": {"thread_id": "t"}})]
    assert history == [child_id] + [c["configurable"]["checkpoint_id"] for c in configs[::-1]]

    await other.delete_thread("t")
    child = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": child_id}}
    op, grandchild_id = next_put(api, child, 4)
    with pytest.raises(StaleParentError):
        await api.run(op)
    assert await api.count(CHECKPOINTS) == 0
    # The value it inserted is left marked for maintenance, which removes it.
    left = await api.docs(BLOBS)
    assert left and all(d.get(maintenance.DOOMED) for d in left)
    await api.delete_thread("t")
    assert await api.counts() == dict.fromkeys(LOGICAL, 0)


def _put_calls(api: Api) -> int:
    """The calls of a put whose probe misses and whose parent is stored untombstoned: its
    command(s), the parent's ``find`` and the confirmation."""
    return 3 if api.saver.uses_client_bulk_write else 4


@pytest.mark.parametrize("mode", MODES)
async def test_a_retry_after_a_fault_in_a_put_whose_probe_missed(api: Api, mode: str) -> None:
    """A put on a parent remembered by a stale ``_id`` fails at each of its calls (nothing
    sent, cut after its first request, or the reply lost), and the same put is made
    again: stored once, whole, nothing pending, and the next put (on a checkpoint whose
    ``_id`` the retry did not insert, so its probe names none) is stored too."""
    for call in range(_put_calls(api)):
        if mode == "cut" and call == _put_calls(api) - 2:
            continue  # judge_parent's find: not a bulk write, nothing to cut
        thread_id = f"t{call}"
        configs = await put_chain(api, thread_id, 2)
        await restore_under_new_ids(api, thread_id)
        versions = {"a": f"{3:08}", "b": f"{1:08}"}
        checkpoint = generate_checkpoint(
            channel_values=values_at(2, thread_id), channel_versions=versions
        )
        args = (configs[-1], checkpoint, generate_metadata(step=2), {"a": versions["a"]})
        faults = Faults(api.saver.collections)
        faults.arm(Fault(call, mode, k=1))
        try:
            with contextlib.suppress(AutoReconnect):
                await api.put(*args)
        finally:
            faults.restore()
        assert faults.fired, (call, faults.calls)
        stored_config = await api.put(*args)
        found = await api.get_tuple(stored_config)
        assert found.checkpoint["channel_values"] == values_at(2, thread_id), call
        assert await api.count(CHECKPOINTS, {"thread_id": thread_id, PENDING: True}) == 0
        originals = dict(api.saver.collections)
        sent = record_requests(api)
        versions = {"a": f"{4:08}", "b": f"{1:08}"}
        following = generate_checkpoint(
            channel_values=values_at(3, thread_id), channel_versions=versions
        )
        await api.put(stored_config, following, generate_metadata(step=3), {"a": versions["a"]})
        api.saver.collections.update(originals)
        parent_doc = await stored(api, checkpoint["id"], thread_id)
        assert parent_doc is not None
        assert [p.get("_id", parent_doc["_id"]) for p in probes(sent)] == [parent_doc["_id"]]
        latest = await api.get_tuple(generate_config(thread_id))
        assert latest.checkpoint["id"] == following["id"]
        assert latest.checkpoint["channel_values"] == values_at(3, thread_id)
    threads = {d["thread_id"] for d in await api.docs(CHECKPOINTS)}
    await api.prune(sorted(threads), strategy="keep_latest")
    await assert_no_orphans(api)


# -- 7. a real graph whose thread is restored in the middle of a run ------------------


def restoring_builder(api: Api | None, restore_in: str) -> StateGraph:
    """``START -> a -> b -> c -> END`` on ``SeedState``; node ``restore_in`` first stores the
    thread's checkpoints again under new ``_id``s (an export restored, a migration run
    again, while the run goes on): the run's next put names its parent by a stale one."""

    def update(name: str) -> dict[str, Any]:
        return {"foo": name, "bar": [name]}

    def node(name: str) -> Any:
        if api is not None and api.is_async:

            async def arun(state: SeedState, config: RunnableConfig) -> dict[str, Any]:
                if name == restore_in:
                    await restore_under_new_ids(api, config["configurable"]["thread_id"])
                return update(name)

            return arun

        def run(state: SeedState, config: RunnableConfig) -> dict[str, Any]:
            if api is not None and name == restore_in:
                raw = api.raw(CHECKPOINTS)
                for doc in list(raw.find({"thread_id": config["configurable"]["thread_id"]})):
                    raw.delete_one({"_id": doc["_id"]})
                    raw.insert_one({**doc, "_id": ObjectId()})
            return update(name)

        return run

    builder = StateGraph(SeedState)
    for name in "abc":
        builder.add_node(name, node(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder


@pytest.mark.parametrize("restore_in", ["a", "b", "c"])
async def test_a_run_goes_on_after_its_thread_is_restored_mid_run(
    api: Api, restore_in: str
) -> None:
    """Two runs on one thread, the second on another instance; the thread's documents are
    stored again under new ``_id``s inside a node of each run. Every put after it misses
    once and is stored: the states, the histories and the documents equal a run on
    ``InMemorySaver``, and nothing is pending. Each run costs what the same run on a
    thread left alone costs, plus two ``find``s and one confirmation (no clock read)."""
    other = api.reopened()
    reference = restoring_builder(None, "none").compile(checkpointer=InMemorySaver())
    expected = [reference.invoke(SEED_INPUT, thread("t")) for _ in range(2)]
    ran = []
    for saver_api in (api, other):
        counter = count_calls(saver_api.saver.collections)
        alone = saver_api.compile(restoring_builder(saver_api, "none"))
        # Each checkpoint stored before the next node runs: a restore beside a put in flight
        # would copy its checkpoint while pending, and store it so (invisible) for good.
        await saver_api.invoke(alone, SEED_INPUT, thread("alone"), durability="sync")
        usual = Counter(counter)
        counter.clear()
        graph = saver_api.compile(restoring_builder(saver_api, restore_in))
        ran.append(await saver_api.invoke(graph, SEED_INPUT, thread("t"), durability="sync"))
        extra = Counter(counter)
        extra.subtract(usual)
        del extra[(SCHEMA, "find_one")]  # the layout's re-read, when its time is due
        miss = {(CHECKPOINTS, "find"): 2, (CHECKPOINTS, "bulk_write"): 1}
        assert +extra == Counter(miss) and -extra == Counter(), extra
    assert ran == expected
    graph = api.compile(restoring_builder(api, restore_in))
    history = [(s.values, s.next) for s in await api.history(graph, thread("t"))]
    expected_history = [(s.values, s.next) for s in reference.get_state_history(thread("t"))]
    assert history == expected_history
    assert await api.count(CHECKPOINTS, {PENDING: True}) == 0
    await assert_no_orphans(api)


# -- 8. what the memory keeps: the same put again, a pending parent -------------------


async def test_the_same_put_again_keeps_the_id_its_first_attempt_learned(api: Api) -> None:
    """A put, then the same put again (LangGraph's retry of a step, a replayed request):
    the second finds the checkpoint stored and inserts nothing, so ``upserted_ids`` has no
    ``_id`` for it and ``memory.wrote`` stores ``None`` over the one the first put learned.
    The next put's probe then names no ``_id`` (on the wire server it reads every
    checkpoint of the thread again). Expected: the known ``_id`` is kept."""
    configs = await put_chain(api, "t", 2)
    versions = {"a": f"{3:08}", "b": f"{1:08}"}
    checkpoint = generate_checkpoint(channel_values=values_at(2, "t"), channel_versions=versions)
    args = (configs[-1], checkpoint, generate_metadata(step=2), {"a": versions["a"]})
    child = await api.put(*args)
    await api.put(*args)
    sent = record_requests(api)
    versions = {"a": f"{4:08}", "b": f"{1:08}"}
    following = generate_checkpoint(channel_values=values_at(3, "t"), channel_versions=versions)
    await api.put(child, following, generate_metadata(step=3), {"a": versions["a"]})
    child_doc = await stored(api, checkpoint["id"])
    assert child_doc is not None
    assert [p.get("_id") for p in probes(sent)] == [child_doc["_id"]]


@pytest.mark.parametrize("named", [True, False], ids=["probe-names-id", "stale-id"])
async def test_a_pending_parent_is_accepted_as_before(api: Api, named: bool) -> None:
    """A parent stored but ``pending`` (its own put not confirmed yet): neither the probe
    (which never looked at ``pending``, with or without the ``_id``) nor ``judge_parent``
    (after a miss on a stale ``_id``) refuses a child on it; the child is stored and reads
    back whole, the pending parent stays invisible. Not changed by this commit: both
    paths decide alike."""
    configs = await put_chain(api, "t", 3)
    parent_id = configs[-1]["configurable"]["checkpoint_id"]
    key = {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": parent_id}
    await maybe_await(api.raw(CHECKPOINTS).update_one(key, {"$set": {PENDING: True}}))
    if not named:
        await restore_under_new_ids(api, "t")
    counter = count_calls(api.saver.collections)
    op, child_id = next_put(api, configs[-1], 3)
    await api.run(op)
    assert counter[(CHECKPOINTS, "find")] == (0 if named else 2)
    found = await api.get_tuple(generate_config("t"))
    assert found.checkpoint["id"] == child_id
    assert found.checkpoint["channel_values"] == values_at(3, "t")
    listed = [t.checkpoint["id"] for t in await api.list(generate_config("t"))]
    assert parent_id not in listed and len(listed) == 3
