"""Attacks on the parent probe that names the parent's document by its ``_id``
(``maintenance.probe_parent``'s ``stored_id``, ``memory._Seen.stored_id``): a remembered
``_id`` that no longer names the parent makes the probe miss, and the put then decides in
more round trips (``judge_parent``'s ``find``, the confirmation) with its checkpoint
stored ``pending`` in between."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import StaleParentError, maintenance
from mongo_ckpt.layout import CHECKPOINTS, PENDING
from tests.backends import Target, maybe_await, target_params
from tests.saver_support import BOTH_PUT_PATHS, Api, assert_no_orphans, put_chain, values_at
from tests.test_saver_fork_races import MAINTENANCE as FORK_MAINTENANCE
from tests.test_saver_fork_races import STEPPED, Fork, Stepper

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
    checkpoint = generate_checkpoint(
        channel_values=values_at(step, "t"), channel_versions=versions
    )
    metadata = generate_metadata(step=step)
    op = api.saver.ops.put(parent, checkpoint, metadata, {"a": versions["a"]})
    return op, checkpoint["id"]


async def stored(api: Api, checkpoint_id: str) -> dict[str, Any] | None:
    docs = await api.docs(CHECKPOINTS, {"thread_id": "t", "checkpoint_id": checkpoint_id})
    return docs[0] if docs else None


async def step_until(stepper: Stepper, done: Any) -> None:
    while not await done():
        assert await stepper.step(), "the operation ended first"


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
    await step_until(pruning, parent_tombstoned)  # its look, then its tombstones
    await writer.finish()
    await pruning.finish()
    assert pruning.raised is None
    return writer.raised, parent_id


async def test_prune_beside_a_put_on_the_latest_keeps_a_latest_checkpoint(api: Api) -> None:
    """FAILS (finding 1). Thread ``t`` c0..c2; the saver's memory names c2 by an ``_id``
    the thread was restored away from. A put of c3 on c2: its probe misses, so c3 stays
    ``pending`` across two more round trips. ``prune(keep_latest)`` looks meanwhile: its
    plan (``maintenance.prune_plan``) counts the pending c3 as the namespace's latest and
    tombstones c2 (and c0, c1); the put's ``judge_parent`` then finds c2 tombstoned and
    takes c3 back. Expected: c3 stored, or refused with c2 (the latest) kept. Actual: c3
    refused AND c2 deleted: the thread has no checkpoint left."""
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


def _triples(calls: int) -> list[tuple[int, int, int]]:
    """Positions (after how many maintenance calls) of the put's checkpoint command, of its
    ``judge_parent`` read and of what follows (the confirmation): each first position with
    the next right after it, one later, and at the end."""
    later = lambda p: {p, min(p + 1, calls), calls}  # noqa: E731
    return sorted({(a, b, c) for a in range(calls + 1) for b in later(a) for c in later(b)})


async def _delete_thread_calls(api: Api, name: str) -> int:
    await Fork.build(api)
    alone = Stepper(api, MAINTENANCE[name](api.saver.memory.forget))
    await alone.finish()
    assert alone.raised is None
    await api.delete_thread("t")
    return alone.calls


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
    calls = await _delete_thread_calls(api, name)
    outcomes = {"stored": 0, "refused": 0}
    problems: list[str] = []
    for first, second, third in _triples(calls):
        fork = await Fork.build(api, shares)
        await restore_under_new_ids(api, "t")
        fork_id = fork.checkpoint["id"]
        deleting = Stepper(api, MAINTENANCE[name](api.saver.memory.forget))
        writer = Stepper(api, fork.put(api))
        where = (name, first, second, third)

        async def fork_written() -> bool:
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
        if writer.raised is None and shares == "history" and name != "delete_thread":
            if await api.get_tuple(fork_config) is not None:
                await api.get_delta_channel_history(config=fork_config, channels=["d"])
        await api.prune(["t"], strategy="keep_latest")
        try:
            await assert_no_orphans(api)
        except AssertionError as exc:
            problems.append(f"{where}: after one more prune: {str(exc).splitlines()[0]}")
        await api.delete_thread("t")
    print(f"\n{name}, stale fork sharing {shares}: {calls} calls, {outcomes}")
    assert not problems, "\n".join(problems)
