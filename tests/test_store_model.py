"""Model-based test: the store against LangGraph's ``InMemoryStore`` fed the same writes.

A Hypothesis state machine runs what a deployment of the store does, on one collection:
batches of puts and deletes (single puts, small batches in update pipelines, batches sent
insert-first that meet stored items, several writes to one key, puts with a TTL), the
same batch again, two live instances taking turns (a second worker behind a load
balancer), a new instance (cold), a client clock minutes off, listings (which settle the
namespace registry), the TTL sweep, a call cut at a random step (before it is sent, in
the middle of its bulk write, or with its reply lost) and then sent again with the same
values or with others, and the other instance's batch landing between the calls of an
operation.

After a cut and before the retry, every key holds its value from before or from after
the batch. After every rule, every item reads back (one search over every namespace,
one batch of gets, through both instances) as the reference holds it, ``created_at`` is
never after ``updated_at``, and ``list_namespaces`` (whole, and under a prefix to depth
2) lists exactly the namespaces that hold items.

Default tier: a short run on mock. Exhaustive tier (``--full``): long runs on mock and
wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from langgraph.store.base import GetOp, Op, PutOp
from langgraph.store.memory import InMemoryStore
from pymongo.errors import AutoReconnect

from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client
from tests.clock_skew import skewed_client_clock
from tests.faults import CutFaults, Fault, Interleave
from tests.model_runs import run_model

NAMESPACES = [
    ("users", "ada", "memories"),
    ("users", "ada", "prefs"),
    ("users", "bob", "memories"),
    ("teams", "x"),
]
KEYS = [f"k{i}" for i in range(12)]
PEER_KEYS = ["p0", "p1"]  # the other instance's, when it lands inside an operation
TTL_MINUTES = 24 * 60.0  # never reached within a run, even by a clock 5 minutes ahead
CLOCK_OFFSETS = [timedelta(minutes=-5), timedelta(seconds=-90), timedelta(0),
                 timedelta(seconds=90), timedelta(minutes=5)]
# (namespace, key, deleted, with a TTL)
WRITE = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KEYS), st.booleans(),
                  st.booleans())
BATCH = st.lists(WRITE, min_size=1, max_size=4)
# Batches sent insert-first: puts only, at least documents.INSERTS_FROM of them.
INGEST = st.lists(
    st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KEYS), st.just(False), st.booleans()),
    min_size=8,
    max_size=16,
)
LISTINGS = st.sampled_from([(None, None), (("users",), 2), (("users", "ada"), None),
                            (("teams",), 1)])
CHECKED = {"states": 0, "items": 0, "many puts": 0, "cut": 0, "landed": 0}

Key = tuple[tuple[str, ...], str]


class StoreModel(RuleBasedStateMachine):
    backend = "mock"

    def __init__(self) -> None:
        super().__init__()
        self.client = sync_client(self.backend)
        self.db_name = f"store_model_{uuid.uuid4().hex[:12]}"
        self.store, self.peer = MongoDBStore(self.client, self.db_name), MongoDBStore(
            self.client, self.db_name
        )
        self.offset, self.peer_offset = timedelta(0), timedelta(0)
        self.reference = InMemoryStore()
        self.fault: Fault | None = None
        self.landing: list[tuple[Any, ...]] | None = None  # the peer's batch, to interleave
        self.last: list[Op] | None = None
        self.values = 0
        self.steps: list[str] = []

    def teardown(self) -> None:
        self.client.drop_database(self.db_name)
        self.client.close()

    # -- helpers ---------------------------------------------------------------

    def _ops(self, writes: list[tuple[Any, ...]]) -> list[Op]:
        """The batch's ops, each put with a value of its own."""
        ops: list[Op] = []
        for ns, key, deleted, ttl in writes:
            if deleted:
                ops.append(PutOp(ns, key, None))
                continue
            self.values += 1
            value = {"v": self.values, "ns": list(ns), "$odd": {"a.b": key}}
            ops.append(PutOp(ns, key, value, ttl=TTL_MINUTES if ttl else None))
        return ops

    def _apply_to_reference(self, ops: list[Op]) -> None:
        """The ops on the reference, without their TTLs (never reached within a run)."""
        self.reference.batch([PutOp(op.namespace, op.key, op.value) for op in ops])

    def _held(self) -> dict[Key, Any]:
        return {
            (item.namespace, item.key): item.value
            for item in self.reference.search((), limit=10_000)
        }

    @contextmanager
    def _clock(self) -> Iterator[None]:
        with skewed_client_clock(self.offset):
            yield

    def _call(self, action: Callable[[], Any], name: str) -> tuple[Any, bool]:
        """``action`` on the current instance, with the armed fault or landing batch; returns
        its result and whether it was cut (``AutoReconnect``)."""
        fault, self.fault = self.fault, None
        landing, self.landing = self.landing, None
        wrapper: CutFaults | Interleave | None = None
        if fault is not None:
            wrapper = CutFaults(self.store.collections)
            wrapper.arm(fault)
        elif landing is not None:
            wrapper = Interleave(self.store.collections, self._lander(landing))
        try:
            with self._clock():
                return action(), False
        except AutoReconnect:
            CHECKED["cut"] += 1
            assert fault is not None
            self.steps.append(f"  {name} cut at call {fault.call} ({fault.mode})")
            return None, True
        finally:
            if wrapper is not None:
                wrapper.restore()

    def _lander(self, writes: list[tuple[Any, ...]]) -> Callable[[], None]:
        """The peer's batch, run once, before the second call of the operation."""
        done: list[bool] = []

        def land() -> None:
            if done:
                return
            done.append(True)
            CHECKED["landed"] += 1
            self.steps.append("  the other instance's batch lands")
            ops = self._ops(writes)
            with skewed_client_clock(self.peer_offset):
                self.peer.batch(ops)
            self._apply_to_reference(ops)

        return land

    # -- rules -----------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.store.setup()
        self.peer.setup()

    @rule(writes=BATCH, other_value=st.booleans())
    def write(self, writes: list[tuple[Any, ...]], other_value: bool) -> None:
        self.steps.append(f"batch {writes}")
        before = self._held()
        ops = self._ops(writes)
        CHECKED["many puts"] += sum(op.value is not None for op in ops) >= 8
        _, cut = self._call(lambda: self.store.batch(ops), "batch")
        if cut:
            self._check_between(before, ops)
            if other_value:
                self.steps.append("  sent again with other values")
                ops = self._ops(writes)
            with self._clock():
                self.store.batch(ops)
        self._apply_to_reference(ops)
        self.last = ops

    @rule(writes=INGEST, other_value=st.booleans())
    def ingest(self, writes: list[tuple[Any, ...]], other_value: bool) -> None:
        self.write(writes, other_value)

    @precondition(lambda self: self.last is not None)
    @rule()
    def the_same_batch_again(self) -> None:
        """The last batch sent again as it was (a client retrying after a lost reply)."""
        assert self.last is not None
        ops = self.last
        self.steps.append("the same batch again")
        _, cut = self._call(lambda: self.store.batch(ops), "batch")
        if cut:
            with self._clock():
                self.store.batch(ops)
        self._apply_to_reference(ops)

    @rule()
    def switch_instance(self) -> None:
        self.steps.append("switch instance")
        self.store, self.peer = self.peer, self.store
        self.offset, self.peer_offset = self.peer_offset, self.offset

    @rule()
    def new_instance(self) -> None:
        self.steps.append("new instance")
        self.store = MongoDBStore(self.client, self.db_name)
        self.store.setup()

    @rule(offset=st.sampled_from(CLOCK_OFFSETS))
    def skew_the_clock(self, offset: timedelta) -> None:
        self.steps.append(f"client clock {offset}")
        self.offset = offset

    @rule(call=st.sampled_from([0, 0, 0, 1, 2]), mode=st.sampled_from(["before", "cut", "after"]),
          k=st.integers(1, 16))
    def cut_the_next_call(self, call: int, mode: str, k: int) -> None:
        self.steps.append(f"arm {mode} at call {call} (k={k})")
        self.fault, self.landing = Fault(call, mode, k), None

    @rule(namespace=st.sampled_from(NAMESPACES), deleted=st.booleans())
    def land_the_other_instance_inside_the_next_call(
        self, namespace: tuple[str, ...], deleted: bool
    ) -> None:
        self.steps.append(f"the other instance {'deletes' if deleted else 'puts'} {namespace} next")
        self.fault = None
        self.landing = [(namespace, key, deleted, False) for key in PEER_KEYS]

    @rule(listing=LISTINGS)
    def list_namespaces(self, listing: tuple[Any, Any]) -> None:
        prefix, depth = listing
        self.steps.append(f"list_namespaces {prefix} depth {depth}")
        before = self._listed(prefix, depth)
        found, cut = self._call(
            lambda: self.store.list_namespaces(prefix=prefix, max_depth=depth), "list"
        )
        if cut:
            with self._clock():
                found = self.store.list_namespaces(prefix=prefix, max_depth=depth)
        # A batch of the other instance landing inside: either side of it.
        assert found in (before, self._listed(prefix, depth)), "\n".join(self.steps)

    @rule()
    def sweep_ttl(self) -> None:
        self.steps.append("sweep_ttl")
        swept, cut = self._call(self.store.sweep_ttl, "sweep_ttl")
        if cut:
            with self._clock():
                swept = self.store.sweep_ttl()
        assert swept == 0, "\n".join(self.steps)  # no TTL is reached within a run

    # -- checks ----------------------------------------------------------------

    def _check_between(self, before: dict[Key, Any], ops: list[Op]) -> None:
        """After a cut, before the retry: each key of the batch holds its value from before
        or after it; every other item is as it was."""
        after = dict(before)
        for op in ops:
            assert isinstance(op, PutOp)
            if op.value is None:
                after.pop((op.namespace, op.key), None)
            else:
                after[(op.namespace, op.key)] = op.value
        with self._clock():
            state = self._items(self.store)
        for key in {*before, *after, *state}:
            assert state.get(key) in (before.get(key), after.get(key)), (
                f"{key}: {state.get(key)}\n" + "\n".join(self.steps)
            )

    def _items(self, store: MongoDBStore) -> dict[Key, Any]:
        found = store.search((), limit=10_000)
        for item in found:
            assert item.created_at <= item.updated_at, (item, "\n".join(self.steps))
        return {(item.namespace, item.key): item.value for item in found}

    def _listed(self, prefix: Any, depth: Any) -> list[tuple[str, ...]]:
        """What ``InMemoryStore`` lists for the namespaces that hold an item (it also
        lists namespaces emptied by deletes)."""
        holding = InMemoryStore()
        for (ns, key), value in self._held().items():
            holding.put(ns, key, value)
        return holding.list_namespaces(prefix=prefix, max_depth=depth, limit=100)

    @invariant()
    def every_item_reads_back_as_the_reference_holds_it(self) -> None:
        CHECKED["states"] += 1
        held = self._held()
        CHECKED["items"] += len(held)
        everything = [GetOp(ns, key) for ns in NAMESPACES for key in KEYS + PEER_KEYS]
        for store, offset in ((self.store, self.offset), (self.peer, self.peer_offset)):
            with skewed_client_clock(offset):
                assert self._items(store) == held, "\n".join(self.steps)
                got = {
                    (op.namespace, op.key): item.value
                    for op, item in zip(everything, store.batch(everything))
                    if item is not None
                }
            assert got == held, "\n".join(self.steps)
        with self._clock():
            for prefix, depth in ((None, None), (("users",), 2)):
                listed = self.store.list_namespaces(prefix=prefix, max_depth=depth, limit=100)
                assert listed == self._listed(prefix, depth), "\n".join(self.steps)


def _run(backend: str, examples: int, steps: int) -> None:
    CHECKED.update(dict.fromkeys(CHECKED, 0))
    run_model(StoreModel, backend, examples, steps)
    print(f"\nstore model on {backend}: {CHECKED['states']} states checked, "
          f"{CHECKED['items']} items compared with InMemoryStore; batches of 8 puts or "
          f"more: {CHECKED['many puts']}, calls cut: {CHECKED['cut']}, the other "
          f"instance landing inside a call: {CHECKED['landed']}")


def test_store_matches_in_memory_store() -> None:
    _run("mock", examples=30, steps=30)


@pytest.mark.exhaustive
@pytest.mark.parametrize("backend", ["mock", "wire"])
def test_store_matches_in_memory_store_long(backend: str) -> None:
    _run(backend, examples=120 if backend == "mock" else 40, steps=50)
