"""The checkpointer's operations, written once for the sync and the async saver.

``CheckpointOperations`` holds LangGraph's read and write contract (``get_tuple``,
``list``, ``put``, ``put_writes``, the DeltaChannel history), ``copy_thread`` and setup;
what deletes next to live writers is in ``maintenance``.

A ``put`` reads top to bottom in five steps:

1. plan: which new list values are stored as deltas, from this instance's memory and the
   chains the parent names (``listdelta``);
2. build: the value requests and the checkpoint document (``documents``), its size
   checked before anything is written;
3. values: written first, so a reader never sees a checkpoint without its values; a value
   stored by an earlier attempt is adopted (the stored value is the truth);
4. checkpoint and parent probe: one ordered bulk write (``maintenance.probe_parent``);
   steps 3 and 4 are two commands (``_put_in_two_commands``) or, where the saver uses the
   client-level bulk write (``client_bulk``), one (``_put_in_one_command``), whose value
   heads are inserted or fail: a head stored already stops it before the checkpoint, and
   the put goes on as in two commands (adopting that value);
5. take back: when the probe misses the parent, ``maintenance.judge_parent`` accepts the
   checkpoint or takes it back (``StaleParentError``; ``_settle_probe``).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import ReplaceOne, UpdateOne
from pymongo.errors import BulkWriteError, InvalidOperation, OperationFailure
from pymongo.results import BulkWriteResult

from mongo_ckpt import inspection, listdelta, maintenance, schema
from mongo_ckpt.calls import (
    Calling,
    Document,
    Emit,
    Operation,
    WriteRequest,
    Written,
    aggregate,
    bulk_write,
    client_bulk_write,
    create_indexes,
    delete_many,
    find,
    find_cursor,
    next_batch,
    update_many,
    upserted_ids,
)
from mongo_ckpt.client_bulk import PutPath
from mongo_ckpt.delta import (
    MissingHistoryError,
    assemble,
    history_pipeline,
    judged,
    missing_ancestor,
    range_history_pipeline,
    range_limit,
    seed_ids,
    split_prefetched,
    tuple_history_pipeline,
    walk_cut_short,
)
from mongo_ckpt.documents import (
    ConflictingValueError,
    ValueWrites,
    blob_requests,
    check_checkpoint_size,
    checkpoint_document,
    checkpoint_update,
    confirm_checkpoint,
    write_requests,
)
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import check_limit, coerce_id, thread_key
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINT_KEY,
    CHECKPOINTS,
    WRITE_KEY,
    WRITES,
    Layout,
    blob_join,
    index_models,
    write_join,
)
from mongo_ckpt.listdelta import (
    Plan,
    is_list,
    plain_serde,
    same_value,
    stored_chain,
    values_entries,
)
from mongo_ckpt.maintenance import Deleted as Deleted  # the command line imports it here
from mongo_ckpt.memory import CheckpointKey, CheckpointMemory
from mongo_ckpt.official import migrate_command
from mongo_ckpt.payload import stray_parts
from mongo_ckpt.reading import (
    LATEST,
    SKELETON,
    Key,
    Loaded,
    MissingValueError,
    blob_keys_query,
    blobs_query,
    checkpoint_query,
    key_of,
    keys_query,
    list_query,
    needed_values,
    split_joined,
    tuple_pipeline,
    writes_query,
)
from mongo_ckpt.snapshot_distance import MAX_DEPTH

FIRST_PAGE = 10
MAX_PAGE = 250
COPY_BATCH = 200
READ_ATTEMPTS = 3  # reads of a checkpoint that maintenance deletes while it is being read
_KEY_FIELDS = {
    CHECKPOINTS: CHECKPOINT_KEY,
    BLOBS: (*BLOB_KEY, "part"),
    WRITES: (*WRITE_KEY, "part"),
}
COPIED_FROM = "copied_from"  # on a copied checkpoint: the thread it was copied from


class _Prefetch(NamedTuple):
    """A ``get_tuple`` that reads a DeltaChannel history along: its aggregation, the
    channels and the checkpoints its range read takes."""

    pipeline: list[Document]
    channels: Sequence[str]
    limit: int


class _Put(NamedTuple):
    """A put's steps 1 and 2, read by the path that writes it."""

    key: dict[str, str]
    parent_id: str | None
    stored_parent: Any  # the parent's ``_id``, if known: the probe names it
    values: Mapping[str, Any]  # the channel values, to compare a stored value with
    plan: Plan
    blobs: ValueWrites
    doc: dict[str, Any]  # its ``values`` rewritten when a stored value is adopted

    def checkpoint_requests(self) -> list[WriteRequest]:
        return _checkpoint_requests(self.key, self.doc, self.parent_id, self.stored_parent)


