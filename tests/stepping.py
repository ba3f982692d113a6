"""Operations run one collection call at a time, for race tests of the saver (this module
holds no tests): ``Stepper``, the maintenance calls stepped beside a put, and the thread
``Fork`` continues from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import maintenance
from mongo_ckpt.calls import Call, NextBatch, Operation, Relay
from mongo_ckpt.drivers import aexecute, execute
from tests.backends import TARGETS
from tests.saver_support import Api

Hook = Callable[[Call | NextBatch], Awaitable[None]]

MAINTENANCE: dict[str, Callable[[Any], Operation[Any]]] = {
    "prune": lambda forget: maintenance.prune(forget, ["t"], "keep_latest"),
    "delete_for_runs": lambda forget: maintenance.delete_for_runs(forget, ["old"]),
    "sweep": lambda forget: maintenance.sweep_expired(forget, 1e-6),
    "sweep_keep_latest": lambda forget: maintenance.sweep_expired(
        forget, 1e-6, strategy="keep_latest"
    ),
}


class Stepper:
    """Runs an operation one collection call at a time (``calls.Relay``: a call's error is
    thrown back into the operation)."""

    def __init__(self, api: Api, operation: Operation[Any]) -> None:
        self.api, self.relay = api, Relay(operation)
        self.done = False
        self.raised: Exception | None = None
        self.calls = 0

    async def step(self) -> bool:
        """Make the next call; ``False`` once the operation has ended."""
        if self.done:
            return False
        try:
            step = self.relay.next_step()
        except Exception as exc:  # the operation's own error: kept for the test
            self.done, self.raised = True, exc
            return False
        if step is None:
            self.done = True
            return False
        assert isinstance(step, (Call, NextBatch))
        collections = self.api.saver.collections
        try:
            if self.api.is_async:
                self.relay.returned(await aexecute(collections, step))
            else:
                self.relay.returned(execute(collections, step))
        except Exception as exc:
            self.relay.failed(exc)
        self.calls += 1
        return True

    async def finish(self) -> None:
        while await self.step():
            pass


@dataclass
class Fork:
    """Thread ``t``: c1..c4, run ``old`` for c1..c3 and ``new`` for c4. Channel ``a`` gets a
    new value at every step, ``b`` is written once by c1. The fork continues from c2."""

    parent: dict[str, Any]
    checkpoint: dict[str, Any]
    values: dict[str, Any]
    expected: dict[str, dict[str, Any]]

    @classmethod
    async def build(cls, api: Api, shares: str = "values") -> Fork:
        expected: dict[str, dict[str, Any]] = {}
        configs: list[dict[str, Any]] = []
        for step in range(1, 5):
            values = {"a": f"a{step}", "b": "b"}
            versions = {"a": f"{step:08}", "b": f"{1:08}"}
            checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
            config = configs[-1] if configs else generate_config("t")
            run = "old" if step < 4 else "new"
            new = versions if step == 1 else {"a": versions["a"]}
            configs.append(await api.put(config, checkpoint, generate_metadata(run_id=run), new))
            expected[checkpoint["id"]] = values
        if shares == "values":
            values = {"a": "a2", "b": "b", "z": "forked"}
            versions = {"a": f"{2:08}", "b": f"{1:08}", "z": f"{9:08}"}
        else:  # "d" is a DeltaChannel rebuilt from the history above the parent
            values = {"b": "b", "z": "forked"}
            versions = {"b": f"{1:08}", "z": f"{9:08}", "d": f"{3:08}"}
        checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
        # Dates are stored to the millisecond: the next one is later than these, so a sweep
        # with a ttl of a microsecond finds them idle and a checkpoint stored next recent.
        await asyncio.sleep(0.002)
        return cls(configs[1], checkpoint, values, expected)

    def put(self, api: Api) -> Operation[Any]:
        counters = {"d": [1, 1]} if "d" in self.checkpoint["channel_versions"] else {}
        metadata = generate_metadata(run_id="fork", counters_since_delta_snapshot=counters)
        return api.saver.ops.put(self.parent, self.checkpoint, metadata, {"z": f"{9:08}"})


async def step_until(stepper: Stepper, done: Any, *, or_end: bool = False) -> None:
    """Step ``stepper`` until ``done()`` (or, with ``or_end``, until it has ended)."""
    while not await done():
        if not await stepper.step():
            assert or_end, "the operation ended first"
            return


# The async drivers run the same operations on mock; the wire server and a real one run
# them with the sync driver.
STEPPED = [t for t in TARGETS if t.backend == "mock" or not t.is_async]


async def drive(
    api: Api,
    operation: Operation[Any],
    before: Hook | None = None,
    result_of: Callable[[Call | NextBatch, Any], Any] | None = None,
) -> Any:
    """Run ``operation`` call by call (``calls.Relay``): ``before`` each call is sent,
    ``result_of`` may change what a call returns."""
    relay = Relay(operation)
    while (step := relay.next_step()) is not None:
        assert isinstance(step, (Call, NextBatch))
        if before is not None:
            await before(step)
        try:
            if api.is_async:
                result = await aexecute(api.saver.collections, step)
            else:
                result = execute(api.saver.collections, step)
        except Exception as exc:
            relay.failed(exc)
            continue
        relay.returned(result if result_of is None else result_of(step, result))
    return relay.value


async def maintenance_calls(api: Api, maintenance_call: Callable[[Any], Operation[Any]]) -> int:
    """How many collection calls ``maintenance_call`` (given the saver's ``forget``) makes
    on a ``Fork`` thread alone (the thread is deleted afterwards)."""
    await Fork.build(api)
    alone = Stepper(api, maintenance_call(api.saver.memory.forget))
    await alone.finish()
    assert alone.raised is None
    await api.delete_thread("t")
    return alone.calls
