"""Fault injection over every write path: each call of put, put_writes, copy_thread,
prune and delete_for_runs fails in turn (before it is sent, after the server applied
it, and for bulk writes cut after every k requests). After each failure every
checkpoint is fully readable or not visible, no value is stitched; a retry succeeds."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo.errors import AutoReconnect

from mongo_ckpt import MongoDBSaver, payload
from tests.faults import Fault, Faults

CHUNK = 32
_ids = itertools.count()


def _big(seed: int) -> bytes:
    return random.Random(seed).randbytes(3 * CHUNK)


class World:
    """Threads with known contents: ``expected[thread][checkpoint_id]`` = (values, allowed
    writes ``{(task, channel): [values]}``), registered before the write is attempted."""

    def __init__(self, saver: MongoDBSaver) -> None:
        self.saver = saver
        self.expected: dict[str, dict[str, tuple[dict, dict]]] = {}
        self.last: dict[str, dict] = {}

    def prepare_put(self, thread: str, step: int, run_id: str = "r") -> Callable[[], dict]:
        values = {"a": _big(step), "b": _big(1000)}
        versions = {"a": f"{step:08}", "b": f"{1:08}"}
        new = versions if thread not in self.last else {"a": versions["a"]}
        checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
        config = self.last.get(thread) or generate_config(thread)
        self.expected.setdefault(thread, {})[checkpoint["id"]] = (values, {})

        def put() -> dict:
            stored = self.saver.put(config, checkpoint, generate_metadata(run_id=run_id), new)
            self.last[thread] = stored
            return stored

        return put

    def prepare_writes(self, thread: str, seed: int, task: str) -> Callable[[], None]:
        stored = self.last[thread]
        writes = [("w", _big(seed)), ("__error__", _big(seed + 1))]
        allowed = self.expected[thread][stored["configurable"]["checkpoint_id"]][1]
        for channel, value in writes:
            allowed.setdefault((task, channel), []).append(value)
        return lambda: self.saver.put_writes(stored, writes, task)

    def check(self, thread: str, source: str | None = None) -> int:
        """Every visible checkpoint of ``thread`` reads whole; returns how many are visible."""
        expected = self.expected[source or thread]
        listed = list(self.saver.list({"configurable": {"thread_id": thread}}))
        for item in listed:
            found = self.saver.get_tuple(item.config)
            values, allowed = expected[item.config["configurable"]["checkpoint_id"]]
            assert found.checkpoint["channel_values"] == values
            for task, channel, value in found.pending_writes:
                assert value in allowed[(task, channel)], "stitched or foreign write"
        return len(listed)


def _fault_plan(calls: list[tuple[str, str, int]]) -> list[Fault]:
    plan = []
    for number, (_, method, size) in enumerate(calls):
        plan += [Fault(number, "before"), Fault(number, "after")]
        if method == "bulk_write":
            plan += [Fault(number, "cut", k) for k in range(1, size)]
    return plan


OPERATIONS = ["put", "put_writes", "copy_thread", "prune", "delete_for_runs"]


def _scenario(world: World, name: str) -> tuple[str, Callable[[], Any], Callable[[], None]]:
    """Seed a fresh thread; return (thread, the operation, the check after a retry)."""
    thread = f"{name}-{next(_ids)}"
    for step in range(1, 4):
        world.prepare_put(thread, step, run_id=f"doomed-{thread}" if step < 3 else "kept")()
        world.prepare_writes(thread, step * 10, "task")()
    saver = world.saver
    if name == "put":
        return thread, world.prepare_put(thread, 4), lambda: _eq(world.check(thread), 4)
    if name == "put_writes":
        operation = world.prepare_writes(thread, 99, "retry")
        return thread, operation, lambda: _eq(world.check(thread), 3)
    if name == "copy_thread":
        target = f"{thread}-copy"
        return (
            thread,
            lambda: saver.copy_thread(thread, target),
            lambda: _eq(world.check(target, source=thread), 3),
        )
    if name == "prune":
        return (
            thread,
            lambda: saver.prune([thread], strategy="keep_latest"),
            lambda: _eq(world.check(thread), 1),
        )
    return (
        thread,
        lambda: saver.delete_for_runs([f"doomed-{thread}"]),
        lambda: _eq(world.check(thread), 1),
    )


def _eq(actual: int, expected: int) -> None:
    assert actual == expected


CASES: dict[str, int] = {}


@pytest.mark.parametrize("name", OPERATIONS)
def test_every_cut_point_leaves_whole_or_invisible_checkpoints(
    saver: MongoDBSaver, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    world = World(saver)
    _, operation, _ = _scenario(world, name)
    faults = Faults(saver.collections)
    faults.arm(None)
    operation()  # a clean run, to learn the calls
    faults.restore()
    plan = _fault_plan(faults.calls)
    assert plan
    for fault in plan:
        world = World(saver)
        thread, operation, after_retry = _scenario(world, name)
        faults = Faults(saver.collections)
        faults.arm(fault)
        try:
            operation()
        except AutoReconnect:
            pass
        finally:
            faults.restore()
        assert faults.fired, fault
        world.check(thread)  # whole or invisible, nothing stitched
        if name == "copy_thread":
            world.check(f"{thread}-copy", source=thread)
        operation()  # the retry
        after_retry()
    CASES[name] = len(plan)
    print(f"{name}: {len(plan)} fault cases over {len(faults.calls)} calls")
