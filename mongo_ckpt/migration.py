"""Converting langgraph-checkpoint-mongodb collections into mongo-ckpt's layout, and
checking the result.

``migrate_from_official`` streams the official ``checkpoints`` collection thread by
thread (on its own unique index), ``batch`` threads at a time: one ``find`` for their
writes, then one ordered ``bulk_write`` each for values, writes and checkpoints, in
the order ``put`` writes them, then a progress marker. Every write is an upsert, so
a batch cut half way is simply done again: rerunning after a cut gives the same
result, and the marker (``schema`` collection, ``migration:<db>.<collection>``) lets
the rerun start after the last finished thread. The source is only read.

A thread that cannot be converted (a checkpoint over mongo-ckpt's document limit, say:
its metadata is stored twice) is skipped whole, so no migrated checkpoint misses its
parent, and the migration goes on. Each skip is recorded with its reason in the
marker and reported at the end; a rerun tries the skipped threads again, and
``verify_migration`` lists them as skipped, not as mismatches.

Versions: the official saver numbers channel versions 1, 2, 3... per thread, so two
branches forked from one checkpoint reuse a number for different values; mongo-ckpt
keys values by version. A numeric version becomes mongo-ckpt's zero-padded string,
and, for a channel with a value, gets a tail telling its values apart, so equal
numbers with different values never share a document (``versions_seen`` is mapped
the same way, which keeps every comparison LangGraph makes unchanged). The tail is an
HMAC, under a secret key, of the value and where it is (thread, namespace, channel,
number): the same value at the same place gets the same version in every checkpoint and
on every rerun, while a reader without the key can neither test a guessed value against
it nor see that two threads hold equal values. The key is drawn at random by the first
run and kept in the progress marker, serialized with the saver's ``serde`` (so encrypted
with ``EncryptedSerializer``).

``verify_migration`` reads every migrated thread back through the saver and compares
it with the source: ids, parents, metadata and pending writes of every checkpoint,
and the channel values of each namespace's latest one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from bson import Binary
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pymongo import UpdateOne

from mongo_ckpt.calls import (
    Emit,
    Operation,
    Relay,
    WriteRequest,
    bulk_write,
    count_documents,
    find,
    find_cursor,
    find_one,
    next_batch,
    update_one,
)
from mongo_ckpt.documents import (
    blob_requests,
    check_checkpoint_size,
    checkpoint_document,
    write_requests,
)
from mongo_ckpt.drivers import run
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import BLOBS, CHECKPOINT_KEY, CHECKPOINTS, WRITES
from mongo_ckpt.official import (
    DEFAULT_CHECKPOINTS,
    DEFAULT_WRITES,
    THREAD_ORDER,
    OfficialCheckpoint,
    OfficialWrite,
    load_checkpoint,
    load_write,
    thread_query,
    writes_by_checkpoint,
)
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.schema import SCHEMA

SOURCE_CHECKPOINTS, SOURCE_WRITES = "source_checkpoints", "source_writes"
DEFAULT_BATCH = 100  # threads per batch
READ_BATCH = 500  # source checkpoints per cursor step
# Serializes a value only to key its version tail: the same value gives the same version
# string on every run, whatever the saver's (possibly encrypting) serde does.
_PLAIN = JsonPlusSerializer(pickle_fallback=True)
VERSION_KEY = "version_key"
"""The marker's field holding the version tails' key (serialized with the saver's serde)."""
VERSION_KEY_BYTES = 32
TAIL_DIGITS = 10


@dataclass(frozen=True)
class Source:
    """The official collections to read: ``db`` with its two collection names."""

    db: str
    checkpoints: str = DEFAULT_CHECKPOINTS
    writes: str = DEFAULT_WRITES

    @property
    def marker(self) -> str:
        return f"migration:{self.db}.{self.checkpoints}"


@dataclass(frozen=True)
class Skip:
    """A source thread that was not migrated: the checkpoint that could not be converted,
    why, and how many checkpoints the thread has."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    reason: str
    checkpoints: int


@dataclass
class Progress:
    """Counts so far; ``total_checkpoints`` is the source's checkpoint count. ``skipped``
    lists the threads not migrated (their checkpoints are not in ``checkpoints``)."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    total_checkpoints: int = 0
    last_thread: str | None = None
    skipped: list[Skip] = field(default_factory=list)

    @classmethod
    def from_marker(cls, state: Mapping[str, Any]) -> Progress:
        """The counts a progress marker recorded (``marker_state``)."""
        skipped = [Skip(**skip) for skip in state.get("skipped", ())]
        return cls(**{**state, "skipped": skipped})

    def marker_state(self) -> dict[str, Any]:
        """The counts as the progress marker records them (all but the source's total)."""
        state = {k: v for k, v in vars(self).items() if k != "total_checkpoints"}
        return {**state, "skipped": [vars(skip) for skip in self.skipped]}

    @property
    def skipped_checkpoints(self) -> int:
        return sum(skip.checkpoints for skip in self.skipped)


@dataclass(frozen=True)
class Mismatch:
    """A difference between the source and the migrated data."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    field: str
    detail: str


@dataclass
class Verification:
    """What ``verify_migration`` compared, and every difference it found."""

    threads: int = 0
    checkpoints: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)


ProgressCallback = Callable[[Progress], None]


# -- conversion (pure) ------------------------------------------------------------


def _numbered(version: Any) -> str | None:
    """A numeric official version as mongo-ckpt's zero-padded string (``None``: keep it)."""
    if isinstance(version, bool) or not isinstance(version, (int, float)):
        return None
    return f"{int(version):012}"


def value_tail(key: bytes, where: Sequence[str], value: Any) -> str:
    """Ten hex digits telling ``value`` apart at ``where`` (thread, namespace, channel,
    number): an HMAC-SHA256 under ``key`` of those and the value's plain serialization."""
    type_, data = _PLAIN.dumps_typed(value)
    parts = [p.encode() for p in (*where, type_)] + [data]
    message = b"".join(len(p).to_bytes(8, "big") + p for p in parts)  # unambiguous
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:TAIL_DIGITS]


