"""Fault injection over the store's writes, sync and async: each collection call of a
mixed ``batch``, a ``put``, a ``delete`` and a batch of puts sent insert-first (``ingest``:
new items, then a stored one, whose refused insert sends the rest as upserts) fails in
turn (before it is sent, after the server applied it, and the batch's ordered bulk write
cut after every k requests). After the failure every item holds its value from before or
from after the call, never anything else; a retry, with the same values or with others,
ends in exactly the state ``InMemoryStore`` reaches."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from langgraph.store.base import GetOp, Op, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from pymongo.errors import AutoReconnect

from mongo_ckpt.store import documents
from tests.fault_harness import fault_plan
from tests.faults import Faults
from tests.saver_support import AwaitableMethods
from tests.store_support import StoreApi

_ids = itertools.count()
KEYS = [f"k{i}" for i in range(5)]


def seeded(ns: tuple[str, ...]) -> list[Op]:
    return [PutOp(ns, key, {"v": i, "nested": {"key": key}}) for i, key in enumerate(KEYS)]


def operation(name: str, ns: tuple[str, ...], seed: int) -> list[Op]:
    """The ops of one store call; ``seed`` varies the values written."""
    if name == "put":
        return [PutOp(ns, "k0", {"v": seed, "big": "x" * 1000})]
    if name == "delete":
        return [PutOp(ns, "k1", None)]
    if name == "ingest":  # inserted until k2, which is stored: the rest as upserts
        new = [PutOp(ns, f"n{i}", {"v": seed, "i": i}) for i in range(documents.INSERTS_FROM)]
        return [
            *new,
            PutOp(ns, "k2", {"v": seed}),
            PutOp(ns, "n9", {"v": seed}),
            PutOp(ns, "k4", None),
        ]
    return [
        GetOp(ns, "k2"),
        PutOp(ns, "k0", {"v": seed}),
        PutOp(ns, "k1", None),
        SearchOp(ns, filter={"v": {"$gte": 0}}, limit=10),
        PutOp(ns, "new", {"v": seed, "list": [seed, {"$odd": "key"}]}),
        PutOp(ns, "k3", {"v": -seed}),
        PutOp(ns, "k4", None),
    ]


async def contents(api: AwaitableMethods, ns: tuple[str, ...]) -> dict[str, Any]:
    return {item.key: item.value for item in await api.search(ns, limit=100)}


def reference(*batches: list[Op]) -> dict[str, Any]:
    """What ``InMemoryStore`` holds in the case's namespace after ``batches``."""
    store = InMemoryStore()
    for ops in batches:
        store.batch(ops)
    ns = next(op.namespace for op in batches[0])
    return {item.key: item.value for item in store.search(ns, limit=100)}


async def check_every_fault(store: Any, name: str) -> int:
    """Run every fault of ``name`` with both retries; returns the number of cases."""
    api = AwaitableMethods(store)
    await api.setup()
    probe = ("probe", str(next(_ids)))
    await api.batch(seeded(probe))
    faults = Faults(store.collections)
    try:
        await api.batch(operation(name, probe, 1))
    finally:
        faults.restore()
    plan = fault_plan(faults)
    for fault, retry_seed in itertools.product(plan, (1, 2)):
        ns = ("case", str(next(_ids)))
        await api.batch(seeded(ns))
        before, after = reference(seeded(ns)), reference(seeded(ns), operation(name, ns, 1))
        faults = Faults(store.collections)
        faults.arm(fault)
        try:
            await api.batch(operation(name, ns, 1))
        except AutoReconnect:
            pass
        finally:
            faults.restore()
        assert faults.fired, fault
        state = await contents(api, ns)
        for key in {*before, *after}:
            assert state.get(key) in (before.get(key), after.get(key)), (fault, key)
        await api.batch(operation(name, ns, retry_seed))
        final = reference(seeded(ns), operation(name, ns, 1), operation(name, ns, retry_seed))
        assert await contents(api, ns) == final, fault
    return len(plan) * 2


STORE_OPERATIONS = ["batch", "put", "delete", "ingest"]


@pytest.mark.parametrize("name", STORE_OPERATIONS)
async def test_store_faults(store_api: StoreApi, name: str) -> None:
    cases = await check_every_fault(store_api.store, name)
    print(f"{type(store_api.store).__name__} {name}: {cases} cases")
