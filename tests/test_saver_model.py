"""Model-based test: the saver against ``InMemorySaver`` fed the same operations.

A Hypothesis state machine drives a real LangGraph graph (an ``add_messages`` list
channel, so list deltas are exercised, and a counter) through a ``Tee`` checkpointer:
reads come from the ``MongoDBSaver`` under test, and every ``put``/``put_writes`` that
it acknowledges is also given to a reference ``InMemorySaver`` (extended below with
``copy_thread``, ``prune``, ``delete_for_runs`` and the retention sweep, which it
lacks). The rules are what a production deployment does: graph turns, forks with
``update_state`` and new input at an old checkpoint, the same ``put``/``put_writes``
again, the same ``put`` again with a different value, a thread's documents restored
under new ``_id``s (an export restored, a second migration), a new saver instance (cold
caches), turns taken over by another live instance with its own memory (a second worker
behind a load balancer), a failover to a primary without the client-level ``bulkWrite``
(wire), ``prune``, ``delete_for_runs``, ``copy_thread``, ``delete_thread``, the
retention sweep from another instance whose clock is off, and a call cut at a
random step (then sent again, as a client does after a lost reply).

After every rule, every stored checkpoint of every thread reads back equal to the
reference's, so does the latest as each live instance reads it, and no checkpoint is
visible that the reference does not hold; an
operation that raises a documented error changes nothing.

Default tier: a short run on mock, the same runs every time. Exhaustive tier (``--full``):
long runs on mock and wire, drawn anew each time.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Annotated, Any

import pytest
from bson import ObjectId
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pymongo.errors import AutoReconnect
from typing_extensions import TypedDict

import mongo_ckpt
from mongo_ckpt import MongoDBSaver
from mongo_ckpt.clock import server_now
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.payload import COMPRESS_FROM
from tests.backends import failing_bulk_write, sync_client
from tests.clock_skew import skewed_client_clock
from tests.faults import CutFaults, Fault
from tests.model_runs import run_model
from tests.prose import prose
from tests.saver_support import stop_compressing

THREADS = ("t0", "t1", "t2")
# What one test's runs checked: states (one after every rule) and checkpoints compared.
CHECKED = {"states": 0, "checkpoints": 0}
TTL = 3600.0
CLOCK_OFFSETS = [timedelta(hours=-2), timedelta(minutes=-11), timedelta(0),
                 timedelta(minutes=11), timedelta(hours=2)]
# Errors a put may raise by contract, having stored nothing readable.
DOCUMENTED = tuple(
    getattr(mongo_ckpt, name)
    for name in ("ConflictingValueError", "StaleParentError")
    if hasattr(mongo_ckpt, name)
)


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def _builder() -> StateGraph:
    def reply(state: State) -> dict[str, Any]:
        count = len(state.get("messages", []))
        return {"messages": [AIMessage(f"reply to {count}", id=f"ai-{uuid.uuid4().hex}")]}

    def tally(state: State) -> dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    builder = StateGraph(State)
    builder.add_node("reply", reply)
    builder.add_node("tally", tally)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "tally")
    builder.add_edge("tally", END)
    return builder


class Reference(InMemorySaver):
    """``InMemorySaver`` with the maintenance operations it does not implement, as the
    base class documents them (no DeltaChannels here: no ancestors need keeping)."""

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        del self.storage[thread_id][ns][checkpoint_id]
        self.writes.pop((thread_id, ns, checkpoint_id), None)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            for ns, checkpoints in list(self.storage.get(thread_id, {}).items()):
                latest = max(checkpoints, default=None)
                for checkpoint_id in [c for c in checkpoints if c != latest]:
                    self._drop(thread_id, ns, checkpoint_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        for thread_id, namespaces in list(self.storage.items()):
            for ns, checkpoints in list(namespaces.items()):
                for checkpoint_id, (_, metadata, _) in list(checkpoints.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in runs:
                        self._drop(thread_id, ns, checkpoint_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        for ns, checkpoints in self.storage.get(source_thread_id, {}).items():
            self.storage[target_thread_id][ns].update(copy.deepcopy(checkpoints))
        for (thread_id, *rest), writes in list(self.writes.items()):
            if thread_id == source_thread_id:
                self.writes[(target_thread_id, *rest)] = copy.deepcopy(writes)  # type: ignore[index]
        for (thread_id, *rest), blob in list(self.blobs.items()):
            if thread_id == source_thread_id:
                self.blobs[(target_thread_id, *rest)] = blob  # type: ignore[index]


class Tee(BaseCheckpointSaver[str]):
    """The graph's checkpointer: reads from the saver under test, writes to it and, once
    it acknowledged them, to the reference."""

    def __init__(self, machine: SaverModel) -> None:
        super().__init__()
        self.machine = machine

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.machine.saver.get_next_version(current, channel)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.machine.saver.get_tuple(config)

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return self.machine.saver.list(config, **kwargs)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args = copy.deepcopy((config, checkpoint, metadata, new_versions))
        result = self.machine.send("put", args)
        self.machine.last_put = args
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args = copy.deepcopy((config, list(writes), task_id, task_path))
        self.machine.send("put_writes", args)
        self.machine.last_writes = args


class SaverModel(RuleBasedStateMachine):
    backend = "mock"

    def __init__(self) -> None:
        super().__init__()
        self.client = sync_client(self.backend)
        self.db_name = f"model_{uuid.uuid4().hex[:12]}"
        self.saver = self._new_saver()
        # Another live instance on the same database, with its own memory (a second worker
        # behind a load balancer): ``switch_worker`` makes it the one the graph runs on.
        self.peer = self._new_saver()
        self.reference = Reference()
        self.graph = _builder().compile(checkpointer=Tee(self))
        self.last_put: tuple[Any, ...] | None = None
        self.last_writes: tuple[Any, ...] | None = None
        self.fault: Fault | None = None
        self.sending = threading.RLock()
        self.runs: list[str] = []
        self.copies = 0
        self.turns = 0
        self.steps: list[str] = []

    def _new_saver(self) -> MongoDBSaver:
        return MongoDBSaver(self.client, self.db_name)

    def teardown(self) -> None:
        self.client.drop_database(self.db_name)
        self.client.close()

    # -- sending a call to both savers -----------------------------------------

    def send(self, method: str, args: tuple[Any, ...]) -> Any:
        """``method(*args)`` on the saver (cut once if a fault is armed, then sent again
        as after a lost reply), then on the reference. One call at a time: LangGraph writes
        from several worker threads, and a fault must cut only the call it was armed for."""
        with self.sending:
            return self._send(method, args)

    def _send(self, method: str, args: tuple[Any, ...]) -> Any:
        fault, self.fault = self.fault, None
        if fault is not None:
            faults = CutFaults(self.saver.collections)
            faults.arm(fault)
            try:
                getattr(self.saver, method)(*copy.deepcopy(args))
            except AutoReconnect:
                self.steps.append(f"  {method} cut at call {fault.call} ({fault.mode})")
            finally:
                faults.restore()
            self.check_readable()
        result = getattr(self.saver, method)(*copy.deepcopy(args))
        getattr(self.reference, method)(*copy.deepcopy(args))
        return result

    # -- rules -----------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.saver.setup()
        self.peer.setup()

    @rule()
    def switch_worker(self) -> None:
        self.steps.append("switch worker")
        self.saver, self.peer = self.peer, self.saver

    @rule(thread=st.sampled_from(THREADS))
    def turn(self, thread: str) -> None:
        self.steps.append(f"turn {thread}")
        self._invoke({"messages": [HumanMessage(f"u{self.turns}", id=f"u{self.turns}")]},
                     {"configurable": {"thread_id": thread}})

    @rule(thread=st.sampled_from(THREADS))
    def long_turn(self, thread: str) -> None:
        """A turn with a long message (a pasted document): its values and writes are over
        ``payload.COMPRESS_FROM``, stored compressed by an instance that compresses."""
        self.steps.append(f"long turn {thread}")
        text = prose(self.turns, 3 * COMPRESS_FROM)
        self._invoke({"messages": [HumanMessage(text, id=f"u{self.turns}")]},
                     {"configurable": {"thread_id": thread}})

    @rule()
    def instance_not_compressing(self) -> None:
        """The running instance stores values uncompressed from now on (as one under
        ``EncryptedSerializer`` does) beside the other instance, which compresses."""
        self.steps.append("instance not compressing")
        stop_compressing(self.saver)

    @precondition(lambda self: self.saver.uses_client_bulk_write)
    @rule(thread=st.sampled_from(THREADS))
    def failover(self, thread: str) -> None:
        """A turn after a failover to a primary of an older release, which has no
        client-level ``bulkWrite``: the saver goes on in two commands per put."""
        self.steps.append(f"turn {thread} on a primary without bulkWrite")
        with failing_bulk_write(self.client, 59):
            self.turn(thread)
        assert not self.saver.uses_client_bulk_write

    def _invoke(self, input: Any, config: RunnableConfig) -> None:
        self.turns += 1
        run_id = str(uuid.uuid4())
        self.runs.append(run_id)
        self.graph.invoke(input, {**config, "metadata": {"run_id": run_id}})

    def _history(self, thread: str) -> list[CheckpointTuple]:
        return list(self.saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))

    @rule(thread=st.sampled_from(THREADS), data=st.data())
    def fork_with_update_state(self, thread: str, data: st.DataObject) -> None:
        history = self._history(thread)
        if not history:
            return
        at = data.draw(st.sampled_from(history), label="fork at").config
        self.steps.append(f"update_state {thread} at {at['configurable']['checkpoint_id']}")
        message = HumanMessage(f"edit {self.turns}", id=f"edit-{self.turns}")
        self.turns += 1
        self.graph.update_state(at, {"messages": [message]})

    @rule(thread=st.sampled_from(THREADS), data=st.data())
    def new_input_at_old_checkpoint(self, thread: str, data: st.DataObject) -> None:
        history = self._history(thread)
        if not history:
            return
        at = data.draw(st.sampled_from(history), label="replay from").config
        self.steps.append(f"input {thread} at {at['configurable']['checkpoint_id']}")
        self._invoke({"messages": [HumanMessage(f"again {self.turns}")]}, at)

    @precondition(lambda self: self.last_put is not None)
    @rule()
    def same_put_again(self) -> None:
        assert self.last_put is not None
        self.steps.append("same put again")
        self._again("put", self.last_put)

    @precondition(lambda self: self.last_writes is not None)
    @rule()
    def same_put_writes_again(self) -> None:
        assert self.last_writes is not None
        self.steps.append("same put_writes again")
        self._again("put_writes", self.last_writes)

    def _again(self, method: str, args: tuple[Any, ...]) -> None:
        """The same call again: stored as before, or (its parent deleted since, by
        maintenance) refused with a documented error that changes nothing."""
        thread = args[0]["configurable"]["thread_id"]
        before = self._readable(thread)
        try:
            self.send(method, args)
        except DOCUMENTED as error:
            self.steps.append(f"  refused: {type(error).__name__}")
            assert self._readable(thread) == before, "a refused call changed what is stored"

    @precondition(lambda self: self.last_put is not None)
    @rule()
    def same_put_with_a_different_value(self) -> None:
        assert self.last_put is not None
        config, checkpoint, metadata, new_versions = copy.deepcopy(self.last_put)
        values = checkpoint["channel_values"]
        changed = [ch for ch in new_versions if isinstance(values.get(ch), list) and values[ch]]
        if not changed:
            return
        self.steps.append(f"same put, different value of {changed[0]}")
        values[changed[0]] = [*values[changed[0]][:-1], HumanMessage("other", id="other")]
        key = (config["configurable"]["thread_id"], checkpoint["id"])
        before = self._readable(key[0])
        try:
            self.saver.put(config, checkpoint, metadata, new_versions)
        except DOCUMENTED as error:
            self.steps.append(f"  refused: {type(error).__name__}")
            assert self._readable(key[0]) == before, "a refused put changed what is stored"
            return
        # Accepted (nothing stored under that version any more, e.g. the thread was swept):
        # it must read back as the reference stores it.
        self.steps.append("  accepted")
        self.reference.put(config, checkpoint, metadata, new_versions)

    @rule(thread=st.sampled_from(THREADS))
    def restore_under_new_ids(self, thread: str) -> None:
        """The thread's documents stored again under new ``_id``s, as a restored export or a
        second migration stores them, while both savers' memories name the old ones."""
        self.steps.append(f"restore {thread} under new _ids")
        with self.sending:
            for name in (CHECKPOINTS, BLOBS, WRITES):
                collection = self.saver.collections[name]
                docs = list(collection.find({"thread_id": thread}))
                if docs:
                    collection.delete_many({"_id": {"$in": [d["_id"] for d in docs]}})
                    collection.insert_many([{**d, "_id": ObjectId()} for d in docs])

    @rule()
    def new_saver_instance(self) -> None:
        self.steps.append("new saver instance")
        self.saver = self._new_saver()

    @rule(call=st.integers(0, 5), mode=st.sampled_from(["before", "cut", "after"]),
          k=st.integers(1, 3))
    def cut_the_next_write(self, call: int, mode: str, k: int) -> None:
        self.steps.append(f"arm {mode} at call {call} (k={k})")
        self.fault = Fault(call, mode, k)

    @rule(thread=st.sampled_from(THREADS))
    def prune_keep_latest(self, thread: str) -> None:
        self.steps.append(f"prune {thread}")
        self._maintain("prune", [thread])

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data())
    def delete_for_runs(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(self.runs[-6:]), label="run")
        self.steps.append(f"delete_for_runs {run}")
        self._maintain("delete_for_runs", [run])

    @rule(thread=st.sampled_from(THREADS))
    def copy_to_a_new_thread(self, thread: str) -> None:
        target = f"copy{self.copies}"
        self.copies += 1
        self.steps.append(f"copy_thread {thread} -> {target}")
        self._maintain("copy_thread", thread, target)

    @rule(thread=st.sampled_from(THREADS))
    def delete_thread(self, thread: str) -> None:
        self.steps.append(f"delete_thread {thread}")
        self._maintain("delete_thread", thread)

    def _maintain(self, method: str, *args: Any) -> None:
        """``method`` on the saver (cut first if a fault is armed, then called again) and
        on the reference."""
        fault, self.fault = self.fault, None
        if fault is not None:
            faults = CutFaults(self.saver.collections)
            faults.arm(fault)
            try:
                getattr(self.saver, method)(*args)
            except AutoReconnect:
                self.steps.append(f"  {method} cut at call {fault.call} ({fault.mode})")
            finally:
                faults.restore()
            self.check_readable()
        getattr(self.saver, method)(*args)
        getattr(self.reference, method)(*args)

    @rule(thread=st.sampled_from(THREADS), offset=st.sampled_from(CLOCK_OFFSETS),
          idle=st.booleans())
    def retention_sweep_from_a_skewed_client(
        self, thread: str, offset: timedelta, idle: bool
    ) -> None:
        """Another instance (ttl 1 h, its clock ``offset`` off) sweeps; ``thread`` was idle
        for 2 h by the server's clock when ``idle``, else every thread is fresh."""
        self.steps.append(f"sweep, client clock {offset}, {thread} idle: {idle}")
        checkpoints = self.saver.collections["checkpoints"]
        if idle:
            now = self.saver._run(server_now())
            checkpoints.update_many(
                {"thread_id": thread}, {"$set": {"created_at": now - timedelta(hours=2)}}
            )
        stored = checkpoints.count_documents({"thread_id": thread})  # pending ones too
        sweeper = MongoDBSaver(self.client, self.db_name, ttl=TTL)
        with skewed_client_clock(offset):
            swept = set(sweeper.sweep_expired())
        expected = {thread} if idle and stored else set()
        assert swept == expected, f"swept {swept}, expected {expected}"
        for swept_thread in swept:
            self.reference.delete_thread(swept_thread)

    # -- the invariant ---------------------------------------------------------

    def _threads(self) -> list[str]:
        stored = self.saver.collections["checkpoints"].distinct("thread_id")
        return sorted(set(stored) | set(self.reference.storage))

    def _readable(self, thread: str) -> dict[tuple[str, str], Any]:
        return {
            (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]):
                _comparable(t)
            for t in self.saver.list({"configurable": {"thread_id": thread}})
        }

    def check_readable(self) -> None:
        """Every visible checkpoint reads back whole (after a cut, before the retry)."""
        for thread in self._threads():
            self._readable(thread)

    @invariant()
    def every_checkpoint_reads_back_as_the_reference(self) -> None:
        CHECKED["states"] += 1
        for thread in self._threads():
            ours = self._readable(thread)
            CHECKED["checkpoints"] += len(ours)
            theirs = {
                (t.config["configurable"]["checkpoint_ns"],
                 t.config["configurable"]["checkpoint_id"]): _comparable(t)
                for t in self.reference.list({"configurable": {"thread_id": thread}})
            }
            assert ours.keys() == theirs.keys(), (
                f"thread {thread}: stored {sorted(ours)} != reference {sorted(theirs)}\n"
                + "\n".join(self.steps)
            )
            for key in ours:
                assert ours[key] == theirs[key], (
                    f"thread {thread} checkpoint {key} differs\n" + "\n".join(self.steps)
                )
            # The latest, as each live instance reads it with what it remembers.
            config = {"configurable": {"thread_id": thread}}
            latest = self.reference.get_tuple(config)
            for instance in (self.saver, self.peer):
                found = instance.get_tuple(config)
                assert (found and _comparable(found)) == (latest and _comparable(latest)), (
                    f"thread {thread}: another latest checkpoint\n" + "\n".join(self.steps)
                )


def _comparable(item: CheckpointTuple) -> Any:
    checkpoint = dict(item.checkpoint)
    parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (checkpoint, item.metadata, parent, sorted(item.pending_writes, key=repr))


def _run(backend: str, examples: int, steps: int, derandomize: bool = False) -> None:
    CHECKED.update(states=0, checkpoints=0)
    run_model(SaverModel, backend, examples, steps, derandomize)
    print(f"\nmodel on {backend}: {CHECKED['states']} states checked, "
          f"{CHECKED['checkpoints']} checkpoints compared with InMemorySaver")


def test_saver_matches_in_memory_saver() -> None:
    _run("mock", examples=40, steps=30, derandomize=True)


@pytest.mark.exhaustive
@pytest.mark.parametrize("backend", ["mock", "wire"])
def test_saver_matches_in_memory_saver_long(backend: str) -> None:
    _run(backend, examples=100 if backend == "mock" else 40, steps=50)
