"""What the sync and the async saver share: construction and every public method."""

from __future__ import annotations

import builtins
import numbers
import random
import time
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from pymongo.write_concern import WriteConcern
from typing_extensions import Self

from mongo_ckpt import client_bulk, leases, maintenance, rekeying, thread_settings
from mongo_ckpt.calls import CLIENT, Operation
from mongo_ckpt.client_bulk import ClientCalls
from mongo_ckpt.connection import (
    DEFAULT_DB_NAME,
    DEFAULT_WRITE_CONCERN,
    ClientT,
    Owned,
    acknowledged,
    adopt_client,
    with_write_concern,
)
from mongo_ckpt.layout import CHECKPOINTS, WRITES, Layout
from mongo_ckpt.memory import CheckpointMemory
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.schema import SCHEMA, SCHEMA_COLLECTION
from mongo_ckpt.telemetry import SpanInfo, Tracing, operation_tracer
from mongo_ckpt.thread_settings import MAX_TTL_SECONDS

T = TypeVar("T")

# Metadata LangGraph itself writes; the only keys kept in plain BSON (for
# ``list(filter=...)``) when the serializer encrypts, unless the user adds more.
STRUCTURAL_METADATA_KEYS = frozenset({"source", "step", "run_id", "parents"})


class MongoSaverBase(BaseCheckpointSaver[str], Generic[ClientT]):
    """State and the public API common to ``MongoDBSaver`` and ``AsyncMongoDBSaver``
    (``ClientT``: the clients the class accepts).

    Subclasses mix in the four drivers ``_run``, ``_iter``, ``_arun`` and ``_aiter``.
    """

    def __init__(
        self,
        client: ClientT,
        db_name: str = DEFAULT_DB_NAME,
        checkpoint_collection_name: str = "checkpoints",
        writes_collection_name: str = "checkpoint_writes",
        ttl: float | None = None,
        serde: SerializerProtocol | None = None,
        *,
        blobs_collection_name: str = "checkpoint_blobs",
        threads_collection_name: str = "checkpoint_threads",
        filterable_metadata_keys: Collection[str] | None = None,
        sweep_interval: float | None = None,
        write_concern: WriteConcern | None = DEFAULT_WRITE_CONCERN,
        list_deltas: bool = True,
        tracing: Tracing | None = None,
        client_bulk_write: bool | None = None,
        ttl_strategy: str = "delete",
        refresh_on_read: bool = False,
    ) -> None:
        """Args:
        client: a PyMongo/Motor/mongomock client; never closed by the saver.
        db_name, checkpoint_collection_name, writes_collection_name: where data lives.
        ttl: seconds of inactivity after which a whole thread expires (see sweep_expired),
            at most ``MAX_TTL_SECONDS`` (100 years).
        ttl_strategy: what expiry does to a thread: ``"delete"`` (default) deletes it whole;
            ``"keep_latest"`` prunes it to each namespace's latest checkpoint (as
            ``prune``), so the conversation can go on where it stopped.
        refresh_on_read: a ``get_tuple`` (every run, ``get_state``) that finds the thread
            also records the read as the thread's activity, so a thread only read does not
            expire; that read then writes (once a minute per thread and instance at most,
            or every tenth of ``ttl``, or of the thread's own ttl this instance stored,
            when shorter). Off by default.
        serde: serializer, e.g. ``EncryptedSerializer``.
        blobs_collection_name: the collection of channel values.
        threads_collection_name: the collection of the settings of single threads
            (``set_thread_ttl``).
        filterable_metadata_keys: metadata keys kept in plain BSON for ``list(filter=...)``
            besides LangGraph's own (source, step, run_id, parents); all keys by default,
            only LangGraph's own when ``serde`` encrypts.
        sweep_interval: with a ``ttl``, a ``put`` starts a sweep of expired threads in the
            background (a daemon thread, or a task on the running loop; one at a time, its
            errors logged on the ``mongo_ckpt`` logger) when this many seconds have passed
            since the last automatic sweep (default: ``min(ttl, 3600)``); reads never sweep.
        write_concern: what the saver's writes wait for; default ``w="majority", j=True``
            (``None``: the client's own).
        list_deltas: store a new version of a list channel value as its difference
            from an earlier version this saver wrote or read on the thread (docs/architecture.md,
            "List deltas"), once the database records that every writer reads them (a new
            database, or after ``upgrade()``); ``False`` stores every version whole.
        tracing: OpenTelemetry spans (``mongo_ckpt.telemetry.Tracing``); by default
            traced when a global tracer provider is set (see docs/observability.md).
        client_bulk_write: send a ``put`` (values, checkpoint, parent probe) as one
            client-level ``bulkWrite`` command (MongoDB 8.0+ and PyMongo 4.9+ or Motor
            3.7+) instead of one bulk write per collection: ``None`` (default) where the
            server and the client library have it (decided once, at setup, by a
            ``hello``); ``False`` never; ``True`` always (setup raises
            ``ClientBulkWriteUnavailable`` where they do not). ``uses_client_bulk_write``
            tells which, after setup; with ``None`` it turns ``False`` for good once a
            primary without the command refuses it (a failover to an older release).
        """
        adopt_client(self, client)
        super().__init__(serde=serde)
        given: Any = client  # ClientT is a union of client types: one client's API
        self.client = given
        self.db = given[db_name]
        self.layout = Layout(
            checkpoint_collection_name,
            blobs_collection_name,
            writes_collection_name,
            threads_collection_name,
        )
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, numbers.Real) or ttl <= 0
        ):
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if ttl is not None and not ttl <= MAX_TTL_SECONDS:  # also refuses inf and NaN
            raise ValueError(
                f"ttl must be at most {MAX_TTL_SECONDS} seconds (100 years), got {ttl!r}; "
                "pass ttl=None for threads that never expire"
            )
        maintenance.check_sweep_strategy(ttl_strategy)
        self.ttl, self.ttl_strategy = ttl, ttl_strategy
        self.refresh_on_read = refresh_on_read
        self._refresh_interval = min(60.0, (ttl or 600.0) / 10)
        self.sweep_interval = sweep_interval if sweep_interval is not None else min(ttl or 0, 3600)
        self._next_sweep = 0.0
        if filterable_metadata_keys is not None:
            self.filterable_metadata_keys: frozenset[str] | None = STRUCTURAL_METADATA_KEYS | set(
                filterable_metadata_keys
            )
        elif isinstance(serde, EncryptedSerializer):
            self.filterable_metadata_keys = STRUCTURAL_METADATA_KEYS
        else:
            self.filterable_metadata_keys = None
        self.collections: dict[str, Any] = {
            logical: acknowledged(
                self,
                with_write_concern(self.db[name], write_concern),
                " and leave write_concern= at its default (w='majority')",
            )
            for logical, name in self.layout.by_logical().items()
        }
        self.collections[SCHEMA] = with_write_concern(self.db[SCHEMA_COLLECTION], write_concern)
        self.collections[CLIENT] = ClientCalls(given, write_concern)
        self.client_bulk_write = client_bulk_write
        self._put_path = client_bulk.PutPath(given, client_bulk_write)
        self.memory = CheckpointMemory(list_deltas)
        self._is_setup = False
        self._tracer = operation_tracer(tracing, db_name)

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        db_name: str = DEFAULT_DB_NAME,
        checkpoint_collection_name: str = "checkpoints",
        writes_collection_name: str = "checkpoint_writes",
        ttl: float | None = None,
        serde: SerializerProtocol | None = None,
        *,
        blobs_collection_name: str = "checkpoint_blobs",
        threads_collection_name: str = "checkpoint_threads",
        filterable_metadata_keys: Collection[str] | None = None,
        sweep_interval: float | None = None,
        write_concern: WriteConcern | None = DEFAULT_WRITE_CONCERN,
        list_deltas: bool = True,
        tracing: Tracing | None = None,
        client_bulk_write: bool | None = None,
        ttl_strategy: str = "delete",
        refresh_on_read: bool = False,
        client_kwargs: dict[str, Any] | None = None,
        timeoutMS: int | None = None,  # noqa: N803 (PyMongo's spelling)
    ) -> Owned[Self]:
        """A saver on a new client of the class's mode (``MongoClient``,
        ``AsyncMongoClient``), closed when the context exits: ``with
        MongoDBSaver.from_conn_string(uri) as saver``, ``async with
        AsyncMongoDBSaver.from_conn_string(uri) as saver``. The arguments are the
        constructor's, in the official package's order; ``client_kwargs`` go to the client,
        whose ``timeoutMS`` is 10 s unless the URI, ``timeoutMS`` or ``client_kwargs`` set it.
        """
        return Owned(
            cls, conn_string, client_kwargs, timeoutMS,
            lambda client: cls(
                client, db_name, checkpoint_collection_name, writes_collection_name, ttl,
                serde, blobs_collection_name=blobs_collection_name,
                threads_collection_name=threads_collection_name,
                filterable_metadata_keys=filterable_metadata_keys,
                sweep_interval=sweep_interval, write_concern=write_concern,
                list_deltas=list_deltas, tracing=tracing, client_bulk_write=client_bulk_write,
                ttl_strategy=ttl_strategy, refresh_on_read=refresh_on_read,
            ),
        )

    @property
    def checkpoint_collection(self) -> Any:
        """The checkpoints collection (the attribute of the official ``MongoDBSaver``)."""
        return self.collections[CHECKPOINTS]

    @property
    def writes_collection(self) -> Any:
        """The pending-writes collection (the attribute of the official ``MongoDBSaver``)."""
        return self.collections[WRITES]

    @property
    def uses_client_bulk_write(self) -> bool:
        """Whether puts go as one client-level ``bulkWrite`` (decided at setup; ``False``
        for good once the server refuses the command)."""
        return self._put_path.namespaces is not None

    @property
    def ops(self) -> CheckpointOperations:
        """The operations, on the current ``serde`` (``with_allowlist`` clones replace it)."""
        return CheckpointOperations(
            self.layout, self.serde, self.filterable_metadata_keys, self.memory, self._put_path
        )

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """Monotonic version strings with a random tail, so forked branches never collide.

        Twelve zero-padded digits keep string order equal to numeric order (and above
        any longer zero-padded version); versions are repeated in every checkpoint's
        ``channel_versions`` and ``versions_seen``, so they are kept short.
        """
        if current is None:
            number = 0
        elif isinstance(current, (int, float)):
            number = int(current)
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:012}.{random.getrandbits(40):010x}"

    def _prepared(self, operation: Operation[T], span: SpanInfo | None) -> Operation[T]:
        """``operation``, preceded by setup on first use; in ``span`` when traced."""
        prepared = self._after_setup(operation)
        if self._tracer is None or span is None:
            return prepared
        return self._tracer.traced(
            f"mongo_ckpt.{span.name}",
            prepared,
            thread_id=span.thread_id,
            checkpoint_ns=span.checkpoint_ns,
            thread_ids=span.thread_ids,
        )

    def _after_setup(self, operation: Operation[T]) -> Operation[T]:
        yield from self._setup_once()
        return (yield from operation)

    def _sweep_if_due(self) -> None:
        """After a ``put`` with a ``ttl``: start a sweep of expired threads in the
        background, at most once per ``sweep_interval`` and one at a time (its latency and
        errors never reach a user's call)."""
        if self.ttl is not None and time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.sweep_interval
            self._start_background(
                self._sweep(), "sweep of expired threads", SpanInfo("sweep_expired")
            )

    def _setup_once(self) -> Operation[None]:
        """The layout version check (with indexes on new collections), unless done
        already. The first setup also decides whether puts use the client-level bulk write
        (once per saver)."""
        if not self._is_setup:
            yield from self._put_path.decide(self.db.name, self.layout.by_logical())
            yield from self.ops.setup(self.db.name)
            self._is_setup = True

    def _read_tuple(self, config: RunnableConfig) -> Operation[CheckpointTuple | None]:
        found = yield from self.ops.get_tuple(config)
        if found is not None and self.refresh_on_read:
            thread_id = found.config["configurable"]["thread_id"]
            own = self.memory.own_ttl(thread_id)
            interval = min(self._refresh_interval, own / 10 if isinstance(own, float) else 60.0)
            if self.memory.read_due(thread_id, interval):
                yield from thread_settings.touch(thread_id)
                self.memory.read_recorded(thread_id)
        return found

    def _sweep(self) -> Operation[builtins.list[str]]:
        return maintenance.sweep_expired(self.memory.forget, self.ttl, strategy=self.ttl_strategy)

    if TYPE_CHECKING:  # the drivers, from ``drivers.SyncDriver`` or ``drivers.AsyncDriver``

        def _run(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

        def _iter(
            self, operation: Operation[Any], span: SpanInfo | None = None
        ) -> Iterator[Any]: ...

        async def _arun(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

        def _aiter(
            self, operation: Operation[Any], span: SpanInfo | None = None
        ) -> AsyncIterator[Any]: ...

        def _start_background(
            self, operation: Operation[Any], what: str, span: SpanInfo
        ) -> None: ...

        def _join_background(self, timeout: float | None, *, stop: bool = False) -> bool: ...

        async def _ajoin_background(self, timeout: float | None, *, stop: bool = False) -> bool: ...

    # -- sync API -------------------------------------------------------------

    def setup(self) -> None:
        """Check the layout version and, on new collections, create the indexes and record
        the version (idempotent; also done on first use). One round trip on a database set
        up before.

        Raises ``SchemaTooNewError`` for data of a newer mongo-ckpt, and
        ``SchemaUpgradeRequired`` for langgraph-checkpoint-mongodb data (``mongo-ckpt
        migrate`` converts it) and data of a pre-release layout; nothing is written then.
        """
        self._is_setup = False
        self._run(self._setup_once(), SpanInfo("setup"))

    def upgrade(self) -> None:
        """Set up, then take the data up every layout version of this release, those only an
        upgrade takes included (``schema.LADDERS``; idempotent; with one layout there is
        nothing to do)."""
        self._is_setup = False
        self._run(self.ops.upgrade(self.db.name), SpanInfo("upgrade"))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint at ``config`` (the latest of its thread/namespace without an id)."""
        return self._run(self._read_tuple(config), SpanInfo.of_config("get_tuple", config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config``/``filter``/``before``, newest first, streamed."""
        return self._iter(
            self.ops.list(config, filter, before, limit), SpanInfo.of_config("list", config)
        )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; only the channels in ``new_versions`` get new value documents.

        With a ``ttl``, it then starts the automatic sweep when one is due (``sweep_interval``),
        in the background: ``join_sweep`` waits for it."""
        stored = self._run(
            self.ops.put(config, checkpoint, metadata, new_versions),
            SpanInfo.of_config("put", config),
        )
        self._sweep_if_due()
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes in one bulk write."""
        self._run(
            self.ops.put_writes(config, writes, task_id, task_path),
            SpanInfo.of_config("put_writes", config),
        )

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of a thread."""
        self._run(
            maintenance.delete_thread(self.memory.forget, thread_id),
            SpanInfo("delete_thread", thread_id),
        )

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) created by the given runs."""
        self._run(
            maintenance.delete_for_runs(self.memory.forget, run_ids),
            SpanInfo("delete_for_runs"),
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's complete history (all namespaces, values, writes) to another id."""
        self._run(
            self.ops.copy_thread(source_thread_id, target_thread_id),
            SpanInfo("copy_thread", source_thread_id, thread_ids=[target_thread_id]),
        )

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes since each channel's seed, plus the seed value, in one aggregation."""
        return self._run(
            self.ops.delta_channel_history(config, channels),
            SpanInfo.of_config("get_delta_channel_history", config),
        )

    def sweep_expired(self) -> builtins.list[str]:  # `list` is the method below
        """Expire every thread idle for longer than its ttl (by the server's clock): its own
        (``set_thread_ttl``), else the saver's ``ttl`` (without one, only threads with a ttl
        of their own expire), in batches, as ``ttl_strategy`` says; return their ids."""
        return self._run(self._sweep(), SpanInfo("sweep_expired"))

    def set_thread_ttl(self, thread_id: str, ttl: float | str) -> None:
        """Give the thread a ttl of its own: seconds of inactivity after which it expires
        (``ttl_strategy`` says how), ``"never"``, or ``"default"`` (the saver's ``ttl``
        again). A put whose ``configurable`` holds ``thread_ttl`` sets it too."""
        self._run(self.ops.set_thread_ttl(thread_id, ttl), SpanInfo("set_thread_ttl", thread_id))

    def lease_thread(
        self,
        thread_id: str,
        *,
        seconds: float = leases.LEASE_SECONDS,
        take_over: bool = False,
        owner: str | None = None,
    ) -> str:
        """Take the thread's owner lease for ``seconds`` (by the server's clock; every
        fenced write renews it) and return the owner token: runs whose ``configurable``
        holds it as ``thread_owner`` write only while it holds the lease, else raise
        ``ThreadLeaseLost`` having written nothing. ``ThreadLeaseHeld`` while another
        owner's lease runs, unless ``take_over``; ``owner``: renew that token's lease."""
        take = leases.take(thread_id, owner, seconds, take_over)
        return self._run(take, SpanInfo("lease_thread", thread_id))

    def release_thread(self, thread_id: str, owner: str) -> bool:
        """End ``owner``'s lease of the thread (its later writes stay fenced); whether it
        held it."""
        return self._run(leases.release(thread_id, owner), SpanInfo("release_thread", thread_id))

    @contextmanager
    def thread_lease(
        self, thread_id: str, *, seconds: float = leases.LEASE_SECONDS, take_over: bool = False
    ) -> Iterator[str]:
        """``lease_thread`` for the block, released after it: the owner token, for a run's
        ``configurable["thread_owner"]``."""
        owner = self.lease_thread(thread_id, seconds=seconds, take_over=take_over)
        try:
            yield owner
        finally:
            self.release_thread(thread_id, owner)

    def rekey(self, *, batch_size: int = rekeying.BATCH) -> rekeying.Rekeyed:
        """Encrypt every stored checkpoint, value and pending write that a ``KeyRing`` key
        other than the current one wrote under the current key, beside live writers, each
        read back; run it again to resume (``mongo_ckpt.rekeying``). ``MissingKeyError``
        names a key the ring lacks; the values before it stay done."""
        rekey = rekeying.rekey(rekeying.ring_of(self.serde), rekeying.SAVER_PLACES, batch_size)
        return self._run(rekey, SpanInfo("rekey"))

    def join_sweep(self, timeout: float | None = None) -> bool:
        """Wait for the automatic sweep a ``put`` started in the background, if one is
        running; ``True`` once none is (``False``: ``timeout`` seconds passed first)."""
        return self._join_background(timeout)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Drop history: ``keep_latest`` keeps each namespace's newest checkpoint (and the
        ancestors its DeltaChannels replay from); ``delete`` (alias ``delete_all``)
        removes the threads."""
        self._run(
            maintenance.prune(self.memory.forget, thread_ids, strategy),
            SpanInfo("prune", thread_ids=_listed(thread_ids)),
        )

    # -- async API ------------------------------------------------------------

    async def asetup(self) -> None:
        """Async ``setup``."""
        self._is_setup = False
        await self._arun(self._setup_once(), SpanInfo("setup"))

    async def aupgrade(self) -> None:
        """Async ``upgrade``."""
        self._is_setup = False
        await self._arun(self.ops.upgrade(self.db.name), SpanInfo("upgrade"))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await self._arun(self._read_tuple(config), SpanInfo.of_config("get_tuple", config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: yields each page as soon as it is loaded."""
        async for item in self._aiter(
            self.ops.list(config, filter, before, limit), SpanInfo.of_config("list", config)
        ):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        stored = await self._arun(
            self.ops.put(config, checkpoint, metadata, new_versions),
            SpanInfo.of_config("put", config),
        )
        self._sweep_if_due()
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes``."""
        await self._arun(
            self.ops.put_writes(config, writes, task_id, task_path),
            SpanInfo.of_config("put_writes", config),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await self._arun(
            maintenance.delete_thread(self.memory.forget, thread_id),
            SpanInfo("delete_thread", thread_id),
        )

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await self._arun(
            maintenance.delete_for_runs(self.memory.forget, run_ids),
            SpanInfo("delete_for_runs"),
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await self._arun(
            self.ops.copy_thread(source_thread_id, target_thread_id),
            SpanInfo("copy_thread", source_thread_id, thread_ids=[target_thread_id]),
        )

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history``."""
        return await self._arun(
            self.ops.delta_channel_history(config, channels),
            SpanInfo.of_config("get_delta_channel_history", config),
        )

    async def asweep_expired(self) -> builtins.list[str]:
        """Async ``sweep_expired``."""
        return await self._arun(self._sweep(), SpanInfo("sweep_expired"))

    async def aset_thread_ttl(self, thread_id: str, ttl: float | str) -> None:
        """Async ``set_thread_ttl``."""
        set_ttl = self.ops.set_thread_ttl(thread_id, ttl)
        await self._arun(set_ttl, SpanInfo("set_thread_ttl", thread_id))

    async def alease_thread(
        self,
        thread_id: str,
        *,
        seconds: float = leases.LEASE_SECONDS,
        take_over: bool = False,
        owner: str | None = None,
    ) -> str:
        """Async ``lease_thread``."""
        take = leases.take(thread_id, owner, seconds, take_over)
        return await self._arun(take, SpanInfo("lease_thread", thread_id))

    async def arelease_thread(self, thread_id: str, owner: str) -> bool:
        """Async ``release_thread``."""
        release = leases.release(thread_id, owner)
        return await self._arun(release, SpanInfo("release_thread", thread_id))

    @asynccontextmanager
    async def athread_lease(
        self, thread_id: str, *, seconds: float = leases.LEASE_SECONDS, take_over: bool = False
    ) -> AsyncIterator[str]:
        """Async ``thread_lease``."""
        owner = await self.alease_thread(thread_id, seconds=seconds, take_over=take_over)
        try:
            yield owner
        finally:
            await self.arelease_thread(thread_id, owner)

    async def arekey(self, *, batch_size: int = rekeying.BATCH) -> rekeying.Rekeyed:
        """Async ``rekey``."""
        rekey = rekeying.rekey(rekeying.ring_of(self.serde), rekeying.SAVER_PLACES, batch_size)
        return await self._arun(rekey, SpanInfo("rekey"))

    async def ajoin_sweep(self, timeout: float | None = None) -> bool:
        """Async ``join_sweep``."""
        return await self._ajoin_background(timeout)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await self._arun(
            maintenance.prune(self.memory.forget, thread_ids, strategy),
            SpanInfo("prune", thread_ids=_listed(thread_ids)),
        )


def _listed(thread_ids: Any) -> Sequence[Any]:
    """The threads a prune names, for its span (invalid ones too: the prune refuses them)."""
    return list(thread_ids) if isinstance(thread_ids, (list, tuple, set)) else []
