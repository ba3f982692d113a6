"""A ``put`` continuing from a checkpoint that maintenance is deleting, interleaved with
``prune``, ``delete_for_runs`` and the retention sweep at every pair of their calls.

The put read its parent before maintenance began (a node ran in between). It shares
either the parent's values (one only the parent names, one every checkpoint names) or,
as a DeltaChannel checkpoint, only a value every checkpoint names and the parent's
history. Whatever the interleaving, the put is either stored whole (its history too) or
refused with ``StaleParentError`` (and leaves nothing behind); every stored checkpoint
reads back whole; and once the calls have finished, one more maintenance call leaves no
orphan. Every pair of positions runs on mock (sync and async); the wire server and a real
one (sync) run each first position with the second right after it, one later, and last.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_config,
)

from mongo_ckpt import StaleParentError, maintenance
from mongo_ckpt.calls import Call, NextBatch, Relay
from mongo_ckpt.drivers import aexecute, execute
from mongo_ckpt.layout import PENDING
from tests.backends import Target, target_params
from tests.saver_support import BOTH_PUT_PATHS, Api, assert_no_orphans
from tests.stepping import MAINTENANCE, STEPPED, Fork, Stepper, maintenance_calls

pytestmark = BOTH_PUT_PATHS

def _pairs(calls: int, every: bool) -> list[tuple[int, int]]:
    """Positions (after how many maintenance calls) of the put's two calls: every pair,
    or on a server (slower) each first position with the second right after it, one
    later, and at the end."""
    if every:
        return [(a, b) for a in range(calls + 1) for b in range(a, calls + 1)]
    return sorted({(a, b) for a in range(calls + 1) for b in (a, min(a + 1, calls), calls)})


@pytest.mark.mock_by_default
@pytest.mark.parametrize("target", target_params(STEPPED), indirect=True)
@pytest.mark.parametrize("shares", ["values", "history"])
@pytest.mark.parametrize("name", sorted(MAINTENANCE))
async def test_fork_from_a_checkpoint_being_deleted(
    api: Api, target: Target, name: str, shares: str
) -> None:
    calls = await maintenance_calls(api, MAINTENANCE[name])
    outcomes = {"stored": 0, "refused": 0}
    for first, second in _pairs(calls, every=target.backend == "mock"):
        fork = await Fork.build(api, shares)
        deleting = Stepper(api, MAINTENANCE[name](api.saver.memory.forget))
        writer = Stepper(api, fork.put(api))
        for _ in range(first):
            await deleting.step()
        await writer.step()  # its values; the checkpoint and the parent probe follow
        for _ in range(second - first):
            await deleting.step()
        await writer.finish()
        await deleting.finish()
        assert deleting.raised is None, (first, second, deleting.raised)
        where = (name, first, second)

        fork_id = fork.checkpoint["id"]
        fork_key = {**fork.parent["configurable"], "checkpoint_id": fork_id}
        fork_config = {"configurable": fork_key}
        if writer.raised is not None:
            assert isinstance(writer.raised, StaleParentError), where
            assert await api.get_tuple(fork_config) is None, where
            outcomes["refused"] += 1
        else:
            fork.expected[fork_id] = fork.values
            outcomes["stored"] += 1
        for item in await api.list(generate_config("t")):
            cid = item.config["configurable"]["checkpoint_id"]
            assert item.checkpoint["channel_values"] == fork.expected[cid], where
            found = await api.get_tuple(item.config)
            assert found.checkpoint["channel_values"] == fork.expected[cid], where
        if writer.raised is None and name != "sweep":  # the sweep may expire it too
            assert await api.get_tuple(fork_config) is not None, where
        if writer.raised is None and shares == "history":
            # Its parent is still there: the history walk (as far back as the fork's
            # counters say, once a read noted them) finds no gap.
            await api.get_tuple(fork_config)
            await api.get_delta_channel_history(config=fork_config, channels=["d"])

        await api.prune(["t"], strategy="keep_latest")
        await assert_no_orphans(api)
        await api.delete_thread("t")
    print(f"\n{name}, fork sharing {shares}: {calls} calls, {outcomes}")
    # Both outcomes happen: early interleavings spare the parent, late ones refuse the put.
    assert outcomes["stored"] and outcomes["refused"], outcomes


async def _execute(api: Api, step: Call | NextBatch) -> Any:
    if api.is_async:
        return await aexecute(api.saver.collections, step)
    return execute(api.saver.collections, step)


def _tombstones(step: Call | NextBatch) -> bool:
    """Whether ``step`` is maintenance tombstoning checkpoints."""
    update = step.args[1] if isinstance(step, Call) and step.method == "update_many" else {}
    return maintenance.DOOMED in update.get("$set", {})


def _looks(step: Call) -> bool:
    """Whether ``step`` is maintenance's read of the threads' checkpoints."""
    return step.method == "find" and step.kwargs.get("projection") == maintenance.LOOK


def _confirms(request: Any) -> bool:
    """Whether ``request`` is a put's confirmation of its pending checkpoint."""
    return getattr(request, "_doc", None) == {"$unset": {PENDING: ""}}


@pytest.mark.parametrize("target", target_params(STEPPED), indirect=True)
# The sweep spares the thread: the pending fork is recent activity.
@pytest.mark.parametrize("name", ["delete_for_runs", "prune"])
async def test_fork_confirmed_after_the_look_keeps_its_values_unmarked(
    api: Api, target: Target, name: str
) -> None:
    """The fork's probe passes just before maintenance tombstones its parent, and its
    confirmation (the last request of the same bulk write) lands after the look that
    found it pending: its put stores it, and the value it shares with the parent, marked
    as the parent's, is unmarked again before the maintenance call ends."""
    fork = await Fork.build(api)
    deleting = Relay(MAINTENANCE[name](api.saver.memory.forget))
    writer = Relay(fork.put(api))
    tombstoned = looked = False
    while (step := writer.next_step()) is not None:
        assert isinstance(step, (Call, NextBatch))
        requests = step.args[0] if isinstance(step, Call) and step.method == "bulk_write" else []
        if not requests or not _confirms(requests[-1]):
            writer.returned(await _execute(api, step))
            continue
        result = await _execute(api, dataclasses.replace(step, args=(list(requests[:-1]),)))
        while not looked and (later := deleting.next_step()) is not None:
            assert isinstance(later, (Call, NextBatch))
            deleting.returned(await _execute(api, later))
            tombstoned = tombstoned or _tombstones(later)
            looked = tombstoned and isinstance(later, Call) and _looks(later)
        await _execute(api, dataclasses.replace(step, args=(list(requests[-1:]),)))
        writer.returned(result)
    assert looked, "the maintenance call read the thread while the fork was pending"
    while (later := deleting.next_step()) is not None:
        assert isinstance(later, (Call, NextBatch))
        deleting.returned(await _execute(api, later))

    fork_key = {**fork.parent["configurable"], "checkpoint_id": fork.checkpoint["id"]}
    stored = await api.get_tuple({"configurable": fork_key})
    assert stored is not None and stored.checkpoint["channel_values"] == fork.values
    await assert_no_orphans(api)
