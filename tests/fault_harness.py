"""The fault-injection harness over the savers' write paths (this module holds no tests).

``check_every_fault(saver, name)`` runs one operation (put, put_writes, copy_thread,
prune, delete_for_runs, the retention sweep, or a put or put_writes fenced by a
``thread_owner``) once cleanly to learn its calls, then, on
a fresh thread per case, makes each call fail in turn (before it is sent, after the
server applied it, and for bulk writes cut after every k requests), and retries. Writes
are retried with the same value and with another one (a put whose first value was stored
refuses another with ``ConflictingValueError``, then completes with the first). After the
fault every checkpoint is whole or not visible, with no stitched value; after the retry
the operation's result is complete and nothing is left behind (``assert_no_orphans``).
It runs on sync and async savers.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo.errors import AutoReconnect

from mongo_ckpt import ConflictingValueError, maintenance
from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import maybe_await
from tests.faults import Fault, Faults
from tests.saver_support import Api, assert_no_orphans

CHUNK = 32  # tests set payload.CHUNK_SIZE to this: every value below is in 3 parts
OPERATIONS = [
    "put",
    "put_writes",
    "copy_thread",
    "prune",
    "delete_for_runs",
    "sweep_expired",
    "sweep_keep_latest",
    "put_fenced",
    "put_writes_fenced",
]
WRITING = ("put", "put_writes")  # retried with the same value and with another one
_ids = itertools.count()


def big(seed: int) -> bytes:
    return random.Random(seed).randbytes(3 * CHUNK)


class World:
    """Threads with known contents: ``allowed[thread][checkpoint_id]`` = (allowed values
    per channel, allowed writes per ``(task, channel)``), registered before each attempt."""

    def __init__(self, saver: Any) -> None:
        self.api = Api(saver)
        self.allowed: dict[str, dict[str, tuple[dict, dict]]] = {}
        self.last: dict[str, dict] = {}
        self.owner: str | None = None  # set: every write is fenced by this thread_owner

    def fenced(self, config: dict) -> dict:
        if self.owner is None:
            return config
        return {"configurable": {**config["configurable"], "thread_owner": self.owner}}

    def prepare_put(
        self, thread: str, step: int, run_id: str = "r"
    ) -> Callable[..., Awaitable[dict]]:
        """``put(seed=step)`` stores checkpoint ``step`` with ``a = big(seed)``."""
        versions = {"a": f"{step:08}", "b": f"{1:08}"}
        new = versions if thread not in self.last else {"a": versions["a"]}
        checkpoint = generate_checkpoint(channel_versions=versions)
        config = self.last.get(thread) or generate_config(thread)
        values: dict[str, list] = {"a": [], "b": [big(1000)]}
        self.allowed.setdefault(thread, {})[checkpoint["id"]] = (values, {})

        async def put(seed: int = step) -> dict:
            values["a"].append(big(seed))
            attempt = {**checkpoint, "channel_values": {"a": big(seed), "b": big(1000)}}
            metadata = generate_metadata(run_id=run_id)
            stored = await self.api.put(self.fenced(config), attempt, metadata, new)
            self.last[thread] = stored
            return stored

        return put

    def prepare_writes(self, thread: str, task: str) -> Callable[[int], Awaitable[None]]:
        """``write(seed)`` stores a regular and a special write of the thread's last checkpoint."""
        stored = self.last[thread]
        allowed = self.allowed[thread][stored["configurable"]["checkpoint_id"]][1]

        async def write(seed: int) -> None:
            writes = [("w", big(seed)), ("__error__", big(seed + 1))]
            for channel, value in writes:
                allowed.setdefault((task, channel), []).append(value)
            await self.api.put_writes(self.fenced(stored), writes, task)

        return write

    async def check(self, thread: str, source: str | None = None) -> int:
        """Every visible checkpoint of ``thread`` reads whole (through ``list``, and the
        latest through ``get_tuple`` too); returns how many are visible."""
        allowed = self.allowed[source or thread]
        config = {"configurable": {"thread_id": thread}}
        listed = await self.api.list(config)
        latest = await self.api.get_tuple(config)
        for found in [*listed, *([latest] if latest else [])]:
            values, writes = allowed[found.config["configurable"]["checkpoint_id"]]
            for channel, value in found.checkpoint["channel_values"].items():
                assert value in values[channel], "stitched or foreign value"
            assert set(found.checkpoint["channel_values"]) == set(values)
            for task, channel, value in found.pending_writes:
                assert value in writes[(task, channel)], "stitched or foreign write"
        return len(listed)


@dataclass
class Scenario:
    thread: str
    attempt: Callable[[], Awaitable[Any]]
    retry: Callable[[], Awaitable[Any]]
    visible: int  # checkpoints of the checked thread once the retry is done
    checked: str  # the thread whose result is checked (the copy for copy_thread)


