"""Maintenance decides on the server's clock: a maintenance client whose clock is hours off
makes the decisions of one whose clock is right, and a maintenance call slower than the
tombstone lease renews its tombstones and reads the threads again before it deletes.

The client clock is skewed by patching ``datetime`` in ``documents`` (where the saver
builds what it stores) while the maintenance call runs; the puts run on a right clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import StaleParentError, documents, maintenance
from mongo_ckpt.calls import Call, NextBatch
from mongo_ckpt.clock import CLOCK_ID
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.schema import SCHEMA
from tests.backends import maybe_await
from tests.saver_support import Api, assert_no_orphans
from tests.stepping import MAINTENANCE, Fork, Stepper, drive

HOURS = timedelta(hours=2)
SKEWS = [pytest.param(-HOURS, id="behind"), pytest.param(HOURS, id="ahead")]


def skew_client_clock(monkeypatch: pytest.MonkeyPatch, skew: timedelta) -> None:
    class Skewed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return datetime.now(tz) + skew

    monkeypatch.setattr(documents, "datetime", Skewed, raising=False)


def is_tombstoning(step: Call | NextBatch) -> bool:
    return (
        isinstance(step, Call)
        and step.collection == CHECKPOINTS
        and step.method == "update_many"
        and maintenance.DOOMED_AT in step.args[1].get("$set", {})
    )


def is_clock(step: Call | NextBatch) -> bool:
    return (
        isinstance(step, Call) and step.collection == SCHEMA and step.args[0] == {"_id": CLOCK_ID}
    )


def deletes_or_marks(step: Call | NextBatch) -> bool:
    """A call that marks or deletes: from here on, maintenance acts on what it decided."""
    return isinstance(step, Call) and (
        step.method == "delete_many" or step.collection in (WRITES, BLOBS)
    )


class PutBeforeDeleting:
    """Runs ``put`` once, after maintenance's tombstones, just before its last clock
    reading (the lease re-check) or, without one, just before it marks or deletes."""

    def __init__(self, put: Callable[[], Awaitable[None]]) -> None:
        self.put, self.tombstoned, self.done = put, False, False

    async def __call__(self, step: Call | NextBatch) -> None:
        if is_tombstoning(step):
            self.tombstoned = True
        elif self.tombstoned and not self.done and (is_clock(step) or deletes_or_marks(step)):
            self.done = True
            await self.put()


async def set_created_at(api: Api, thread_id: str, ago: timedelta) -> None:
    moment = datetime.now(timezone.utc) - ago
    await maybe_await(
        api.raw(CHECKPOINTS).update_many({"thread_id": thread_id}, {"$set": {"created_at": moment}})
    )


async def put_one(api: Api, thread_id: str) -> None:
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    await api.put(generate_config(thread_id), checkpoint, generate_metadata(), {"a": "1"})


@pytest.mark.parametrize("skew", SKEWS)
async def test_sweep_cutoff_is_the_servers(
    api: Api, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    api = api.reopened(ttl=3600)
    for thread_id in ("recent", "idle"):
        await put_one(api, thread_id)
    # The sweep the first put started, done before "idle" ages: not one that would find it.
    assert await api.join_sweep(timeout=60)
    await set_created_at(api, "recent", timedelta(minutes=30))
    await set_created_at(api, "idle", timedelta(minutes=90))
    skew_client_clock(monkeypatch, skew)
    assert await api.sweep_expired() == ["idle"]
    assert await api.count(CHECKPOINTS, {"thread_id": "recent"}) == 1


@pytest.mark.parametrize("skew", SKEWS)
async def test_tombstones_carry_the_servers_time(
    api: Api, monkeypatch: pytest.MonkeyPatch, skew: timedelta
) -> None:
    """A put after maintenance's tombstones, on a right clock, finds them live."""
    fork = await Fork.build(api)
    seen: list[datetime] = []

    async def read_tombstones(step: Call | NextBatch) -> None:
        if deletes_or_marks(step) and not seen:
            docs = await api.docs(CHECKPOINTS, {maintenance.DOOMED: {"$exists": True}})
            seen.extend(d[maintenance.DOOMED_AT].replace(tzinfo=timezone.utc) for d in docs)

    skew_client_clock(monkeypatch, skew)
    await drive(
        api, maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest"), read_tombstones
    )
    assert seen, "prune tombstoned nothing"
    now = datetime.now(timezone.utc)
    assert all(abs(moment - now) < timedelta(minutes=1) for moment in seen), seen
    monkeypatch.undo()
    with pytest.raises(StaleParentError):
        await api.put(fork.parent, fork.checkpoint, generate_metadata(), {"z": f"{9:08}"})