def convert_versions(
    checkpoint: Checkpoint, key: bytes, thread_id: str, checkpoint_ns: str
) -> Checkpoint:
    """``checkpoint`` of ``thread_id``/``checkpoint_ns`` with mongo-ckpt version strings,
    tails keyed with ``key`` (see the module docstring)."""
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    mapped: dict[str, Any] = {}
    for channel, version in versions.items():
        number = _numbered(version)
        if number is None:
            mapped[channel] = version
        elif channel in values:
            where = (thread_id, checkpoint_ns, channel, number)
            mapped[channel] = f"{number}.{value_tail(key, where, values[channel])}"
        else:
            mapped[channel] = number

    def seen(channel: str, version: Any) -> Any:
        if channel in versions and versions[channel] == version:
            return mapped[channel]
        number = _numbered(version)
        return version if number is None else number

    return {
        **checkpoint,
        "channel_versions": mapped,
        "versions_seen": {
            node: {ch: seen(ch, v) for ch, v in chans.items()}
            for node, chans in checkpoint.get("versions_seen", {}).items()
        },
    }


def _created_at(checkpoint: Checkpoint) -> datetime:
    try:
        return datetime.fromisoformat(checkpoint["ts"]).astimezone(timezone.utc)
    except (KeyError, TypeError, ValueError):
        return datetime.now(timezone.utc)


Requests = dict[str, list[WriteRequest]]
"""The target writes for one batch by logical collection, in the order ``put`` makes them."""


def _requests() -> Requests:
    return {BLOBS: [], WRITES: [], CHECKPOINTS: []}


def convert(
    ops: CheckpointOperations,
    checkpoints: Sequence[OfficialCheckpoint],
    writes: Mapping[tuple[str, str, str], Sequence[OfficialWrite]],
    version_key: bytes,
) -> Requests:
    """Target requests for the checkpoints and writes of some whole threads, version tails
    keyed with ``version_key``; raises ``Unconvertible`` for a checkpoint mongo-ckpt cannot
    store."""
    out = _requests()
    stored: set[tuple[str, str, str, Any]] = set()
    for cp in checkpoints:
        try:
            out[CHECKPOINTS].append(_convert_checkpoint(ops, cp, stored, out, version_key))
        except ValueError as exc:
            raise Unconvertible(cp, str(exc)) from exc
    for (thread_id, ns, checkpoint_id), group in writes.items():
        key = dict(zip(CHECKPOINT_KEY, (thread_id, ns, checkpoint_id)))
        tasks: dict[tuple[str, str], list[OfficialWrite]] = {}
        for write in group:
            tasks.setdefault((write.task_id, write.task_path), []).append(write)
        for (task_id, task_path), task_writes in tasks.items():
            out[WRITES] += write_requests(
                key,
                [(w.channel, w.value) for w in task_writes],
                task_id,
                task_path,
                ops.serde,
                idxs=[w.idx for w in task_writes],
                compress=ops.compressing,
            ).requests
    return out