async def scenario(world: World, name: str, other_value: bool) -> Scenario:
    """Seed a fresh thread (3 checkpoints with writes, the first two of a doomed run);
    ``*_fenced``: every write with a ``thread_owner`` (its first put takes the lease)."""
    thread = f"{name}-{next(_ids)}"
    if name.endswith("_fenced"):
        world.owner, name = f"owner-{thread}", name.removesuffix("_fenced")
    for step in range(1, 4):
        await world.prepare_put(thread, step, f"doomed-{thread}" if step < 3 else "kept")()
        await world.prepare_writes(thread, "task")(step * 10)
    api = world.api
    if name == "put":
        put = world.prepare_put(thread, 4)
        return Scenario(thread, put, lambda: put(400 if other_value else 4), 4, thread)
    if name == "put_writes":
        write = world.prepare_writes(thread, "retry")
        return Scenario(
            thread, lambda: write(99), lambda: write(990 if other_value else 99), 3, thread
        )
    if name == "copy_thread":
        target = f"{thread}-copy"
        world.allowed[target] = world.allowed[thread]
        copy = lambda: api.copy_thread(thread, target)  # noqa: E731
        return Scenario(thread, copy, copy, 3, target)
    if name == "prune":
        prune = lambda: api.prune([thread], strategy="keep_latest")  # noqa: E731
        return Scenario(thread, prune, prune, 1, thread)
    if name.startswith("sweep"):
        await maybe_await(
            api.raw(CHECKPOINTS).update_many(
                {"thread_id": thread}, {"$set": {"created_at": datetime(2000, 1, 1)}}
            )
        )
        strategy = "keep_latest" if name == "sweep_keep_latest" else "delete"
        expire = lambda: sweep(api, strategy)  # noqa: E731
        return Scenario(thread, expire, expire, int(strategy == "keep_latest"), thread)
    delete = lambda: api.delete_for_runs([f"doomed-{thread}"])  # noqa: E731
    return Scenario(thread, delete, delete, 1, thread)


async def sweep(api: Api, strategy: str) -> Any:
    """The retention sweep with a one-day ``ttl``, on the harness's saver (created without
    one, so no automatic sweep runs in the other scenarios)."""
    operation = maintenance.sweep_expired(
        api.saver.memory.forget, timedelta(days=1).total_seconds(), strategy=strategy
    )
    return await maybe_await(
        api.saver._arun(operation) if api.is_async else api.saver._run(operation)
    )


def fault_plan(faults: Faults) -> list[Fault]:
    """Every call ``faults`` recorded fails before it is sent and after it is applied;
    ordered bulk writes are also cut after every k of their requests. An unordered one
    (copy_thread's) holds independent upserts, so where it is cut only changes how many
    landed: it is cut after the first, half and all but one of them."""
    plan = []
    for number, (_, method, size) in enumerate(faults.calls):
        plan += [Fault(number, "before"), Fault(number, "after")]
        if method == "bulk_write":
            every = number not in faults.unordered
            cuts = range(1, size) if every else sorted({1, size // 2, size - 1} - {0})
            plan += [Fault(number, "cut", k) for k in cuts]
    return plan


async def check_every_fault(saver: Any, name: str) -> int:
    """Run the harness for operation ``name``; returns the number of cases run
    (faults × retry outcomes)."""
    world = World(saver)
    probe = await scenario(world, name, other_value=False)
    faults = Faults(saver.collections)
    try:
        await probe.attempt()  # a clean run, to learn the calls
    finally:
        faults.restore()
    plan = fault_plan(faults)
    assert plan
    outcomes = (False, True) if name.removesuffix("_fenced") in WRITING else (False,)
    for fault, other_value in itertools.product(plan, outcomes):
        world = World(saver)
        case = await scenario(world, name, other_value)
        faults = Faults(saver.collections)
        faults.arm(fault)
        try:
            await case.attempt()
        except AutoReconnect:
            pass
        finally:
            faults.restore()
        assert faults.fired, fault
        for thread in {case.thread, case.checked}:  # whole or invisible, nothing stitched
            await world.check(thread, source=case.thread)
        try:
            await case.retry()
        except ConflictingValueError:
            # The first attempt stored its value: another one under that version is
            # refused, changing nothing readable; the first value again completes the put.
            assert name in ("put", "put_fenced") and other_value, fault
            await world.check(case.thread)
            await case.attempt()
        assert await world.check(case.checked, source=case.thread) == case.visible, fault
        await assert_no_orphans(world.api)  # the retry finished what the fault cut
        for thread in {case.thread, case.checked}:  # keep the database small
            await world.api.delete_thread(thread)
    return len(plan) * len(outcomes)
