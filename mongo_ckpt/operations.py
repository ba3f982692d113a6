"""The checkpointer's operations, written once for the sync and the async saver."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from bson import ObjectId
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
from pymongo.results import BulkWriteResult

from mongo_ckpt import schema, tombstones
from mongo_ckpt.calls import (
    Calling,
    Document,
    Emit,
    Operation,
    WriteRequest,
    aggregate,
    bulk_write,
    count_documents,
    create_indexes,
    delete_many,
    distinct,
    find,
    find_cursor,
    next_batch,
    update_many,
)
from mongo_ckpt.clock import aware, server_now
from mongo_ckpt.delta import (
    MissingHistoryError,
    assemble,
    history_pipeline,
    missing_ancestor,
    needed_ancestors,
    walk_cut_short,
)
from mongo_ckpt.documents import (
    TOUCHED_AT,
    ConflictingValueError,
    ValueWrites,
    blob_requests,
    check_checkpoint_size,
    checkpoint_document,
    checkpoint_update,
    write_requests,
)
from mongo_ckpt.identifiers import check_limit, coerce_id, coerce_ids, thread_key
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
    ListDeltas,
    Plan,
    chains_of,
    is_list,
    same_value,
    stored_chain,
    values_entries,
)
from mongo_ckpt.payload import stray_parts
from mongo_ckpt.reading import (
    LATEST,
    Key,
    Loaded,
    MissingValueError,
    blob_keys_query,
    blobs_query,
    checkpoint_query,
    inactive_threads_pipeline,
    key_of,
    keys_query,
    list_query,
    needed_values,
    split_joined,
    tuple_pipeline,
    writes_query,
)
from mongo_ckpt.snapshot_distance import MAX_DEPTH, SnapshotDistances

FIRST_PAGE = 10
MAX_PAGE = 250
COPY_BATCH = 200
SWEEP_BATCH = 500  # threads per round of the retention sweep: no command carries every id
READ_ATTEMPTS = 3  # reads of a checkpoint that maintenance deletes while it is being read
_KEY_FIELDS = {
    CHECKPOINTS: CHECKPOINT_KEY,
    BLOBS: (*BLOB_KEY, "part"),
    WRITES: (*WRITE_KEY, "part"),
}
SKELETON = {f: 1 for f in (*CHECKPOINT_KEY, "parent_checkpoint_id", "values", "replay", "run_id")}
LOOK = {**SKELETON, tombstones.DOOMED: 1, "created_at": 1}  # maintenance's reads of threads
PRUNE_STRATEGIES = ("keep_latest", "delete", "delete_all")
# Set on the writes and values of checkpoints being deleted, before the checkpoints go:
# once no checkpoint names them, the mark is how any later maintenance finds them.
DOOMED, DOOMED_AT = tombstones.DOOMED, tombstones.DOOMED_AT
MARK, UNMARK = {"$set": {DOOMED: True}}, {"$unset": {DOOMED: ""}}
# Value and write documents no checkpoint names are deleted by maintenance once this old:
# a put writes its values before its checkpoint, so a younger one may be on its way.
STRAY_AGE = timedelta(hours=1)
NO_JOIN = {"join": {"$exists": False}}  # value and write documents of layout version 1
COPIED_FROM = "copied_from"  # on a copied checkpoint: the thread it was copied from


# Which of some doomed checkpoints (keys) to keep, given the threads' checkpoints as read.
Spare = Callable[[Sequence[Document], set[Key]], set[Key]]


class ThreadExistsError(ValueError):
    """``copy_thread`` onto a thread that already has checkpoints of its own."""

    def __init__(self, target_thread_id: str) -> None:
        super().__init__(
            f"thread {target_thread_id!r} already has checkpoints: copying onto it would merge "
            "two histories; delete it first (delete_thread, `mongo-ckpt delete`) or copy to "
            "a new thread id"
        )
        self.target_thread_id = target_thread_id


@dataclass
class Deleted:
    """What a deleting call deleted: the threads and the documents per collection."""

    threads: list[str] = field(default_factory=list)
    documents: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_KEY_FIELDS, 0))

    def add(self, collection: str, count: int) -> None:
        self.documents[collection] += count


class CheckpointOperations:
    """Builds each saver operation as a ``calls.Operation``."""

    def __init__(
        self,
        layout: Layout,
        serde: SerializerProtocol,
        filterable_metadata_keys: Collection[str] | None,
        distances: SnapshotDistances,
        list_deltas: ListDeltas | None = None,
    ) -> None:
        self.layout = layout
        self.serde = serde
        self.filterable_keys = filterable_metadata_keys
        self.deltas = list_deltas if list_deltas is not None else ListDeltas(enabled=False)
        # Counters of the checkpoints read, for the DeltaChannel history walks that follow.
        self.distances = distances

    def _where(self, db_name: str) -> str:
        """How errors name the saver's collections."""
        return f"database {db_name!r} (collections {', '.join(self.layout.by_logical().values())})"

    def setup(self, db_name: str, upgrade_limit: int | None) -> Operation[None]:
        """Check the recorded layout version; upgrade and record it when older, up to
        ``schema.SAVER_SETUP_VERSION`` (a new, empty database gets the current version).

        One round trip when nothing is to upgrade. Unversioned collections are new
        (indexes created), an earlier mongo-ckpt's (upgraded from version 1), or
        langgraph-checkpoint-mongodb's (refused: ``mongo-ckpt migrate`` converts them).
        Notes in ``deltas`` whether the recorded version allows list deltas.
        """
        key, where = schema.saver_key(self.layout.checkpoints), self._where(db_name)
        found = yield from schema.read(key, where)
        if found is not None and found >= schema.SAVER_SETUP_VERSION:
            self.deltas.note_layout(found >= schema.LIST_DELTAS_VERSION)
            return
        if found is None:
            sample = yield from find(
                CHECKPOINTS, {}, projection={"_id": 0, "checkpoint": 1}, limit=1
            )
            if not sample:
                found = schema.SAVER_SCHEMA_VERSION
            elif not isinstance(sample[0].get("checkpoint"), Mapping):
                raise schema.SchemaUpgradeRequired(
                    f"collection {self.layout.checkpoints!r} of {where} holds "
                    "langgraph-checkpoint-mongodb documents, which mongo-ckpt does not read: "
                    f"convert them into another database with `mongo-ckpt migrate "
                    f"--from-official --source-db {db_name} --db <new database>` and point "
                    "the saver at it"
                )
            else:
                found = 1
        yield from self.create_indexes()
        if found < 2:
            yield from self._add_join_keys(where, db_name, upgrade_limit)
        recorded = max(found, schema.SAVER_SETUP_VERSION)
        yield from schema.record(key, self.layout.by_logical(), recorded)
        self.deltas.note_layout(recorded >= schema.LIST_DELTAS_VERSION)

    def upgrade(self) -> Operation[None]:
        """Record the current layout version (after ``setup``): every writer reads list
        deltas, so they are written from now on."""
        key = schema.saver_key(self.layout.checkpoints)
        yield from schema.record(key, self.layout.by_logical(), schema.SAVER_SCHEMA_VERSION)
        self.deltas.note_layout(True)

    def recheck_layout(self, db_name: str) -> Operation[None]:
        """Read the recorded layout version again: another process may have upgraded it."""
        key = schema.saver_key(self.layout.checkpoints)
        found = yield from schema.read(key, self._where(db_name))
        self.deltas.note_layout(found is not None and found >= schema.LIST_DELTAS_VERSION)

    def create_indexes(self) -> Operation[None]:
        """Create the indexes ``layout.py`` defines; existing ones are left as they are."""
        models = index_models(self.layout)
        for logical, name in self.layout.by_logical().items():
            yield from create_indexes(logical, models[name])

    def _add_join_keys(
        self, where: str, db_name: str, upgrade_limit: int | None
    ) -> Operation[None]:
        """Upgrade 1 -> 2: the ``join`` keys, in place unless more than ``upgrade_limit``
        documents lack them."""
        if upgrade_limit is not None:
            missing = 0
            for collection in (BLOBS, WRITES):
                missing += yield from count_documents(collection, NO_JOIN, limit=upgrade_limit + 1)
            if missing > upgrade_limit:
                command = schema.upgrade_command(db_name, self.layout)
                raise schema.SchemaUpgradeRequired(
                    f"{where} needs its layout upgraded from version 1 to "
                    f"{schema.SAVER_SETUP_VERSION}, which rewrites more than {upgrade_limit} "
                    f"documents, too many for setup(): run `{command}` (or "
                    "saver.setup(upgrade_limit=None)) once, then start the application"
                )
        yield from self.backfill_join_keys()

    def get_tuple(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        query = checkpoint_query(*thread_key(config))
        attempts = 0
        while True:
            docs = yield from aggregate(CHECKPOINTS, tuple_pipeline(query, self.layout.writes))
            if not docs:
                return None
            doc, write_docs = split_joined(docs)
            blobs = blobs_query([doc])
            blob_docs = (yield from find(BLOBS, blobs)) if blobs else []
            try:
                return self._noted(Loaded(self.serde, blob_docs, write_docs), doc)
            except MissingValueError:
                attempts += 1
                if attempts == READ_ATTEMPTS or (yield from self._exists(doc)):
                    raise
                # Deleted (by maintenance) while it was read: read again.

    def _noted(self, loaded: Loaded, doc: Mapping[str, Any]) -> CheckpointTuple:
        """The tuple of ``doc``, its snapshot counters noted for a history walk."""
        result = loaded.checkpoint_tuple(doc)
        self.distances.note(key_of(doc), result.metadata)
        self.deltas.remember(doc)
        return result

    def delta_channel_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Operation[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        target = checkpoint_query(thread_id, checkpoint_ns, checkpoint_id)
        depth = MAX_DEPTH
        if checkpoint_id is not None:
            depth = self.distances.walk_depth((thread_id, checkpoint_ns, checkpoint_id), channels)

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
        return history

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
        thread_id, checkpoint_ns, parent_id = thread_key(config)
        checkpoint_id = coerce_id(checkpoint["id"], "checkpoint['id']")
        key = dict(zip(CHECKPOINT_KEY, (thread_id, checkpoint_ns, checkpoint_id)))
        metadata = get_checkpoint_metadata(config, metadata)
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        parent_chains = yield from self._parent_chains(
            key, parent_id, values, versions, new_versions
        )
        plan = self.deltas.plan(
            (thread_id, checkpoint_ns, checkpoint_id),
            parent_id,
            values,
            versions,
            new_versions,
            self.serde,
            parent_chains,
        )
        blobs = blob_requests(
            thread_id, checkpoint_ns, values, new_versions, self.serde, plan.deltas
        )
        doc = checkpoint_document(
            key, checkpoint, metadata, parent_id, self.serde, self.filterable_keys, plan.chains
        )
        check_checkpoint_size(doc)  # before the values: a refused put leaves nothing behind
        inserted: set[Any] = set()
        if blobs.requests:  # values first: a reader never sees a checkpoint without its values
            result = yield from _write_values(BLOBS, BLOB_KEY, blobs)
            inserted = {blobs.heads[i] for i in result.upserted_ids or () if i in blobs.heads}
            found = {k[2]: k[3] for k in blobs.heads.values() if k not in inserted}
            if found:  # stored by an earlier attempt: the stored value is the truth
                yield from self._adopt_stored(key, plan, values, found, inserted)
                doc["values"] = values_entries(plan.chains)
        write = UpdateOne(key, checkpoint_update(doc), upsert=True)
        if parent_id is None:
            yield from bulk_write(CHECKPOINTS, [write], ordered=True)
        else:
            # The checkpoint, then a probe of its parent: a parent deleted, or tombstoned
            # by maintenance about to delete it, takes the checkpoint back (``tombstones``).
            parent = tombstones.probe_parent({**key, "checkpoint_id": parent_id})
            result = yield from bulk_write(CHECKPOINTS, [write, parent], ordered=True)
            if not tombstones.parent_found(result):
                mine = 0 in (result.upserted_ids or ())  # this call inserted the checkpoint
                yield from self._judge_parent(key, parent_id, doc, inserted, mine)
        self.deltas.wrote((thread_id, checkpoint_ns, checkpoint_id), plan)
        return {"configurable": key}

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
                yield from _mark_values(inserted)
                raise
            chain = stored_chain(loaded.blobs, (thread_id, checkpoint_ns, channel, version))
            assert chain is not None  # the value was rebuilt from it
            if not same_value(self.serde, values[channel], stored) and not (
                yield from self._named_elsewhere(key, channel, version)
            ):
                yield from _mark_values(inserted)
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

    def _judge_parent(
        self,
        key: Mapping[str, str],
        parent_id: str,
        doc: Mapping[str, Any],
        inserted: set[Any],
        mine: bool,
    ) -> Operation[None]:
        """After a probe that missed the parent: accept a parent whose tombstone expired (on
        the server's clock), or one never stored when every value the checkpoint names is
        stored, unmarked, with the chain it names (and, unless this call inserted it, named
        by another stored checkpoint), and no DeltaChannel replays history; otherwise take
        the checkpoint back (``mine``: this call inserted it)."""
        parent = {**key, "checkpoint_id": parent_id}
        found = yield from find(CHECKPOINTS, parent, projection=_fields((DOOMED, DOOMED_AT)))
        if found:
            if not tombstones.is_live(found[0], (yield from server_now())):
                return
        elif not doc["replay"]:
            named = needed_values([doc])
            heads: builtins.list[Document] = []
            if named:
                query = {**blob_keys_query(named), "part": 0}
                heads = yield from find(BLOBS, query, projection=_fields(HEAD_FIELDS))
            if _chains_stored(heads, chains_of(doc["values"])) and (
                yield from self._still_named(key, named - inserted, mine)
            ):
                return
        yield from self._take_back(key, parent_id, inserted, mine)

    def _still_named(
        self, key: Mapping[str, str], borrowed: set[Any], mine: bool
    ) -> Operation[bool]:
        """Whether every value in ``borrowed`` (named by the checkpoint ``key``, not inserted
        by this call) is named by a stored checkpoint other than one this call inserted
        (``mine``): with its parent absent, a value no stored checkpoint names is one
        ``delete_thread`` is about to delete."""
        if not borrowed:
            return True
        query: dict[str, Any] = {
            "thread_id": key["thread_id"],
            "checkpoint_ns": key["checkpoint_ns"],
            "$or": [
                {"values": {"$elemMatch": {"channel": ch, "version": v}}}
                for _, _, ch, v in sorted(borrowed, key=repr)
            ],
        }
        if mine:
            query["checkpoint_id"] = {"$ne": key["checkpoint_id"]}
        found = yield from find(CHECKPOINTS, query, projection=SKELETON)
        return borrowed <= needed_values(found)

    def _take_back(
        self, key: Mapping[str, str], parent_id: str, inserted: set[Any], mine: bool
    ) -> Operation[None]:
        """Delete the checkpoint if this call inserted it (``mine``), leave the values it
        inserted marked for maintenance (which keeps any a stored checkpoint names), raise
        ``StaleParentError``."""
        thread_id, checkpoint_ns, checkpoint_id = key_of(key)
        if mine:
            yield from delete_many(CHECKPOINTS, key)
        yield from _mark_values(inserted)
        raise tombstones.StaleParentError(thread_id, checkpoint_ns, checkpoint_id, parent_id)

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
        if parent_id is None or not self.deltas.needs_parent(values, new_versions):
            return None
        parent = (key["thread_id"], key["checkpoint_ns"], parent_id)
        chains = self.deltas.known_chains(parent)
        if chains is None:
            query = dict(zip(CHECKPOINT_KEY, parent))
            docs = yield from find(CHECKPOINTS, query, projection=SKELETON)
            for doc in docs:
                self.deltas.remember(doc)
            chains = self.deltas.known_chains(parent) or {}
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
        requests = write_requests(key, writes, task_id, task_path or "", self.serde)
        if requests.requests:
            yield from _write_values(WRITES, WRITE_KEY, requests)

    def delete_thread(self, thread_id: str) -> Operation[None]:
        yield from self.delete_threads([coerce_id(thread_id, "thread_id")])

    def delete_threads(self, thread_ids: Sequence[str]) -> Operation[Deleted]:
        """Delete the threads whole (``delete_thread``, ``prune`` strategy ``delete``); what
        was deleted.

        By exact keys, as other maintenance: every checkpoint tombstoned at the look after
        the tombstones, its writes and the values it needs (``_delete_tombstoned``), then the
        threads' documents no checkpoint needs that are marked or older than ``STRAY_AGE``
        (``_delete_unneeded``). A put that lands meanwhile is refused when it continues
        from a checkpoint being deleted; one stored whole (without a parent, or with every
        value its own) keeps what it names.
        """
        ids = sorted(set(coerce_ids(thread_ids, "thread_ids")))
        deleted = Deleted(threads=ids)
        if not ids:
            return deleted
        self.deltas.forget(ids)
        now = yield from server_now()
        yield from self._delete_tombstoned(ids, None, _none, now, deleted)
        yield from self._delete_unneeded(ids, now, deleted)
        return deleted

    def delete_for_runs(self, run_ids: Sequence[str]) -> Operation[None]:
        ids = coerce_ids(run_ids, "run_ids")
        if not ids:
            return
        threads = yield from distinct(CHECKPOINTS, "thread_id", {"run_id": {"$in": ids}})
        # With no checkpoint of the runs left, this still finishes an earlier, cut call.
        skeletons = (yield from self._skeletons(threads)) if threads else []
        self.deltas.forget(threads)
        runs = set(ids)
        survivors = [s for s in skeletons if s.get("run_id") not in runs]
        # A run's checkpoint that a surviving checkpoint rebuilds DeltaChannel state from stays.
        keep = needed_ancestors(skeletons, survivors)
        doomed = [s for s in skeletons if s.get("run_id") in runs and key_of(s) not in keep]
        yield from self._delete_checkpoints(threads, doomed)

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
        ids = yield from self._skeletons([source])
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
            yield from _mark_values({(target, *k[1:]) for k in unused})
            writes = keys_query((target, *key_of(s)[1:]) for s in missed)
            yield from update_many(WRITES, writes, MARK)

    def check_copy_target(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        """Raise ``ThreadExistsError`` when the target has checkpoints of its own: copying
        would merge two histories. Checkpoints an earlier (maybe cut) copy of the same
        source wrote do not count, so the same copy again is harmless."""
        source = coerce_id(source_thread_id, "source_thread_id")
        target = coerce_id(target_thread_id, "target_thread_id")
        own = {"thread_id": target, COPIED_FROM: {"$ne": source}}
        if (yield from find(CHECKPOINTS, own, projection={"_id": 1}, limit=1)):
            raise ThreadExistsError(target)

    def backfill_join_keys(self) -> Operation[int]:
        """Add the ``join`` key to value and write documents stored before it existed."""
        updated = 0
        for collection, fields, build in (
            (BLOBS, BLOB_KEY, blob_join),
            (WRITES, WRITE_KEY[:3], write_join),
        ):
            projection = {f: 1 for f in fields}
            cursor = yield from find_cursor(collection, NO_JOIN, projection=projection)
            while docs := (yield from next_batch(cursor, COPY_BATCH)):
                requests: list[WriteRequest] = [
                    UpdateOne({"_id": d["_id"]}, {"$set": {"join": build(*key_of(d, fields))}})
                    for d in docs
                ]
                yield from bulk_write(collection, requests, ordered=False)
                updated += len(requests)
        return updated

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Operation[None]:
        ids = coerce_ids(thread_ids, "thread_ids")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"prune strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}")
        if not ids:
            return
        if strategy in ("delete", "delete_all"):
            yield from self.delete_threads(ids)
            return
        self.deltas.forget(ids)
        _, doomed = yield from self.prune_plan(ids)
        yield from self._delete_checkpoints(ids, doomed)

    def prune_plan(
        self, thread_ids: Sequence[str]
    ) -> Operation[tuple[builtins.list[Document], builtins.list[Document]]]:
        """What ``keep_latest`` would delete: ``(skeletons of the threads, doomed ones)``."""
        skeletons = yield from self._skeletons(coerce_ids(thread_ids, "thread_ids"))
        latest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
        for s in skeletons:
            ns_key = key_of(s)[:2]
            if ns_key not in latest or s["checkpoint_id"] > latest[ns_key]["checkpoint_id"]:
                latest[ns_key] = s
        # Keep each namespace's latest checkpoint and the ancestors its DeltaChannels replay.
        keep = {key_of(s) for s in latest.values()} | needed_ancestors(skeletons, latest.values())
        return skeletons, [s for s in skeletons if key_of(s) not in keep]

    def sweep_expired(self, ttl: float, batch: int = SWEEP_BATCH) -> Operation[builtins.list[str]]:
        """Delete every thread idle for longer than ``ttl`` seconds by the server's clock,
        ``batch`` threads at a time; return their ids."""
        now = yield from server_now()
        cutoff = now - timedelta(seconds=ttl)
        docs = yield from aggregate(CHECKPOINTS, inactive_threads_pipeline(cutoff))
        deleted = yield from self.delete_idle(sorted(doc["_id"] for doc in docs), cutoff, batch)
        return deleted.threads

    def delete_idle(
        self, thread_ids: Sequence[str], cutoff: datetime, batch: int = SWEEP_BATCH
    ) -> Operation[Deleted]:
        """Delete the threads of ``thread_ids`` that have no checkpoint stored since
        ``cutoff`` (a time of the server's clock), ``batch`` threads at a time.

        The ids may have been chosen long before (a confirmation prompt in between): each
        thread is judged again, after its tombstones, so a thread that became active is
        spared.
        """
        ids = sorted(set(coerce_ids(thread_ids, "thread_ids")))
        deleted = Deleted()
        for start in range(0, len(ids), batch):
            yield from self._expire(ids[start : start + batch], cutoff, deleted)
        if not ids:  # it finishes a sweep (or prune) cut after its delete
            now = yield from server_now()
            yield from self._delete_unneeded([], now, deleted)
        return deleted

    def _expire(
        self, thread_ids: Sequence[str], cutoff: datetime, deleted: Deleted
    ) -> Operation[None]:
        """Delete those of ``thread_ids`` idle since ``cutoff``; count them into ``deleted``.

        Tombstones first, then a look for checkpoints stored since the cutoff: a put that
        came first makes its thread active again; one that comes later finds its parent
        tombstoned and takes its checkpoint back (``tombstones``); one without a parent (a
        new conversation on the thread id) is not one this call tombstoned, so it stays.
        """
        now = yield from server_now()

        def active(stored: Sequence[Mapping[str, Any]], gone: set[Key]) -> set[Key]:
            recent = _active_threads(stored, cutoff)
            return {k for k in gone if k[0] in recent}

        stored = yield from self._delete_tombstoned(thread_ids, None, active, now, deleted)
        recent = _active_threads(stored, cutoff)
        expired = [t for t in thread_ids if t not in recent]
        self.deltas.forget(expired)
        deleted.threads.extend(expired)
        yield from self._delete_unneeded(expired, now, deleted)

    def _lease_renewed(self, doomed: set[Key]) -> Operation[bool]:
        """Renew the tombstones on the checkpoints ``doomed`` (this call's or another's) set
        more than half their lease ago by the server's clock: a put meanwhile may have seen
        them expired, so the caller reads the threads again (``True``)."""
        now = yield from server_now()
        query = tombstones.half_spent(keys_query(doomed), now)
        result = yield from update_many(CHECKPOINTS, query, {"$set": {DOOMED_AT: now}})
        return result.matched_count > 0

    def _skeletons(self, thread_ids: Iterable[str]) -> Operation[builtins.list[Document]]:
        query = {"thread_id": {"$in": sorted(thread_ids)}}
        return (yield from find(CHECKPOINTS, query, projection=LOOK))

    def _delete_checkpoints(
        self, thread_ids: Sequence[str], doomed: Sequence[Mapping[str, Any]]
    ) -> Operation[None]:
        """Delete ``doomed`` checkpoints, their writes, and the values only they need
        (``_delete_tombstoned``), sparing those a stored survivor rebuilds DeltaChannels
        from; then the marked documents no checkpoint needs (``_delete_unneeded``, which
        also finishes any earlier call that was cut)."""
        planned = {key_of(s) for s in doomed}
        now = yield from server_now()
        deleted = Deleted()
        if planned:

            def needed(stored: Sequence[Mapping[str, Any]], gone: set[Key]) -> set[Key]:
                return gone & needed_ancestors(stored, [s for s in stored if key_of(s) not in gone])

            yield from self._delete_tombstoned(thread_ids, planned, needed, now, deleted)
        yield from self._delete_unneeded(thread_ids, now, deleted)

    def _delete_tombstoned(
        self,
        thread_ids: Sequence[str],
        planned: set[Key] | None,
        spare: Spare,
        now: datetime,
        deleted: Deleted,
    ) -> Operation[builtins.list[Document]]:
        """Delete, by exact keys, the checkpoints ``planned`` (``None``: every checkpoint of
        ``thread_ids``) that carry a tombstone at the look, except those ``spare(stored,
        keys)`` keeps; return the threads' checkpoints as last read. Each step is safe to
        cut and retry:

        1. tombstone at the server's time ``now`` the planned checkpoints without a live
           tombstone (another call's is never taken over, nor lifted: that call, or one
           cut, is deleting them too), then read the threads' checkpoints: one stored
           since has no tombstone and is a survivor. A put that comes after the
           tombstones finds its parent tombstoned and takes its checkpoint back
           (``tombstones``); one stored whole without it (no parent) stays;
        2. spare (un-tombstone, by this call's token) what ``spare`` keeps, and mark the
           writes of the rest and the value versions that they, and no stored survivor,
           need (``values`` names list-delta bases too);
        3. right before the delete, re-check the lease (``_lease_renewed``): when half of
           it has passed, read the threads again and spare and unmark anew, since a put
           may have seen a tombstone expired;
        4. delete those checkpoints that still carry a tombstone (``deleted`` counts them).
        """
        token = ObjectId()
        threads = {"thread_id": {"$in": sorted(thread_ids)}}
        chosen = threads if planned is None else keys_query(planned)
        claim = tombstones.tombstone(token, now)
        yield from update_many(CHECKPOINTS, tombstones.unclaimed(chosen, now), claim)
        stored = yield from self._skeletons(thread_ids)
        doomed = {
            key_of(s) for s in stored if DOOMED in s and (planned is None or key_of(s) in planned)
        }
        marked_writes: set[Key] = set()
        marked_values: set[Key] = set()
        while True:
            gone = doomed & {key_of(s) for s in stored}
            gone -= spare(stored, gone)
            if doomed - gone:
                kept = {**keys_query(doomed - gone), DOOMED: token}
                yield from update_many(CHECKPOINTS, kept, tombstones.UNTOMBSTONE)
            survivors = [s for s in stored if key_of(s) not in gone]
            unused = needed_values(s for s in stored if key_of(s) in gone)
            unused -= needed_values(survivors)
            if gone - marked_writes:
                yield from update_many(WRITES, keys_query(gone - marked_writes), MARK)
            yield from _mark_values(unused - marked_values)
            # Spared, or needed by a survivor, since the last pass: unmarked again.
            if marked_writes - gone:
                yield from update_many(WRITES, keys_query(marked_writes - gone), UNMARK)
            if marked_values - unused:
                yield from update_many(BLOBS, blob_keys_query(marked_values - unused), UNMARK)
            marked_writes, marked_values = gone, unused
            if not gone or not (yield from self._lease_renewed(gone)):
                break
            stored = yield from self._skeletons(thread_ids)
        if gone:
            query = {**keys_query(gone), DOOMED: {"$exists": True}}
            deleted.add(CHECKPOINTS, (yield from delete_many(CHECKPOINTS, query)).deleted_count)
        return stored

    def _delete_unneeded(
        self, thread_ids: Iterable[str], now: datetime, deleted: Deleted
    ) -> Operation[None]:
        """Delete the writes and values that no checkpoint needs, read now: the marked ones
        (of this call, or of an earlier call that was cut, in any thread) and, in
        ``thread_ids``, those older than ``STRAY_AGE`` at ``now`` (the server's time; a
        ``put`` or ``put_writes`` cut and never retried), counted into ``deleted``. Parts
        of such documents go too, and so do old parts that their head does not join
        (``payload.stray_parts``)."""
        threads = set(thread_ids)
        cutoff = now - STRAY_AGE
        # The threads' documents by the key index; their age is judged here (``_older``).
        query = {"$or": [{DOOMED: True}, {"thread_id": {"$in": sorted(threads)}}]}
        found: dict[str, builtins.list[Document]] = {}
        stray: set[Any] = set()
        for collection, fields in ((WRITES, WRITE_KEY), (BLOBS, BLOB_KEY)):
            projection = _fields((*fields, "part", "vid", DOOMED, TOUCHED_AT))
            docs = yield from find(collection, query, projection=projection)
            found[collection] = [d for d in docs if d.get(DOOMED) or _older(d, cutoff)]
            # Parts no head joins, judged against every head of the threads.
            own = [d for d in docs if d["thread_id"] in threads]
            stray.update(stray_parts(own, fields, headless=True))
        if not any(found.values()):
            return
        current = yield from self._skeletons({d["thread_id"] for ds in found.values() for d in ds})
        needed = {
            WRITES: {key_of(s) for s in current},
            BLOBS: needed_values(current),
        }
        for collection, owner_key in ((WRITES, CHECKPOINT_KEY), (BLOBS, BLOB_KEY)):
            docs = found[collection]
            ids = {
                d["_id"]
                for d in docs
                if key_of(d, owner_key) not in needed[collection]
                or (d["_id"] in stray and _older(d, cutoff))
            }
            if ids:
                owners = sorted({d["thread_id"] for d in docs if d["_id"] in ids})
                # Still marked or not written since: a value write after the find (a retry
                # adopting the value unmarks and touches it) keeps its document.
                chosen = {
                    "thread_id": {"$in": owners},
                    "_id": {"$in": sorted(ids)},
                    "$or": [
                        {DOOMED: True},
                        {TOUCHED_AT: {"$lt": cutoff}},
                        {TOUCHED_AT: {"$exists": False}},
                    ],
                }
                result = yield from delete_many(collection, chosen)
                deleted.add(collection, result.deleted_count)


def _none(stored: Sequence[Mapping[str, Any]], gone: set[Key]) -> set[Key]:
    """Spare nothing (``Spare``)."""
    return set()


def _active_threads(stored: Iterable[Mapping[str, Any]], cutoff: datetime) -> set[str]:
    """The threads with a checkpoint of ``stored`` written at or after ``cutoff``."""
    return {
        s["thread_id"]
        for s in stored
        if isinstance(s.get("created_at"), datetime) and aware(s["created_at"]) >= cutoff
    }


def _older(doc: Mapping[str, Any], cutoff: datetime) -> bool:
    """Whether ``doc`` was last written before ``cutoff`` (server time): by ``touched_at``,
    or by its ObjectId ``_id`` when written before ``touched_at`` existed."""
    touched = doc.get(TOUCHED_AT)
    if isinstance(touched, datetime):
        return aware(touched) < cutoff
    return touched is None and isinstance(doc["_id"], ObjectId) and doc["_id"] < (
        ObjectId.from_datetime(cutoff)
    )


def _fields(names: Iterable[str]) -> dict[str, int]:
    return {name: 1 for name in names}


HEAD_FIELDS = (*BLOB_KEY, "base", DOOMED)


def _is_delta_head(doc: Mapping[str, Any]) -> bool:
    return doc.get("part", 0) == 0 and "base" in doc


def _chains_stored(heads: Iterable[Mapping[str, Any]], chains: Mapping[str, Sequence[Any]]) -> bool:
    """Whether every version ``chains`` name has a stored, unmarked head (``heads``) whose
    base is the version before it in its chain (none for the first)."""
    by_key = {(h["channel"], h["version"]): h for h in heads}
    for channel, chain in chains.items():
        for position, version in enumerate(chain):
            head = by_key.get((channel, version))
            if head is None or head.get(DOOMED):
                return False
            if head.get("base") != (chain[position - 1] if position else None):
                return False
    return True


def _mark_values(keys: set[Any]) -> Operation[None]:
    """Mark the values of exact ``(thread, ns, channel, version)`` keys for maintenance."""
    if keys:
        yield from update_many(BLOBS, blob_keys_query(keys), MARK)


def _write_values(
    collection: str, key_fields: tuple[str, ...], writes: ValueWrites
) -> Operation[BulkWriteResult]:
    """Write values in one ordered bulk write, so each head lands after its parts.

    Values in several parts then cost one ``find`` of their part ids, and parts left by a
    cut or losing attempt under the same keys are deleted (by ``_id``) when there are any.
    """
    result = yield from bulk_write(collection, writes.requests, ordered=True)
    if not writes.multipart:
        return result
    query = writes.multipart[0] if len(writes.multipart) == 1 else {"$or": writes.multipart}
    projection = _fields(("part", "vid", *key_fields))
    docs = yield from find(collection, query, projection=projection)
    stray = stray_parts(docs, key_fields)
    if stray:
        thread_id = writes.multipart[0]["thread_id"]  # one thread per call: routes the delete
        yield from delete_many(collection, {"thread_id": thread_id, "_id": {"$in": stray}})
    return result


def _now() -> datetime:
    return datetime.now(timezone.utc)


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
    doc = {k: v for k, v in doc.items() if k != "_id"} | {"thread_id": target}
    key = {f: doc.get(f) for f in _KEY_FIELDS[collection]}
    if collection == CHECKPOINTS:
        # A tombstone belongs to the source's maintenance, and the copy is the target's
        # activity now: ``created_at`` is the server's time of the copy.
        own = (tombstones.DOOMED, tombstones.DOOMED_AT, "created_at")
        copied = {k: v for k, v in doc.items() if k not in own} | {COPIED_FROM: source}
        return UpdateOne(key, checkpoint_update(copied), upsert=True)
    if collection == BLOBS:
        doc["join"] = blob_join(*key_of(doc, BLOB_KEY))
    elif collection == WRITES:
        doc["join"] = write_join(*key_of(doc))
    return ReplaceOne(key, doc, upsert=True)
