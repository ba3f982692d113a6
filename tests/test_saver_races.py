"""Races between graph writers, readers and maintenance on the same threads.

The bounded randomized race runs real graph writers, two on each thread, alongside loops
of ``prune``, ``delete_for_runs``, ``copy_thread``, the TTL sweep and readers, all on the
writers' threads: OS threads on the sync saver, tasks on the async one. A writer may
continue from a checkpoint the other writer's progress lets maintenance delete; its put
then stores its checkpoint whole or raises ``StaleParentError`` (the run ends there,
nothing half-written is left). Values are spread over several parts and carry their own
digest. While it runs, every checkpoint a reader lists reads whole or is gone;
afterwards every checkpoint reads whole, and once a last prune has run nothing is left
behind.
Leftovers of the race itself (writes stored after their checkpoint was pruned) are
younger than ``STRAY_AGE``, so that prune runs with every document counted as old.

Deterministic tests pin down the read side: a checkpoint deleted between the two calls
of ``get_tuple`` or ``list`` reads as absent, never as ``MissingValueError``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from operator import add
from typing import Annotated, Any

import pytest
from bson import ObjectId
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from mongo_ckpt import (
    AsyncMongoDBSaver,
    MissingValueError,
    MongoDBSaver,
    StaleParentError,
    maintenance,
    payload,
)
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import maybe_await
from tests.faults import Interleave, Serialized
from tests.graphs import thread
from tests.saver_support import BOTH_PUT_PATHS, Api, assert_no_orphans

CHUNK = 256  # payload.CHUNK_SIZE here: every value below spans 1 to 4 parts
SECONDS = 1.5  # how long the writers keep writing
MIN_RUNS = 4  # graph runs each writer stores (refused ones not counted), however long they take
THREADS = 2
WRITERS = 2  # per thread
SEED = 7


class State(TypedDict):
    log: Annotated[list[str], add]
    blob: dict[str, Any]


def blob(data: bytes) -> dict[str, Any]:
    return {"data": data, "sha": hashlib.sha256(data).hexdigest()}


def builder(rng: random.Random) -> StateGraph:
    """START -> work -> note -> END: ``work`` writes a new multi-part ``blob``."""

    def work(state: State) -> dict:
        data = rng.randbytes(rng.randint(1, 4 * CHUNK - 1))
        return {"blob": blob(data), "log": [f"work:{len(state['log'])}"]}

    def note(state: State) -> dict:
        return {"log": [f"note:{len(state['log'])}"]}

    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_node("note", note)
    graph.add_edge(START, "work")
    graph.add_edge("work", "note")
    graph.add_edge("note", END)
    return graph


def assert_whole(values: dict[str, Any]) -> None:
    """A checkpoint's state as the graph wrote it: no value stitched or cut short."""
    if "blob" in values:
        assert hashlib.sha256(values["blob"]["data"]).hexdigest() == values["blob"]["sha"]
    for n, entry in enumerate(values.get("log", [])):
        assert entry in (f"work:{n}", f"note:{n}", "start"), values["log"]


