"""The checkpointer's operations, written once for the sync and the async saver.

``CheckpointOperations`` holds LangGraph's read contract (``get_tuple``, ``list``, the
DeltaChannel history) and setup; its writes (``put``, ``put_writes``) are in ``writing``,
``copy_thread`` in ``copying``; what deletes next to live writers is in ``maintenance``.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt import inspection, listdelta, maintenance, schema, thread_settings
from mongo_ckpt.calls import (
    Calling,
    Document,
    Emit,
    Operation,
    aggregate,
    create_indexes,
    find,
    find_cursor,
    next_batch,
)
from mongo_ckpt.client_bulk import PutPath
from mongo_ckpt.copying import CopyOperations
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
    walk_cut_short,
)
from mongo_ckpt.identifiers import check_limit, coerce_id, thread_key
from mongo_ckpt.layout import (
    BLOBS,
    CHECKPOINT_KEY,
    CHECKPOINTS,
    WRITES,
    Layout,
    index_models,
)
from mongo_ckpt.maintenance import Deleted as Deleted  # the command line imports it here
from mongo_ckpt.memory import CheckpointKey, CheckpointMemory
from mongo_ckpt.official import migrate_command
from mongo_ckpt.reading import (
    LATEST,
    Loaded,
    MissingValueError,
    blob_keys_query,
    blobs_query,
    checkpoint_query,
    key_of,
    list_query,
    needed_values,
    split_joined,
    tuple_pipeline,
    writes_query,
)
from mongo_ckpt.snapshot_distance import MAX_DEPTH
from mongo_ckpt.writing import WriteOperations

FIRST_PAGE = 10
MAX_PAGE = 250
READ_ATTEMPTS = 3  # reads of a checkpoint that maintenance deletes while it is being read


class _Prefetch(NamedTuple):
    """A ``get_tuple`` that reads a DeltaChannel history along: its aggregation, the
    channels and the checkpoints its range read takes."""

    pipeline: list[Document]
    channels: Sequence[str]
    limit: int


class CheckpointOperations(WriteOperations, CopyOperations):
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
        their history (``delta.range_history_pipeline``, ``whole``), kept for the
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
        """The history read along a ``get_tuple`` (``range_history_pipeline``, ``whole``),
        when this instance expects the checkpoint it finds to replay DeltaChannels and
        knows a bound of their seeds."""
        expected = self.memory.replayed(thread_id, checkpoint_ns, checkpoint_id)
        if expected is None:
            return None
        key, channels = expected
        _, floor, limit = self._range_bound(key, channels)
        if limit is None:
            return None
        collections = self.layout.by_logical()
        at = (thread_id, checkpoint_ns, checkpoint_id)
        pipeline = range_history_pipeline(collections, *at, channels, floor, limit, whole=True)
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
            fields = {"parent_checkpoint_id": 1}
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

    def set_thread_ttl(self, thread_id: str, ttl: float | str) -> Operation[None]:
        """Store the thread's own ttl (``thread_settings``), checked before any write."""
        thread_id, ttl = coerce_id(thread_id, "thread_id"), thread_settings.check_ttl(ttl)
        yield from thread_settings.set_ttl(thread_id, ttl)
        self.memory.own_ttl_stored(thread_id, ttl)

    # The command line's entry points into maintenance (``mongo_ckpt.cli.maintenance``).
    def delete_threads(self, thread_ids: Sequence[str]) -> Operation[Deleted]:
        return maintenance.delete_threads(self.memory.forget, thread_ids)

    def delete_idle(
        self, thread_ids: Sequence[str], cutoff: datetime, strategy: str = "delete"
    ) -> Operation[Deleted]:
        return maintenance.delete_idle(self.memory.forget, thread_ids, cutoff, strategy=strategy)

    def prune_plan(
        self, thread_ids: Sequence[str]
    ) -> Operation[tuple[builtins.list[Document], builtins.list[Document]]]:
        return maintenance.prune_plan(thread_ids)