class Unconvertible(MongoCkptError, ValueError):
    """A source checkpoint mongo-ckpt cannot store; its thread is skipped."""

    def __init__(self, checkpoint: OfficialCheckpoint, reason: str) -> None:
        super().__init__(reason)
        self.checkpoint, self.reason = checkpoint, reason


def _convert_checkpoint(
    ops: CheckpointOperations,
    cp: OfficialCheckpoint,
    stored: set[tuple[str, str, str, Any]],
    out: Requests,
    version_key: bytes,
) -> WriteRequest:
    """The checkpoint's upsert; the requests of its values not in ``stored`` go to ``out``."""
    key = dict(zip(CHECKPOINT_KEY, (cp.thread_id, cp.checkpoint_ns, cp.checkpoint_id)))
    checkpoint = convert_versions(cp.checkpoint, version_key, cp.thread_id, cp.checkpoint_ns)
    versions = checkpoint["channel_versions"]
    values = checkpoint["channel_values"]
    new = {}
    for channel in values:
        if channel in versions:
            value_key = (cp.thread_id, cp.checkpoint_ns, channel, versions[channel])
            if value_key not in stored:
                new[channel] = versions[channel]
    doc = checkpoint_document(
        key,
        checkpoint,
        cp.metadata,
        cp.parent_checkpoint_id,
        ops.serde,
        ops.filterable_keys,
    )
    doc["created_at"] = _created_at(checkpoint)
    check_checkpoint_size(doc)
    stored.update((cp.thread_id, cp.checkpoint_ns, ch, v) for ch, v in new.items())
    out[BLOBS] += blob_requests(
        cp.thread_id, cp.checkpoint_ns, values, new, ops.serde, compress=ops.compressing
    ).requests
    return UpdateOne(key, {"$set": doc}, upsert=True)


def convert_threads(
    ops: CheckpointOperations,
    threads: Mapping[str, Sequence[OfficialCheckpoint]],
    writes: Mapping[tuple[str, str, str], Sequence[OfficialWrite]],
    version_key: bytes,
) -> tuple[Requests, list[Skip]]:
    """``convert`` thread by thread: the requests of the threads that convert, and a
    ``Skip`` for each that does not (none of its documents is written)."""
    out, skipped = _requests(), []
    by_thread: dict[str, dict[tuple[str, str, str], Sequence[OfficialWrite]]] = {}
    for key, group in writes.items():
        by_thread.setdefault(key[0], {})[key] = group
    for thread_id, checkpoints in threads.items():
        try:
            requests = convert(ops, checkpoints, by_thread.get(thread_id, {}), version_key)
        except Unconvertible as exc:
            cp = exc.checkpoint
            skip = Skip(thread_id, cp.checkpoint_ns, cp.checkpoint_id, exc.reason, len(checkpoints))
            skipped.append(skip)
            continue
        for logical, thread_requests in requests.items():
            out[logical] += thread_requests
    return out, skipped


# -- operations ---------------------------------------------------------------------


Threads = dict[str, list[dict[str, Any]]]


def _threads(
    query: dict[str, Any], batch: int, handle: Callable[[Threads], Operation[None]]
) -> Operation[None]:
    """Stream the source checkpoints matching ``query`` and call ``handle`` with the
    documents of every ``batch`` whole threads (``{thread_id: [documents]}``)."""
    cursor = yield from find_cursor(SOURCE_CHECKPOINTS, query, sort=THREAD_ORDER)
    pending: Threads = {}
    while docs := (yield from next_batch(cursor, READ_BATCH)):
        for doc in docs:
            pending.setdefault(doc["thread_id"], []).append(doc)
        while len(pending) > batch:  # the last thread may go on in the next read
            ready = list(pending)[:batch]
            yield from handle({t: pending.pop(t) for t in ready})
    if pending:
        yield from handle(pending)


def _source_writes(
    ops: CheckpointOperations, thread_ids: Sequence[str]
) -> Operation[dict[tuple[str, str, str], list[OfficialWrite]]]:
    docs = yield from find(SOURCE_WRITES, thread_query(thread_ids))
    return writes_by_checkpoint(load_write(ops.serde, d) for d in docs)