class Race:
    """Writers and maintenance loops on one saver; ``figures`` counts what they did."""

    def __init__(self, saver: Any, seed: int) -> None:
        self.saver, self.api = saver, Api(saver)
        self.is_async = isinstance(saver, AsyncMongoDBSaver)
        self.rng = random.Random(seed)
        self.threads = [f"w{n}" for n in range(THREADS)]
        self.finished: dict[str, list[str]] = {t: [] for t in self.threads}
        self.figures: Counter = Counter()
        self.failures: list[str] = []
        self.deadline = 0.0
        self.writers_left = THREADS * WRITERS
        self.sweeper = type(saver)(saver.client, saver.db.name, ttl=3600)
        if type(saver.client).__module__.startswith("mongomock."):
            lock = threading.Lock()
            for collections in (saver.collections, self.sweeper.collections):
                Serialized(collections, lock)

    async def call(self, name: str, *args: Any, saver: Any = None, **kwargs: Any) -> Any:
        """``saver.name(...)`` in its own OS thread (sync saver) or ``saver.aname`` (async)."""
        saver = saver or self.saver
        self.figures[name] += 1
        if self.is_async:
            return await getattr(saver, f"a{name}")(*args, **kwargs)
        return await asyncio.to_thread(getattr(saver, name), *args, **kwargs)

    async def listed(self, thread_id: str) -> list[Any]:
        self.figures["list"] += 1
        if self.is_async:
            return [item async for item in self.saver.alist(thread(thread_id))]
        return await asyncio.to_thread(lambda: list(self.saver.list(thread(thread_id))))

    async def check_thread(self, thread_id: str) -> None:
        """Every checkpoint listed reads whole (a concurrent delete may hide it)."""
        for item in await self.listed(thread_id):
            assert_whole(item.checkpoint["channel_values"])
            found = await self.call("get_tuple", item.config)
            if found is not None:
                assert_whole(found.checkpoint["channel_values"])
            self.figures["checkpoints checked"] += 1

    async def writer(self, thread_id: str, seed: int) -> None:
        graph = self.api.compile(builder(random.Random(seed)))
        turn = stored = 0
        # Stored runs, not turns: how many puts maintenance refuses depends on the timing.
        while stored < MIN_RUNS or time.monotonic() < self.deadline:
            run_id = f"{thread_id}-{seed}-run{turn}"
            config = {**thread(thread_id), "metadata": {"run_id": run_id}}
            turn += 1
            try:
                await self.api.invoke(graph, {"log": []}, config)
            except StaleParentError:
                self.figures["puts refused (parent deleted)"] += 1
                continue
            stored += 1
            self.finished[thread_id].append(run_id)
            self.figures["graph runs"] += 1
        self.writers_left -= 1

    @property
    def writing(self) -> bool:
        return self.writers_left > 0

    async def loop(self, step: Callable[[], Awaitable[None]]) -> None:
        while self.writing:
            try:
                await step()
            except (AssertionError, MissingValueError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.rng.random() * 0.01)

    async def prune(self) -> None:
        await self.call("prune", self.threads, strategy="keep_latest")

    async def delete_runs(self) -> None:
        # Runs before each writer's last finished one: a writer continues from its
        # thread's latest checkpoint, which maintenance never deletes from under it.
        runs = [r for t in self.threads for r in self.finished[t][:-1]]
        if runs:
            await self.call("delete_for_runs", self.rng.sample(runs, min(2, len(runs))))

    async def copy(self) -> None:
        source = self.rng.choice(self.threads)
        target = f"{source}-copy{self.figures['copy_thread']}"
        await self.call("copy_thread", source, target)
        await self.check_thread(target)
        await self.call("delete_thread", target)

    async def sweep(self) -> None:
        """Make an idle thread (backdated a day) and sweep with a one-hour ttl."""
        idle = f"idle{self.figures['sweep_expired']}"
        await self.api.put(generate_config(idle), generate_checkpoint(), generate_metadata(), {})
        day_ago = datetime.now(timezone.utc) - timedelta(days=1)
        backdate = {"$set": {"created_at": day_ago}}
        await maybe_await(self.api.raw(CHECKPOINTS).update_many({"thread_id": idle}, backdate))
        # (The sweeper's first call also sweeps on its own before it runs.)
        expired = await self.call("sweep_expired", saver=self.sweeper)
        assert not set(self.threads) & set(expired), expired
        assert await self.api.count(CHECKPOINTS, {"thread_id": idle}) == 0

    async def read(self) -> None:
        await self.check_thread(self.rng.choice(self.threads))

    async def run(self) -> Counter:
        self.deadline = time.monotonic() + SECONDS
        writers = [
            self.writer(t, self.rng.randrange(2**32)) for t in self.threads for _ in range(WRITERS)
        ]
        loops = [
            self.loop(step)
            for step in (self.prune, self.delete_runs, self.copy, self.sweep, self.read)
        ]
        await asyncio.gather(*writers, *loops)
        # Quiet now: every checkpoint reads whole.
        for thread_id in self.threads:
            await self.check_thread(thread_id)
        return self.figures