class ThreadExistsError(MongoCkptError, ValueError):
    """``copy_thread`` onto a thread that already has checkpoints of its own."""

    def __init__(self, target_thread_id: str) -> None:
        super().__init__(
            f"thread {target_thread_id!r} already has checkpoints: copying onto it would merge "
            "two histories; delete it first (delete_thread, `mongo-ckpt delete`) or copy to "
            "a new thread id"
        )
        self.target_thread_id = target_thread_id


class CheckpointOperations:
    """Builds each saver operation as a ``calls.Operation``."""

    def __init__(
        self,
        layout: Layout,
        serde: SerializerProtocol,
        filterable_metadata_keys: Collection[str] | None,
        memory: CheckpointMemory,
        put_path: PutPath | None = None,
    ) -> None:
        self.layout = layout
        self.serde = serde
        self.filterable_keys = filterable_metadata_keys
        # What this saver instance read and wrote: chains, snapshot counters, the layout.
        self.memory = memory
        # Whether a put is sent as one client-level bulk write (``None``: never).
        self.put_path = put_path

    def _where(self, db_name: str) -> str:
        """How errors name the saver's collections."""
        return f"database {db_name!r} (collections {', '.join(self.layout.by_logical().values())})"

    def setup(self, db_name: str) -> Operation[None]:
        """Check the recorded layout version: one round trip when it is this release's.

        New collections (no checkpoints) get their indexes and the current version (or the one
        another process recorded since the read: ``schema.record_first``). Refused with
        ``SchemaUpgradeRequired``, nothing written: langgraph-checkpoint-mongodb's
        collections (``mongo-ckpt migrate`` converts them), and data of a pre-release
        layout, recorded below the oldest version this release reads or not recorded at
        all. A newer version raises ``SchemaTooNewError`` (``schema.read``). Data at an
        older version it reads is taken up the ladder as far as setup may
        (``schema.climb``).
        """
        key, where = schema.saver_key(self.layout.checkpoints), self._where(db_name)
        found = yield from schema.read(key, where)
        if found is None:
            stored = yield from inspection.stored_by()
            if stored == "official":
                raise schema.SchemaUpgradeRequired(
                    f"collection {self.layout.checkpoints!r} of {where} holds "
                    "langgraph-checkpoint-mongodb documents, which mongo-ckpt does not read: "
                    f"convert them into another database with `{migrate_command(db_name)}` "
                    "and point the saver at it"
                )
            if stored:
                raise schema.pre_release(key, where, None)
            yield from self.create_indexes()
            found = yield from schema.record_first(key, self.layout.by_logical(), where)
        yield from schema.climb(key, where, found, self.layout.by_logical(), self)

    def upgrade(self, db_name: str) -> Operation[None]:
        """The layout taken up every rung of its ladder (``schema.climb``), those only an
        upgrade takes included (after ``setup``, which refused what this release cannot)."""
        key, where = schema.saver_key(self.layout.checkpoints), self._where(db_name)
        found = yield from schema.read(key, where)
        if found is not None:
            yield from schema.climb(key, where, found, self.layout.by_logical(), self, upgrade=True)

    @property
    def compressing(self) -> bool:
        """Whether large values are stored compressed: not under ``EncryptedSerializer``
        (ciphertext does not compress, and compressing before encrypting would let the
        stored size tell about the contents)."""
        return plain_serde(self.serde) is self.serde

    def create_indexes(self) -> Operation[None]:
        """Create the indexes ``layout.py`` defines; existing ones are left as they are."""
        models = index_models(self.layout)
        for logical, name in self.layout.by_logical().items():
            yield from create_indexes(logical, models[name])

    def get_tuple(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        """The checkpoint with its values and pending writes: one aggregation
        (``reading.tuple_pipeline``), and a ``find`` only for values the join did not
        bring whole (stored without a ``join`` key, or deleted meanwhile).

        The latest checkpoint of a thread this instance knows is read from the newest id it
        knows there on (``memory.newest_known``), so the key index bounds the read; when
        nothing is found from there (deleted by another instance), one more aggregation
        reads the whole thread, and what it finds is remembered.

        When this instance knows the checkpoint it will find (the latest: the one it wrote
        or found last) and that checkpoint replays DeltaChannels, the aggregation also reads
        their history (``delta.tuple_history_pipeline``), kept for the
        ``get_delta_channel_history`` LangGraph makes next; if the range read does not
        start at a checkpoint to return, the tuple is read alone."""
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        query = checkpoint_query(thread_id, checkpoint_ns, checkpoint_id)
        pipelines = [tuple_pipeline(query, self.layout.by_logical())]
        newest = None if checkpoint_id else self.memory.newest_known(thread_id, checkpoint_ns)
        if newest is not None:  # first read from there on: the index bounds the read
            bounded = {**query, "checkpoint_id": {"$gte": newest}}
            pipelines.insert(0, tuple_pipeline(bounded, self.layout.by_logical()))
        prefetch = self._prefetch(thread_id, checkpoint_ns, checkpoint_id)
        attempts = 0
        while True:
            history: list[Mapping[str, Any]] | None = None
            docs: Sequence[Mapping[str, Any]] = []
            reads = pipelines
            if prefetch is not None and attempts == 0:
                both = yield from aggregate(CHECKPOINTS, prefetch.pipeline)
                docs, history = split_prefetched(both)
                reads = pipelines[-1:]  # its range held the bounded one: the whole thread next
            whole = False  # whether the read that found it (or nothing) took the whole thread
            if not docs:  # no prefetch, or its range did not start at a checkpoint to return
                history = None
                for pipeline in reads:
                    docs = yield from aggregate(CHECKPOINTS, pipeline)
                    whole = pipeline is pipelines[-1]
                    if docs:
                        break
            doc, value_docs, write_docs = split_joined(docs)
            if checkpoint_id is None and doc is None:
                self.memory.found_latest((thread_id, checkpoint_ns), None, True, newest)
            if doc is None:
                return None
            loaded = Loaded(self.serde, value_docs, write_docs)
            unjoined = needed_values([doc]) - loaded.blobs.keys()
            if unjoined:
                more = yield from find(BLOBS, blob_keys_query(unjoined))
                if more:
                    loaded = Loaded(self.serde, [*value_docs, *more], write_docs)
            try:
                result = self._noted(loaded, doc, bases=True)
            except MissingValueError:
                attempts += 1
                if attempts == READ_ATTEMPTS or (yield from self._exists(doc)):
                    raise
                continue  # deleted (by maintenance) while it was read: read again
            found = (thread_id, checkpoint_ns, doc["checkpoint_id"])
            if checkpoint_id is None:
                self.memory.found_latest(found[:2], found[2], whole, newest)
            if prefetch is not None and history is not None:
                judgement = judged(history, prefetch.channels, prefetch.limit)
                self.memory.prefetched(found, prefetch.channels, judgement)
            return result

    def _prefetch(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> _Prefetch | None:
        """The ``tuple_history_pipeline`` of a ``get_tuple``, when this instance expects the
        checkpoint it finds to replay DeltaChannels and knows a bound of their seeds."""
        expected = self.memory.replayed(thread_id, checkpoint_ns, checkpoint_id)
        if expected is None:
            return None
        key, channels = expected
        _, floor, limit = self._range_bound(key, channels)
        if limit is None:
            return None
        collections = self.layout.by_logical()
        pipeline = tuple_history_pipeline(
            collections, thread_id, checkpoint_ns, checkpoint_id, channels, floor, limit
        )
        return _Prefetch(pipeline, channels, limit)

    def _range_bound(
        self, key: CheckpointKey, channels: Sequence[str]
    ) -> tuple[int, str | None, int | None]:
        """At ``key``: the walk depth LangGraph's counters allow, the lowest seed id known,
        and the checkpoints a range read takes (``None``: nothing bounds it)."""
        depth = self.memory.walk_depth(key, channels)
        floor = self.memory.seed_floor(key, channels)
        return depth, floor, range_limit(depth, floor)

    def _noted(
        self, loaded: Loaded, doc: Mapping[str, Any], bases: bool = False
    ) -> CheckpointTuple:
        """The tuple of ``doc``, its snapshot counters noted for a history walk; with
        ``bases`` (``get_tuple``: a run reads its parent), the list chains it read are kept
        for a ``put`` on it (``list`` pages are not: no run continues from them unread)."""
        result = loaded.checkpoint_tuple(doc)
        found = None
        if bases and self.memory.deltas_wanted:
            found = listdelta.read_chains(doc, loaded.blobs, result.checkpoint["channel_values"])
        self.memory.read(doc, result.metadata, found)
        return result

    def delta_channel_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Operation[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        if checkpoint_id is None:
            _, latest = yield from self._walked_history(thread_id, checkpoint_ns, None, channels)
            return latest
        key = (thread_id, checkpoint_ns, checkpoint_id)
        # Read already by the get_tuple that found this checkpoint, or a range read now.
        read = self.memory.take_prefetched(key, channels)
        depth, floor, limit = self._range_bound(key, channels)
        if read is None and limit is not None:
            collections = self.layout.by_logical()
            pipeline = range_history_pipeline(collections, *key, list(channels), floor, limit)
            read = judged((yield from aggregate(CHECKPOINTS, pipeline)), channels, limit)
        if read is None or read.docs is None:
            # No bound known, or the range did not reach every seed: walk the parents
            # (as far as LangGraph's bound when the counters understated the distance).
            if read is not None and read.cut:
                depth = MAX_DEPTH
            docs, history = yield from self._walked_history(
                thread_id, checkpoint_ns, checkpoint_id, channels, depth
            )
            self.memory.found_seeds(key, seed_ids(docs))
        else:
            history = assemble(read.docs, channels, self.serde, thread_id, checkpoint_ns)
            self.memory.found_seeds(key, seed_ids(read.docs))
        return history

    def _walked_history(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channels: Sequence[str],
        depth: int = MAX_DEPTH,
    ) -> Operation[tuple[list[Document], dict[str, DeltaChannelHistory]]]:
        """The history by the ``$graphLookup`` walk at most ``depth`` steps deep (deeper
        when LangGraph's counters understated it), and the walk's output."""
        target = checkpoint_query(thread_id, checkpoint_ns, checkpoint_id)

        def walk(depth: int) -> Calling[list[Document]]:
            collections = self.layout.by_logical()
            pipeline = history_pipeline(
                collections, target, thread_id, checkpoint_ns, list(channels), depth
            )
            return aggregate(CHECKPOINTS, pipeline)

        docs = yield from walk(depth)
        counted = depth < MAX_DEPTH  # LangGraph's counters say how far back the seeds are
        if counted and walk_cut_short(docs):
            # Counters that understate the distance (metadata not written by LangGraph's
            # loop): walk again as far as LangGraph's bound.
            counted, docs = False, (yield from walk(MAX_DEPTH))
        history = assemble(docs, channels, self.serde, thread_id, checkpoint_ns)
        missing = missing_ancestor(docs, depth if counted else None)
        unseeded = [ch for ch in channels if "seed" not in history[ch]]
        if missing is None and counted and unseeded and not any(d.get("chain") for d in docs):
            # No ancestor found: the target's parent is the first checkpoint, or gone.
            fields = _fields(["parent_checkpoint_id"])
            found = yield from find(CHECKPOINTS, target, projection=fields, sort=LATEST, limit=1)
            missing = found[0].get("parent_checkpoint_id") if found else None
        if missing is not None:
            raise MissingHistoryError(thread_id, checkpoint_ns, unseeded or channels, missing)
        return docs, history

    def list(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Operation[None]:
        query = list_query(config, filter, before, self.filterable_keys)
        check_limit(limit)
        if limit is not None and limit <= 0:
            return
        cursor = yield from find_cursor(CHECKPOINTS, query, sort=LATEST, limit=limit or 0)
        size = min(limit or FIRST_PAGE, FIRST_PAGE)
        while docs := (yield from next_batch(cursor, size)):
            loaded = yield from self._load(docs)
            for doc in docs:
                try:
                    item = self._noted(loaded, doc)
                except MissingValueError:
                    if (yield from self._exists(doc)):
                        raise
                    continue  # deleted (by maintenance) while it was read
                yield Emit(item)
            size = min(size * 5, MAX_PAGE)

    def _exists(self, doc: Mapping[str, Any]) -> Operation[bool]:
        """Whether checkpoint ``doc`` is still stored."""
        key = dict(zip(CHECKPOINT_KEY, key_of(doc)))
        found = yield from find(CHECKPOINTS, key, projection={"_id": 1}, limit=1)
        return bool(found)

    def _load(self, docs: Sequence[Mapping[str, Any]]) -> Operation[Loaded]:
        query = blobs_query(docs)
        blob_docs = (yield from find(BLOBS, query)) if query else []
        write_docs = yield from find(WRITES, writes_query(docs))
        return Loaded(self.serde, blob_docs, write_docs)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[RunnableConfig]:
        """Store a checkpoint in the five steps of the module's docstring."""
        thread_id, checkpoint_ns, parent_id = thread_key(config)
        checkpoint_id = coerce_id(checkpoint["id"], "checkpoint['id']")
        key = dict(zip(CHECKPOINT_KEY, (thread_id, checkpoint_ns, checkpoint_id)))
        metadata = get_checkpoint_metadata(config, metadata)
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        # 1. plan
        chains = yield from self._parent_chains(key, parent_id, values, versions, new_versions)
        usable = self.memory.usable((thread_id, checkpoint_ns, checkpoint_id), parent_id)
        plan = listdelta.plan(usable, self.memory.deltas_wanted, values, versions,
                              new_versions, self.serde, chains)
        # 2. build
        blobs = blob_requests(thread_id, checkpoint_ns, values, new_versions, self.serde,
                              plan.deltas, compress=self.compressing)
        doc = checkpoint_document(key, checkpoint, metadata, parent_id, self.serde,
                                  self.filterable_keys, plan.chains)
        check_checkpoint_size(doc)  # before the values: a refused put leaves nothing behind
        parent = None if parent_id is None else (thread_id, checkpoint_ns, parent_id)
        stored_parent = None if parent is None else self.memory.stored_id(parent)
        prepared = _Put(key, parent_id, stored_parent, values, plan, blobs, doc)
        # 3. values and 4. the checkpoint with its parent probe: in one command where the
        # server has the client-level bulk write, else in two
        one = self.put_path is not None and self.put_path.namespaces is not None
        sent = self._put_in_one_command if one else self._put_in_two_commands
        written, inserted = yield from sent(prepared)
        # 5. take back (or accept a parent never stored, and confirm)
        stored_id = yield from _settle_probe(key, parent_id, doc, written, inserted)
        self.memory.wrote(
            (thread_id, checkpoint_ns, checkpoint_id), plan, parent_id, doc, metadata, stored_id
        )
        return {"configurable": key}

    def _put_in_one_command(self, put: _Put) -> Operation[tuple[Written, set[Any]]]:
        """Values and checkpoint in one ordered client-level ``bulkWrite``; on in two
        commands when the primary has no such command (a failover to a pre-8.0 primary) or
        a head stored already stopped it before the checkpoint (a retry: its value is
        adopted, with the heads this command inserted)."""
        path = self.put_path
        assert path is not None and path.namespaces is not None
        requests = [(BLOBS, put.blobs.inserting_heads()), (CHECKPOINTS, put.checkpoint_requests())]
        try:
            values_written, written = yield from client_bulk_write(requests, path.namespaces)
        except (OperationFailure, InvalidOperation) as refused:
            path.refused(refused)  # raised again unless the primary has no such command
            return (yield from self._put_in_two_commands(put))
        inserted = _inserted_heads(put.blobs, values_written)
        if isinstance(values_written, BulkWriteError):
            if not _head_stored(values_written, put.blobs):
                raise values_written
            return (yield from self._put_in_two_commands(put, inserted))
        if put.blobs.multipart:
            yield from _drop_stray_parts(BLOBS, BLOB_KEY, put.blobs)
        return written, inserted

    def _put_in_two_commands(
        self, put: _Put, inserted: set[Any] | None = None
    ) -> Operation[tuple[Written, set[Any]]]:
        """3. the values (a value an earlier attempt stored is adopted: the stored value is
        the truth), then 4. the checkpoint and its parent probe, built after them (an
        adopted value changes ``doc``); also what finishes a stopped one-command put."""
        inserted = set() if inserted is None else inserted
        if put.blobs.requests:
            result = yield from _write_values(BLOBS, BLOB_KEY, put.blobs)
            inserted |= _inserted_heads(put.blobs, result)
            found = {k[2]: k[3] for k in put.blobs.heads.values() if k not in inserted}
            if found:
                yield from self._adopt_stored(put.key, put.plan, put.values, found, inserted)
                put.doc["values"] = values_entries(put.plan.chains)
        return (yield from _write_checkpoint(put.checkpoint_requests())), inserted

    def _adopt_stored(
        self,
        key: Mapping[str, str],
        plan: Plan,
        values: Mapping[str, Any],
        found: Mapping[str, Any],
        inserted: set[Any],
    ) -> Operation[None]:
        """Name the stored chains of the values in ``found`` (channel: version), whose heads
        existed before this call. A value other than the stored one is refused (unless
        another checkpoint names that version), leaving the values this call ``inserted``
        marked for maintenance."""
        thread_id, checkpoint_ns = key["thread_id"], key["checkpoint_ns"]
        loaded = yield from self._stored_values(thread_id, checkpoint_ns, found)
        for channel, version in found.items():
            try:
                stored = loaded.value(thread_id, checkpoint_ns, channel, version)
            except MissingValueError:
                yield from maintenance.mark_values(inserted)
                raise
            chain = stored_chain(loaded.blobs, (thread_id, checkpoint_ns, channel, version))
            assert chain is not None  # the value was rebuilt from it
            if not same_value(self.serde, values[channel], stored) and not (
                yield from self._named_elsewhere(key, channel, version)
            ):
                yield from maintenance.mark_values(inserted)
                raise ConflictingValueError(thread_id, checkpoint_ns, channel, version)
            plan.adopt(channel, chain)

    def _named_elsewhere(
        self, key: Mapping[str, str], channel: str, version: Any
    ) -> Operation[bool]:
        """Whether a checkpoint other than ``key`` names the value ``(channel, version)``:
        then that version is the thread's history, which keeps its first value (the put
        reuses a version rather than retrying a put)."""
        query = {
            "thread_id": key["thread_id"],
            "checkpoint_ns": key["checkpoint_ns"],
            "checkpoint_id": {"$ne": key["checkpoint_id"]},
            "values": {"$elemMatch": {"channel": channel, "version": version}},
        }
        found = yield from find(CHECKPOINTS, query, projection={"_id": 1}, limit=1)
        return bool(found)

    def _stored_values(
        self, thread_id: str, checkpoint_ns: str, versions: Mapping[str, Any]
    ) -> Operation[Loaded]:
        """The stored documents of ``versions`` (channel: version) and of the list-delta bases
        they are rebuilt from, read hop by hop: only retries and missing parents come here."""
        docs: builtins.list[Document] = []
        todo = {(thread_id, checkpoint_ns, ch, v) for ch, v in versions.items()}
        asked: set[Any] = set()
        while todo:
            asked |= todo
            found = yield from find(BLOBS, blob_keys_query(todo))
            docs += found
            bases = {(*key_of(d, BLOB_KEY)[:3], d["base"]) for d in found if _is_delta_head(d)}
            todo = bases - asked
        return Loaded(self.serde, docs, ())

    def _parent_chains(
        self,
        key: Mapping[str, str],
        parent_id: str | None,
        values: Mapping[str, Any],
        versions: Mapping[str, Any],
        new_versions: ChannelVersions,
    ) -> Operation[dict[str, builtins.list[Any]] | None]:
        """The chains of unchanged list values: those the parent checkpoint names, from
        memory when this instance read or wrote the parent, else from one ``find``; a
        chain the parent does not name (a parent never stored, or gone) is read from the
        stored values."""
        if parent_id is None or not listdelta.needs_parent(values, new_versions):
            return None
        parent = (key["thread_id"], key["checkpoint_ns"], parent_id)
        chains = self.memory.known_chains(parent)
        if chains is None:
            query = dict(zip(CHECKPOINT_KEY, parent))
            docs = yield from find(CHECKPOINTS, query, projection=SKELETON)
            for doc in docs:
                self.memory.remember(doc)
            chains = self.memory.known_chains(parent) or {}
        unknown = {
            ch: versions[ch]
            for ch, v in values.items()
            if ch not in new_versions
            and is_list(v)
            and ch in versions
            and (chains.get(ch) or [None])[-1] != versions[ch]
        }
        if not unknown:
            return chains
        loaded = yield from self._stored_values(key["thread_id"], key["checkpoint_ns"], unknown)
        stored = {
            ch: stored_chain(loaded.blobs, (key["thread_id"], key["checkpoint_ns"], ch, v))
            for ch, v in unknown.items()
        }
        return {**chains, **{ch: chain for ch, chain in stored.items() if chain}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Operation[None]:
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        if checkpoint_id is None:
            raise ValueError(
                "put_writes needs config['configurable']['checkpoint_id']: the checkpoint "
                "the writes belong to"
            )
        key = dict(zip(CHECKPOINT_KEY, (thread_id, checkpoint_ns, checkpoint_id)))
        task_id = coerce_id(task_id, "task_id")
        requests = write_requests(
            key, writes, task_id, task_path or "", self.serde, compress=self.compressing
        )
        if requests.requests:
            yield from _write_values(WRITES, WRITE_KEY, requests)

    # The command line's entry points into maintenance (``mongo_ckpt.cli.maintenance``).
    def delete_threads(self, thread_ids: Sequence[str]) -> Operation[Deleted]:
        return maintenance.delete_threads(self.memory.forget, thread_ids)

    def delete_idle(self, thread_ids: Sequence[str], cutoff: datetime) -> Operation[Deleted]:
        return maintenance.delete_idle(self.memory.forget, thread_ids, cutoff)

    def prune_plan(
        self, thread_ids: Sequence[str]
    ) -> Operation[tuple[builtins.list[Document], builtins.list[Document]]]:
        return maintenance.prune_plan(thread_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        source = coerce_id(source_thread_id, "source_thread_id")
        target = coerce_id(target_thread_id, "target_thread_id")
        if source == target:
            raise ValueError("copy_thread needs two different thread ids")
        yield from self.check_copy_target(source, target)
        # The checkpoints as they are now, then the values and writes they name (exact
        # keys: nothing unnamed, which no maintenance of a deleted target would remove),
        # then those checkpoints, as in ``put``: a checkpoint written during the copy
        # (whose values may have been missed) is not copied.
        query = {"thread_id": source}
        ids = yield from find(CHECKPOINTS, query, projection=SKELETON)
        if ids:
            values = needed_values(ids)
            if values:
                yield from _copy(BLOBS, blob_keys_query(values), target)
            yield from _copy(WRITES, keys_query(key_of(s) for s in ids), target)
        copied: set[Key] = set()
        for start in range(0, len(ids), COPY_BATCH):
            batch = [doc["_id"] for doc in ids[start : start + COPY_BATCH]]
            copied |= yield from _copy(CHECKPOINTS, {**query, "_id": {"$in": batch}}, target)
        # Checkpoints deleted from the source meanwhile were not copied: what the copy
        # wrote for them alone is marked for maintenance (``delete_thread`` of the target
        # removes it with the rest).
        missed = [s for s in ids if key_of(s) not in copied]
        if missed:
            unused = needed_values(missed) - needed_values(s for s in ids if key_of(s) in copied)
            yield from maintenance.mark_values({(target, *k[1:]) for k in unused})
            writes = keys_query((target, *key_of(s)[1:]) for s in missed)
            yield from update_many(WRITES, writes, maintenance.MARK)

    def check_copy_target(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        """Raise ``ThreadExistsError`` when the target has checkpoints of its own: copying
        would merge two histories. Checkpoints an earlier (maybe cut) copy of the same
        source wrote do not count, so the same copy again is harmless."""
        source = coerce_id(source_thread_id, "source_thread_id")
        target = coerce_id(target_thread_id, "target_thread_id")
        own = {"thread_id": target, COPIED_FROM: {"$ne": source}}
        if (yield from find(CHECKPOINTS, own, projection={"_id": 1}, limit=1)):
            raise ThreadExistsError(target)


def _fields(names: Iterable[str]) -> dict[str, int]:
    return {name: 1 for name in names}


def _is_delta_head(doc: Mapping[str, Any]) -> bool:
    return doc.get("part", 0) == 0 and "base" in doc


def _checkpoint_requests(
    key: Mapping[str, str], doc: Mapping[str, Any], parent_id: str | None, stored_parent: Any
) -> list[WriteRequest]:
    """The checkpoint's requests: its upsert alone without a parent; else inserted pending,
    the parent probe (``stored_parent``: the parent's ``_id``, if known), which fails the
    ordered write unless the parent is stored untombstoned, and the confirmation, so
    nothing is visible that no probe has passed, whatever cuts the write. With the
    client-level bulk write they follow the values in the same command, so a reader never
    sees a checkpoint without its values."""
    if parent_id is None:
        return [UpdateOne(key, checkpoint_update(doc), upsert=True)]
    parent = maintenance.probe_parent(
        {**key, "checkpoint_id": parent_id}, key["checkpoint_id"], stored_parent
    )
    write = UpdateOne(key, checkpoint_update(doc, pending=True), upsert=True)
    return [write, parent, confirm_checkpoint(key)]


def _settle_probe(
    key: Mapping[str, str],
    parent_id: str | None,
    doc: Mapping[str, Any],
    written: Written,
    inserted: set[Any],
) -> Operation[Any]:
    """Step 5: when the parent probe missed, take the put back, or accept a parent never
    stored (``maintenance.judge_parent``), then confirm; the checkpoint's ``_id`` if this
    call inserted it (the next put's probe names it)."""
    stored_id = upserted_ids(written).get(0)
    if isinstance(written, BulkWriteError):
        if not maintenance.probe_missed(written):
            raise written
        assert parent_id is not None  # only a put with a parent probes
        mine = stored_id is not None
        yield from maintenance.judge_parent(key, parent_id, doc, inserted, mine)
        yield from bulk_write(CHECKPOINTS, [confirm_checkpoint(key)], ordered=True)
        yield from maintenance.unmark_after_late_confirmation(key, parent_id, doc)
    return stored_id


def _inserted_heads(blobs: ValueWrites, written: Written) -> set[Any]:
    """The value keys whose head ``written`` (the write of ``blobs``) inserted."""
    return {blobs.heads[i] for i in upserted_ids(written) if i in blobs.heads}


def _head_stored(error: BulkWriteError, blobs: ValueWrites) -> bool:
    """Whether the write of ``blobs.inserting_heads()`` stopped at a head stored already."""
    errors = error.details.get("writeErrors", [])
    return [e.get("code") for e in errors] == [maintenance.DUPLICATE_KEY] and (
        errors[0].get("index") in blobs.heads
    )


def _write_checkpoint(requests: Sequence[WriteRequest]) -> Operation[Written]:
    """The checkpoint's requests in one ordered bulk write; its error is returned."""
    try:
        return (yield from bulk_write(CHECKPOINTS, requests, ordered=True))
    except BulkWriteError as error:
        return error


def _write_values(
    collection: str, key_fields: tuple[str, ...], writes: ValueWrites
) -> Operation[BulkWriteResult]:
    """Write values in one ordered bulk write, so each head lands after its parts; then
    ``_drop_stray_parts``."""
    result = yield from bulk_write(collection, writes.requests, ordered=True)
    if writes.multipart:
        yield from _drop_stray_parts(collection, key_fields, writes)
    return result


def _drop_stray_parts(
    collection: str, key_fields: tuple[str, ...], writes: ValueWrites
) -> Operation[None]:
    """After values in several parts were written: one ``find`` of their part ids, and the
    parts left by a cut or losing attempt under the same keys deleted (by ``_id``) when
    there are any."""
    query = writes.multipart[0] if len(writes.multipart) == 1 else {"$or": writes.multipart}
    projection = _fields(("part", "vid", *key_fields))
    docs = yield from find(collection, query, projection=projection)
    stray = stray_parts(docs, key_fields)
    if stray:
        thread_id = writes.multipart[0]["thread_id"]  # one thread per call: routes the delete
        yield from delete_many(collection, {"thread_id": thread_id, "_id": {"$in": stray}})


def _copy(collection: str, query: Mapping[str, Any], target: str) -> Operation[set[Key]]:
    """Copy the documents ``query`` matches onto thread ``target``; their source keys."""
    copied: set[Key] = set()
    cursor = yield from find_cursor(collection, query)
    while docs := (yield from next_batch(cursor, COPY_BATCH)):
        requests: builtins.list[WriteRequest] = [
            _copy_request(collection, doc, target) for doc in docs
        ]
        yield from bulk_write(collection, requests, ordered=False)
        copied.update(key_of(doc, _KEY_FIELDS[collection]) for doc in docs)
    return copied


def _copy_request(collection: str, doc: Document, target: str) -> WriteRequest:
    source = doc["thread_id"]
    # A mark is the source's maintenance's (set on a value or write a checkpoint being
    # deleted names, maybe lifted again later): copied, it would let any maintenance call
    # delete the copy before the checkpoints naming it are copied. What the copy wrote
    # for checkpoints it missed alone, it marks itself.
    doc = {k: v for k, v in doc.items() if k not in ("_id", maintenance.DOOMED)}
    doc["thread_id"] = target
    key = {f: doc.get(f) for f in _KEY_FIELDS[collection]}
    if collection == CHECKPOINTS:
        # A tombstone belongs to the source's maintenance, and the copy is the target's
        # activity now: ``created_at`` is the server's time of the copy.
        own = (maintenance.DOOMED, maintenance.DOOMED_AT, "created_at")
        copied = {k: v for k, v in doc.items() if k not in own} | {COPIED_FROM: source}
        return UpdateOne(key, checkpoint_update(copied), upsert=True)
    if collection == BLOBS:
        doc["join"] = blob_join(*key_of(doc, BLOB_KEY))
    elif collection == WRITES:
        doc["join"] = write_join(*key_of(doc))
    return ReplaceOne(key, doc, upsert=True)