def migration(
    ops: CheckpointOperations,
    source: Source,
    batch: int,
    restart: bool,
    progress: ProgressCallback | None,
) -> Operation[Progress]:
    """The migration as a ``calls.Operation`` (see the module docstring)."""
    # The marker keeps the version key, which a restart keeps too; only progress restarts.
    marker = yield from find_one(SCHEMA, {"_id": source.marker})
    version_key = yield from _version_key(ops, source, marker)
    done = Progress.from_marker({} if restart else (marker or {}).get("progress", {}))
    done.total_checkpoints = yield from count_documents(SOURCE_CHECKPOINTS, {})
    query: dict[str, Any] = {}
    if done.last_thread is not None:
        # The threads after the last finished one, and those skipped before: tried again.
        query = {"thread_id": {"$gt": done.last_thread}}
        retried = sorted(skip.thread_id for skip in done.skipped)
        if retried:
            query = {"$or": [query, {"thread_id": {"$in": retried}}]}
    if progress is not None:
        progress(done)

    def migrate(threads: Threads) -> Operation[None]:
        writes = yield from _source_writes(ops, list(threads))
        checkpoints = {
            thread_id: [load_checkpoint(ops.serde, d) for d in docs]
            for thread_id, docs in threads.items()
        }
        requests, skipped = convert_threads(ops, checkpoints, writes, version_key)
        # Values and writes first, checkpoints last, as ``put`` does; ordered, so each
        # value's head comes after its parts.
        for logical, batch_requests in requests.items():
            if batch_requests:
                yield from bulk_write(logical, batch_requests, ordered=logical != CHECKPOINTS)
        missed = {skip.thread_id for skip in skipped}
        migrated = [t for t in threads if t not in missed]
        # Skipped threads are not counted, so one that converts when tried again counts once.
        done.threads += len(migrated)
        done.checkpoints += sum(len(checkpoints[t]) for t in migrated)
        done.writes += sum(len(w) for key, w in writes.items() if key[0] not in missed)
        # Skips of threads not in this batch stay recorded until they are tried again.
        done.skipped = [s for s in done.skipped if s.thread_id not in threads] + skipped
        done.last_thread = max(filter(None, [done.last_thread, list(threads)[-1]]))
        update = {"$set": {"progress": done.marker_state(), "source": vars(source)}}
        yield from update_one(SCHEMA, {"_id": source.marker}, update, upsert=True)
        if progress is not None:
            progress(done)

    yield from _threads(query, batch, migrate)
    return done


def _version_key(
    ops: CheckpointOperations, source: Source, marker: Mapping[str, Any] | None
) -> Operation[bytes]:
    """The key of the version tails: the one the marker keeps, else a new random one,
    stored (serialized with the saver's serde) before anything is migrated with it."""
    if marker is not None and VERSION_KEY in marker:
        stored = marker[VERSION_KEY]
        return bytes(ops.serde.loads_typed((stored["type"], bytes(stored["data"]))))
    key = secrets.token_bytes(VERSION_KEY_BYTES)
    type_, data = ops.serde.dumps_typed(key)
    update = {"$set": {VERSION_KEY: {"type": type_, "data": Binary(data)}}}
    yield from update_one(SCHEMA, {"_id": source.marker}, update, upsert=True)
    return key