async def check_race(saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    race = Race(saver, SEED)
    figures = await race.run()
    # Nothing is in flight any more, so every document counts as old: a last prune leaves
    # nothing behind (LangGraph may store a task's writes after the next checkpoint, so
    # writes of a checkpoint pruned meanwhile can arrive after it is gone).
    monkeypatch.setattr(maintenance, "STRAY_AGE", timedelta(seconds=-5))
    await race.prune()
    await assert_no_orphans(race.api)
    print(f"\nrace on {type(saver).__name__}: {dict(figures)}, failures {len(race.failures)}")
    assert not race.failures, race.failures[:5]
    assert figures["graph runs"] >= THREADS * WRITERS
    for name in ("prune", "delete_for_runs", "copy_thread", "sweep_expired"):
        assert figures[name] >= 1, name


@BOTH_PUT_PATHS
async def test_writers_and_maintenance_race(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await check_race(api.saver, monkeypatch)


# -- deterministic: a checkpoint deleted while it is read --------------------------


def _put(saver: MongoDBSaver, thread_id: str, value: str, parent: dict | None = None) -> dict:
    checkpoint = generate_checkpoint(
        channel_values={"v": value}, channel_versions={"v": f"{value}"}
    )
    config = parent or generate_config(thread_id)
    return saver.put(config, checkpoint, generate_metadata(), {"v": f"{value}"})


def test_a_checkpoint_another_call_spares_keeps_no_marks(saver: MongoDBSaver) -> None:
    """A prune finds the old checkpoint tombstoned by another maintenance call (which it
    never takes over) and marks its writes and values with it; that call then spares it
    and lifts its tombstone before the prune deletes: the prune deletes nothing of it and
    lifts its own marks, so the checkpoint reads back whole and nothing is left marked."""
    first = _put(saver, "t", "1")
    saver.put_writes(first, [("w", "x")], "task")
    _put(saver, "t", "2", parent=first)
    other = MongoDBSaver(saver.client, saver.db.name)
    key = {"thread_id": "t", "checkpoint_ns": "", **first["configurable"]}
    tombstone = {maintenance.DOOMED: ObjectId(), maintenance.DOOMED_AT: datetime.now(timezone.utc)}
    other.collections[CHECKPOINTS].update_one(key, {"$set": tombstone})
    lifted: list[bool] = []

    def spare_after_the_marks() -> None:
        marked = {maintenance.DOOMED: True}
        if not lifted and other.collections[WRITES].count_documents(marked):
            lifted.append(True)
            unset = {"$unset": {maintenance.DOOMED: "", maintenance.DOOMED_AT: ""}}
            other.collections[CHECKPOINTS].update_one(key, unset)

    hook = Interleave(saver.collections, spare_after_the_marks)
    try:
        saver.prune(["t"], strategy="keep_latest")
    finally:
        hook.restore()
    assert lifted
    found = saver.get_tuple(first)
    assert found and found.checkpoint["channel_values"] == {"v": "1"}
    assert [w[1:] for w in found.pending_writes] == [("w", "x")]
    for logical in (BLOBS, WRITES):
        assert not other.collections[logical].count_documents({maintenance.DOOMED: True}), logical


def test_marks_lifted_after_a_spare_are_set_again_for_a_call_deleting_since(
    saver: MongoDBSaver,
) -> None:
    """As above, and between the prune's lift of its marks on the writes and on the value,
    a third call tombstones the checkpoint and marks them: the prune reads the checkpoint
    again after its lift and marks them again, so once that call deleted the checkpoint,
    its writes and value go with the next maintenance call (recent, they would be left
    behind unmarked)."""
    first = _put(saver, "t", "1")
    saver.put_writes(first, [("w", "x")], "task")
    _put(saver, "t", "2", parent=first)
    other = MongoDBSaver(saver.client, saver.db.name)
    key = {"thread_id": "t", "checkpoint_ns": "", **first["configurable"]}
    now = datetime.now(timezone.utc)
    other.collections[CHECKPOINTS].update_one(
        key, {"$set": {maintenance.DOOMED: ObjectId(), maintenance.DOOMED_AT: now}}
    )
    marked, steps = {maintenance.DOOMED: True}, []

    def spare_then_doom_again() -> None:
        writes_marked = other.collections[WRITES].count_documents(marked)
        if not steps and writes_marked:  # the other call spares it
            steps.append("spared")
            unset = {"$unset": {maintenance.DOOMED: "", maintenance.DOOMED_AT: ""}}
            other.collections[CHECKPOINTS].update_one(key, unset)
        elif steps == ["spared"] and not writes_marked:  # the prune lifted its marks
            steps.append("doomed again")
            tombstone = {maintenance.DOOMED: ObjectId(), maintenance.DOOMED_AT: now}
            other.collections[CHECKPOINTS].update_one(key, {"$set": tombstone})
            other.collections[WRITES].update_many({"thread_id": "t"}, {"$set": marked})
            version = {"thread_id": "t", "channel": "v", "version": "1"}
            other.collections[BLOBS].update_many(version, {"$set": marked})

    hook = Interleave(saver.collections, spare_then_doom_again)
    try:
        saver.prune(["t"], strategy="keep_latest")
    finally:
        hook.restore()
    assert steps == ["spared", "doomed again"]
    other.collections[CHECKPOINTS].delete_one(key)  # the third call deletes it
    other.prune(["t"], strategy="keep_latest")
    assert not other.collections[WRITES].count_documents({"thread_id": "t"})
    assert [d["version"] for d in other.collections[BLOBS].find({"thread_id": "t"})] == ["2"]


def test_checkpoint_deleted_during_get_tuple_reads_as_absent(saver: MongoDBSaver) -> None:
    stored = _put(saver, "t", "1")
    other = MongoDBSaver(saver.client, saver.db.name)
    # get_tuple is one aggregation: what it can see of a deletion is the checkpoint matched
    # but its values gone by the time its lookups ran, the checkpoint gone right after.
    other.collections[BLOBS].delete_many({"thread_id": "t"})
    hook = Interleave(saver.collections, lambda: other.delete_thread("t"))
    try:
        assert saver.get_tuple(stored) is None
    finally:
        hook.restore()


def test_latest_deleted_during_get_tuple_reads_the_next_latest(saver: MongoDBSaver) -> None:
    first = _put(saver, "t", "1")
    latest = _put(saver, "t", "2", parent=first)
    other = MongoDBSaver(saver.client, saver.db.name)
    deleted: list[bool] = []

    # The latest's values deleted before the aggregation's lookups ran, the checkpoint
    # right after it (``test_checkpoint_deleted_during_get_tuple_reads_as_absent``).
    other.collections[BLOBS].delete_many({"version": "2"})

    def prune_latest() -> None:
        if not deleted:  # once, after the first read
            deleted.append(True)
            key = {"checkpoint_id": latest["configurable"]["checkpoint_id"]}
            other.collections[CHECKPOINTS].delete_one(key)

    hook = Interleave(saver.collections, prune_latest)
    try:
        found = saver.get_tuple(generate_config("t"))
    finally:
        hook.restore()
    assert found.config["configurable"]["checkpoint_id"] == first["configurable"]["checkpoint_id"]
    assert found.checkpoint["channel_values"] == {"v": "1"}


def test_checkpoint_deleted_during_list_is_left_out(saver: MongoDBSaver) -> None:
    first = _put(saver, "t", "1")
    second = _put(saver, "t", "2", parent=first)
    other = MongoDBSaver(saver.client, saver.db.name)
    deleted: list[bool] = []

    def delete_first() -> None:
        if not deleted:
            deleted.append(True)
            other.prune(["t"], strategy="keep_latest")

    hook = Interleave(saver.collections, delete_first)
    try:
        listed = list(saver.list(generate_config("t")))
    finally:
        hook.restore()
    assert [item.config["configurable"]["checkpoint_id"] for item in listed] == [
        second["configurable"]["checkpoint_id"]
    ]


def test_checkpoint_whose_values_are_gone_still_raises(saver: MongoDBSaver) -> None:
    stored = _put(saver, "t", "1")
    saver.collections[BLOBS].delete_many({"thread_id": "t"})
    with pytest.raises(MissingValueError):
        saver.get_tuple(stored)
    with pytest.raises(MissingValueError):
        list(saver.list(generate_config("t")))


def test_copy_carries_no_marks_a_confirmed_checkpoint_is_about_to_lose(
    saver: MongoDBSaver,
) -> None:
    """``delete_for_runs`` finds the child pending while its parent is doomed (its put's
    probe passed before the tombstone, its confirmation is still on its way): it marks the
    base value the two share, and lifts the mark once it sees the child confirmed. A
    ``copy_thread`` meanwhile copies that value with the mark; another maintenance call
    deletes marked values no checkpoint of their thread names, and the target has none
    until the copy's last step. The copy must not carry the source's marks, or its child
    names a base that is gone."""
    parent = saver.put(
        generate_config("t"),
        generate_checkpoint(channel_values={"log": ["a", "b"]}, channel_versions={"log": "1"}),
        {"run_id": "r1"},
        {"log": "1"},
    )
    child = saver.put(
        parent,
        generate_checkpoint(channel_values={"log": ["a", "b", "c"]}, channel_versions={"log": "2"}),
        {"run_id": "r2"},
        {"log": "2"},
    )
    base = {"thread_id": "t", "channel": "log", "version": "1"}
    assert saver.collections[BLOBS].find_one({**base, "part": 0}) is not None
    assert saver.collections[BLOBS].find_one({"thread_id": "t", "version": "2"})["base"] == "1"
    child_key = {"thread_id": "t", "checkpoint_ns": "", **child["configurable"]}
    raw = saver.collections[CHECKPOINTS]
    raw.update_one(child_key, {"$set": {"pending": True}})  # its confirmation is on its way
    maintainer, copier, third = (MongoDBSaver(saver.client, saver.db.name) for _ in range(3))
    steps: list[str] = []

    def other_maintenance_between_values_and_checkpoints() -> None:
        if steps == ["copying"] and saver.collections[BLOBS].count_documents({"thread_id": "c"}):
            steps.append("values copied")
            raw.update_one(child_key, {"$unset": {"pending": ""}})  # the child's confirmation
            third.prune(["elsewhere"], strategy="keep_latest")  # deletes marked, unneeded values

    def copy_while_the_base_is_marked() -> None:
        if not steps and saver.collections[BLOBS].count_documents({**base, "doomed": True}):
            steps.append("copying")
            hook = Interleave(copier.collections, other_maintenance_between_values_and_checkpoints)
            try:
                copier.copy_thread("t", "c")
            finally:
                hook.restore()

    hook = Interleave(maintainer.collections, copy_while_the_base_is_marked)
    try:
        maintainer.delete_for_runs(["r1"])
    finally:
        hook.restore()
    assert steps == ["copying", "values copied"]
    assert not saver.collections[BLOBS].count_documents({**base, "doomed": True})
    copied = list(saver.list(generate_config("c")))
    assert [item.checkpoint["channel_values"] for item in copied][0] == {"log": ["a", "b", "c"]}
    found = saver.get_tuple({"configurable": {**child["configurable"], "thread_id": "c"}})
    assert found is not None and found.checkpoint["channel_values"] == {"log": ["a", "b", "c"]}