async def test_stray_age_is_judged_on_the_servers_clock(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values a put has written, its checkpoint not yet, are young: an hour-old stray
    on a clock two hours ahead would be gone."""
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    put = Stepper(
        api, api.saver.ops.put(generate_config("s"), checkpoint, generate_metadata(), {"a": "1"})
    )
    await put.step()  # its values
    skew_client_clock(monkeypatch, HOURS)
    await api.prune(["s"], strategy="keep_latest")
    monkeypatch.undo()
    await put.finish()
    assert put.raised is None
    found = await api.get_tuple(generate_config("s"))
    assert found is not None and found.checkpoint["channel_values"] == {"a": "x"}


@pytest.mark.parametrize("name", sorted(MAINTENANCE))
async def test_maintenance_slower_than_the_lease_renews_and_reads_again(
    api: Api, name: str
) -> None:
    """Eleven minutes pass (by the server's clock) between maintenance's tombstones and its
    deletes; a put meanwhile sees the tombstone expired and is stored: it survives whole."""
    fork = await Fork.build(api)
    await asyncio.sleep(0.01)  # the sweep's ttl is a microsecond: the server stores milliseconds
    late = timedelta(minutes=11)
    tombstoning = {"done": False}

    async def put_after_the_lease() -> None:
        await maybe_await(
            api.raw(CHECKPOINTS).update_many(
                {maintenance.DOOMED: {"$exists": True}},
                {"$set": {maintenance.DOOMED_AT: datetime.now(timezone.utc) - late}},
            )
        )
        writer = Stepper(api, fork.put(api))
        await writer.finish()
        assert writer.raised is None  # the tombstone looked expired to it

    hook = PutBeforeDeleting(put_after_the_lease)

    def later(step: Call | NextBatch, result: Any) -> Any:
        if is_tombstoning(step):
            tombstoning["done"] = True
        elif is_clock(step) and tombstoning["done"]:
            return {**result, "now": result["now"] + late}
        return result

    await drive(api, MAINTENANCE[name](api.saver.memory.forget), hook, later)
    assert hook.done
    fork_config = {
        "configurable": {**fork.parent["configurable"], "checkpoint_id": fork.checkpoint["id"]}
    }
    found = await api.get_tuple(fork_config)
    if name != "sweep":  # the sweep spares the whole thread: it is active again
        assert found is not None
    assert found is not None and found.checkpoint["channel_values"] == fork.values
    for item in await api.list(generate_config("t")):
        assert (await api.get_tuple(item.config)) is not None
    await api.prune(["t"], strategy="keep_latest")
    await assert_no_orphans(api)


async def test_no_renewal_within_half_the_lease(api: Api) -> None:
    """A prompt maintenance call reads the threads once after its tombstones."""
    await Fork.build(api)
    reads: list[str] = []

    async def count(step: Call | NextBatch) -> None:
        if isinstance(step, Call) and step.collection == CHECKPOINTS and step.method == "find":
            reads.append(step.method)

    await drive(api, maintenance.prune(api.saver.memory.forget, ["t"], "keep_latest"), count)
    # The plan's read, the read after the tombstones, the read of what values are needed.
    assert len(reads) == 3