def _collect(operation: Operation[Any]) -> Operation[list[Any]]:
    """Run an emitting operation inside another one; return what it emitted."""
    items: list[Any] = []
    relay = Relay(operation)
    while (step := relay.next_step()) is not None:
        if isinstance(step, Emit):
            items.append(step.item)
            continue
        try:
            relay.returned((yield step))
        except Exception as exc:
            relay.failed(exc)
    return items


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def compare(
    thread_id: str,
    source: Sequence[OfficialCheckpoint],
    writes: Mapping[tuple[str, str, str], Sequence[OfficialWrite]],
    target: Sequence[CheckpointTuple],
) -> list[Mismatch]:
    """Differences between one thread's source checkpoints and its migrated tuples."""
    found: list[Mismatch] = []
    migrated = {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]): t
        for t in target
    }
    latest: dict[str, str] = {}
    for cp in source:
        if cp.checkpoint_id > latest.get(cp.checkpoint_ns, ""):
            latest[cp.checkpoint_ns] = cp.checkpoint_id
    for cp in source:
        ns, cid = cp.checkpoint_ns, cp.checkpoint_id

        def differs(name: str, expected: Any, actual: Any, ns: str = ns, cid: str = cid) -> None:
            if expected != actual:
                detail = f"source {_short(expected)} != migrated {_short(actual)}"
                found.append(Mismatch(thread_id, ns, cid, name, detail))

        tuple_ = migrated.pop((ns, cid), None)
        if tuple_ is None:
            found.append(Mismatch(thread_id, ns, cid, "checkpoint", "missing after migration"))
            continue
        parent = (tuple_.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        differs("parent", cp.parent_checkpoint_id, parent)
        differs("metadata", dict(cp.metadata), dict(tuple_.metadata))
        expected = [w.pending for w in writes.get((thread_id, ns, cid), ())]
        differs("pending_writes", expected, list(tuple_.pending_writes or ()))
        if latest[ns] == cid:
            differs(
                "channel_values",
                cp.checkpoint["channel_values"],
                tuple_.checkpoint["channel_values"],
            )
    for ns, cid in migrated:
        found.append(Mismatch(thread_id, ns, cid, "checkpoint", "not in the source"))
    return found


def verification(
    ops: CheckpointOperations, source: Source, batch: int, progress: ProgressCallback | None
) -> Operation[Verification]:
    """The verification as a ``calls.Operation``: every source thread against the target,
    but those the migration recorded as skipped, which are listed as such."""
    marker = yield from find_one(SCHEMA, {"_id": source.marker})
    result = Verification(skipped=Progress.from_marker((marker or {}).get("progress", {})).skipped)
    skipped = {skip.thread_id for skip in result.skipped}
    seen = Progress()
    seen.total_checkpoints = yield from count_documents(SOURCE_CHECKPOINTS, {})
    if progress is not None:
        progress(seen)

    def check(threads: Threads) -> Operation[None]:
        writes = yield from _source_writes(ops, list(threads))
        for thread_id, docs in threads.items():
            if thread_id in skipped:
                continue
            source = [load_checkpoint(ops.serde, d) for d in docs]
            config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
            target = yield from _collect(ops.list(config, None, None, None))
            result.mismatches += compare(thread_id, source, writes, target)
            result.threads += 1
            result.checkpoints += len(source)
        seen.threads, seen.checkpoints = result.threads, result.checkpoints
        seen.last_thread = list(threads)[-1]
        if progress is not None:
            progress(seen)

    yield from _threads({}, batch, check)
    return result


# -- the library functions ----------------------------------------------------------


def _collections(saver: MongoDBSaver, source: Source, batch: int) -> dict[str, Any]:
    """The collections a run over ``source`` uses, once the arguments are checked and the
    saver is set up (indexes and layout version; it refuses collections of official data)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive number of threads, got {batch!r}")
    if not isinstance(saver, MongoDBSaver):
        raise TypeError(
            f"migration runs on a MongoDBSaver (synchronous client), got {type(saver).__name__}"
        )
    if source.db == saver.db.name and {source.checkpoints, source.writes} & set(
        saver.layout.by_logical().values()
    ):
        raise ValueError(
            f"the source collections {source.checkpoints!r}/{source.writes!r} of database "
            f"{source.db!r} are also the saver's: migrate into another database (or other "
            "collection names), since the source is never modified"
        )
    db = saver.client[source.db]
    if source.checkpoints not in db.list_collection_names():
        raise ValueError(
            f"database {source.db!r} has no collection {source.checkpoints!r}: no "
            "langgraph-checkpoint-mongodb data to migrate; name the official saver's database "
            "(and its collections, if not the default ones)"
        )
    saver.setup()
    return {
        **saver.collections,
        SOURCE_CHECKPOINTS: db[source.checkpoints],
        SOURCE_WRITES: db[source.writes],
    }


def migrate_from_official(
    saver: MongoDBSaver,
    source: Source,
    *,
    batch: int = DEFAULT_BATCH,
    restart: bool = False,
    progress: ProgressCallback | None = None,
) -> Progress:
    """Convert langgraph-checkpoint-mongodb's collections (``source``) into ``saver``'s.

    Resumable and idempotent: a rerun continues after the last finished thread
    (``restart=True`` goes over every thread again, with the same result). The saver's
    ``serde`` must read the source (the same ``EncryptedSerializer`` key, if any).
    ``progress`` is called with the counts so far, then after each batch. Returns the
    counts (of every run, when resumed); ``skipped`` lists the threads left unmigrated
    because one of their checkpoints cannot be converted, with the reason. A rerun tries
    them again.
    """
    collections = _collections(saver, source, batch)
    return run(collections, migration(saver.ops, source, batch, restart, progress))


def verify_migration(
    saver: MongoDBSaver,
    source: Source,
    *,
    batch: int = DEFAULT_BATCH,
    progress: ProgressCallback | None = None,
) -> Verification:
    """Compare every thread of ``source`` with what ``saver`` reads back (ids, parents,
    metadata and pending writes of each checkpoint; the latest state per namespace).
    Threads the migration skipped are not compared: ``skipped`` lists them."""
    collections = _collections(saver, source, batch)
    return run(collections, verification(saver.ops, source, batch, progress))
