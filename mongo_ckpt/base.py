"""What the sync and the async saver share: construction and every public method."""

from __future__ import annotations

import builtins
import random
import time
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
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

from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import (
    DEFAULT_DB_NAME,
    DEFAULT_WRITE_CONCERN,
    ClientT,
    Owned,
    adopt_client,
    with_write_concern,
)
from mongo_ckpt.layout import CHECKPOINTS, WRITES, Layout
from mongo_ckpt.listdelta import ListDeltas
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.schema import SCHEMA, SCHEMA_COLLECTION, UPGRADE_LIMIT
from mongo_ckpt.snapshot_distance import SnapshotDistances
from mongo_ckpt.telemetry import Tracing, arguments, operation_name, operation_tracer

T = TypeVar("T")

# Metadata LangGraph itself writes; the only keys kept in plain BSON (for
# ``list(filter=...)``) when the serializer encrypts, unless the user adds more.
STRUCTURAL_METADATA_KEYS = frozenset({"source", "step", "run_id", "parents"})
# Span names for the operations not named like the public method that runs them.
_SPAN_NAMES = {"_setup_once": "setup", "delta_channel_history": "get_delta_channel_history"}
# Largest ``ttl``: 100 years (longer would overflow the dates an expiry is computed with).
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600


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
        filterable_metadata_keys: Collection[str] | None = None,
        sweep_interval: float | None = None,
        write_concern: WriteConcern | None = DEFAULT_WRITE_CONCERN,
        list_deltas: bool = True,
        tracing: Tracing | None = None,
    ) -> None:
        """Args:
        client: a PyMongo/Motor/mongomock client; never closed by the saver.
        db_name, checkpoint_collection_name, writes_collection_name: where data lives.
        ttl: seconds of inactivity after which a whole thread expires (see sweep_expired),
            at most ``MAX_TTL_SECONDS`` (100 years).
        serde: serializer, e.g. ``EncryptedSerializer``.
        blobs_collection_name: the collection of channel values.
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
            from an earlier version this saver wrote on the thread (docs/architecture.md,
            "List deltas"), once the database records that every writer reads them (a new
            database, or after ``upgrade()``); ``False`` stores every version whole.
        tracing: OpenTelemetry spans (``mongo_ckpt.telemetry.Tracing``); by default
            traced when a global tracer provider is set (see docs/observability.md).
        """
        adopt_client(self, client)
        super().__init__(serde=serde)
        given: Any = client  # ClientT is a union of client types: one client's API
        self.client = given
        self.db = given[db_name]
        self.layout = Layout(
            checkpoint_collection_name, blobs_collection_name, writes_collection_name
        )
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if ttl is not None and not ttl <= MAX_TTL_SECONDS:  # also refuses inf and NaN
            raise ValueError(
                f"ttl must be at most {MAX_TTL_SECONDS} seconds (100 years), got {ttl!r}; "
                "pass ttl=None for threads that never expire"
            )
        self.ttl = ttl
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
            logical: with_write_concern(self.db[name], write_concern)
            for logical, name in self.layout.by_logical().items()
        }
        self.collections[SCHEMA] = with_write_concern(self.db[SCHEMA_COLLECTION], write_concern)
        self.list_deltas = ListDeltas(enabled=list_deltas)
        self._is_setup = False
        self._snapshot_distances = SnapshotDistances()
        self._tracer = operation_tracer(tracing, db_name)
        self._upgrade_limit: int | None = UPGRADE_LIMIT

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
        filterable_metadata_keys: Collection[str] | None = None,
        sweep_interval: float | None = None,
        write_concern: WriteConcern | None = DEFAULT_WRITE_CONCERN,
        list_deltas: bool = True,
        tracing: Tracing | None = None,
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
                filterable_metadata_keys=filterable_metadata_keys,
                sweep_interval=sweep_interval, write_concern=write_concern,
                list_deltas=list_deltas, tracing=tracing,
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
    def ops(self) -> CheckpointOperations:
        """The operations, on the current ``serde`` (``with_allowlist`` clones replace it)."""
        return CheckpointOperations(
            self.layout,
            self.serde,
            self.filterable_metadata_keys,
            self._snapshot_distances,
            self.list_deltas,
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

    def _prepared(self, operation: Operation[T]) -> Operation[T]:
        """``operation``, preceded by setup on first use; in a span when traced."""
        prepared = self._after_setup(operation)
        if self._tracer is None:
            return prepared
        name = operation_name(operation)
        return self._tracer.traced(
            f"mongo_ckpt.{_SPAN_NAMES.get(name, name)}", prepared, **_thread_of(operation)
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
            self._start_background(self.ops.sweep_expired(self.ttl), "sweep of expired threads")

    def _setup_once(self) -> Operation[None]:
        """The layout version check (with indexes and upgrades), unless done already; while
        the database does not allow list deltas yet, the version is read again at most once
        a minute, so an upgrade run elsewhere takes effect without a restart."""
        if not self._is_setup:
            yield from self.ops.setup(self.db.name, self._upgrade_limit)
            self._is_setup = True
        elif self.list_deltas.recheck_due():
            yield from self.ops.recheck_layout(self.db.name)

    def _require_ttl(self) -> float:
        if self.ttl is None:
            raise ValueError(
                "sweep_expired needs a ttl: create the saver with ttl=<seconds of inactivity "
                "after which a whole thread expires>"
            )
        return self.ttl

    if TYPE_CHECKING:  # the drivers, from ``drivers.SyncDriver`` or ``drivers.AsyncDriver``

        def _run(self, operation: Operation[T]) -> T: ...

        def _iter(self, operation: Operation[Any]) -> Iterator[Any]: ...

        async def _arun(self, operation: Operation[T]) -> T: ...

        def _aiter(self, operation: Operation[Any]) -> AsyncIterator[Any]: ...

        def _start_background(self, operation: Operation[Any], what: str) -> None: ...

        def _join_background(self, timeout: float | None, *, stop: bool = False) -> bool: ...

        async def _ajoin_background(
            self, timeout: float | None, *, stop: bool = False
        ) -> bool: ...

    # -- sync API -------------------------------------------------------------

    def setup(self, *, upgrade_limit: int | None = UPGRADE_LIMIT) -> None:
        """Check the layout version and, for new or older collections, create the indexes,
        upgrade the documents in place and record the version (idempotent; also done on
        first use). One round trip when nothing is to upgrade. A new, empty database gets
        the current version; existing data at most version 3, which releases before list
        deltas read too: list deltas wait for ``upgrade()``.

        Raises ``SchemaTooNewError`` for data of a newer mongo-ckpt, and
        ``SchemaUpgradeRequired`` when an upgrade would rewrite more than ``upgrade_limit``
        documents (``None``: no limit, as ``mongo-ckpt upgrade`` runs it) or the collections
        hold langgraph-checkpoint-mongodb data (``mongo-ckpt migrate`` converts it).
        """
        self._is_setup = False
        self._upgrade_limit = upgrade_limit
        try:
            self._run(self._setup_once())
        finally:
            self._upgrade_limit = UPGRADE_LIMIT

    def upgrade(self) -> None:
        """Upgrade the layout to this release's version, however many documents that
        rewrites, and record that every writer reads list deltas: this saver writes them
        at once, other savers of this release within a minute, and releases that do not
        read them refuse the database at setup. Run it (or ``mongo-ckpt upgrade``) once no
        process of such a release is left (docs/operations.md). Idempotent."""
        self._is_setup = False
        self._upgrade_limit = None
        try:
            self._run(self.ops.upgrade())
        finally:
            self._upgrade_limit = UPGRADE_LIMIT

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint at ``config`` (the latest of its thread/namespace without an id)."""
        return self._run(self.ops.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints matching ``config``/``filter``/``before``, newest first, streamed."""
        return self._iter(self.ops.list(config, filter, before, limit))

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
        stored = self._run(self.ops.put(config, checkpoint, metadata, new_versions))
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
        self._run(self.ops.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of a thread."""
        self._run(self.ops.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) created by the given runs."""
        self._run(self.ops.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's complete history (all namespaces, values, writes) to another id."""
        self._run(self.ops.copy_thread(source_thread_id, target_thread_id))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes since each channel's seed, plus the seed value, in one aggregation."""
        return self._run(self.ops.delta_channel_history(config, channels))

    def sweep_expired(self) -> builtins.list[str]:  # `list` is the method below
        """Delete every thread idle for longer than ``ttl`` seconds (by the server's clock),
        in batches; return their ids."""
        return self._run(self.ops.sweep_expired(self._require_ttl()))

    def join_sweep(self, timeout: float | None = None) -> bool:
        """Wait for the automatic sweep a ``put`` started in the background, if one is
        running; ``True`` once none is (``False``: ``timeout`` seconds passed first)."""
        return self._join_background(timeout)

    def backfill_join_keys(self) -> int:
        """Add the thread-scoped ``join`` key to value and write documents written by an
        earlier version (reads join on it); returns how many documents were updated.
        ``setup`` runs it when it upgrades layout version 1."""
        return self._run(self.ops.backfill_join_keys())

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Drop history: ``keep_latest`` keeps each namespace's newest checkpoint (and the
        ancestors its DeltaChannels replay from); ``delete`` (alias ``delete_all``)
        removes the threads."""
        self._run(self.ops.prune(thread_ids, strategy))

    # -- async API ------------------------------------------------------------

    async def asetup(self, *, upgrade_limit: int | None = UPGRADE_LIMIT) -> None:
        """Async ``setup``."""
        self._is_setup = False
        self._upgrade_limit = upgrade_limit
        try:
            await self._arun(self._setup_once())
        finally:
            self._upgrade_limit = UPGRADE_LIMIT

    async def aupgrade(self) -> None:
        """Async ``upgrade``."""
        self._is_setup = False
        self._upgrade_limit = None
        try:
            await self._arun(self.ops.upgrade())
        finally:
            self._upgrade_limit = UPGRADE_LIMIT

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await self._arun(self.ops.get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``: yields each page as soon as it is loaded."""
        async for item in self._aiter(self.ops.list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        stored = await self._arun(self.ops.put(config, checkpoint, metadata, new_versions))
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
        await self._arun(self.ops.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await self._arun(self.ops.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await self._arun(self.ops.delete_for_runs(run_ids))

    async def abackfill_join_keys(self) -> int:
        """Async ``backfill_join_keys``."""
        return await self._arun(self.ops.backfill_join_keys())

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await self._arun(self.ops.copy_thread(source_thread_id, target_thread_id))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async ``get_delta_channel_history``."""
        return await self._arun(self.ops.delta_channel_history(config, channels))

    async def asweep_expired(self) -> builtins.list[str]:
        """Async ``sweep_expired``."""
        return await self._arun(self.ops.sweep_expired(self._require_ttl()))

    async def ajoin_sweep(self, timeout: float | None = None) -> bool:
        """Async ``join_sweep``."""
        return await self._ajoin_background(timeout)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await self._arun(self.ops.prune(thread_ids, strategy))


def _thread_of(operation: Operation[Any]) -> dict[str, Any]:
    """The thread id and checkpoint namespace ``operation`` was called with, if any
    (invalid ones too: the operation itself refuses them), and the other threads it names
    (a copy's target, a prune's threads)."""
    args = arguments(operation)
    config = args.get("config")
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        configurable = {}
    listed = args.get("thread_ids")
    return {
        "thread_id": configurable.get(
            "thread_id", args.get("thread_id", args.get("source_thread_id"))
        ),
        "checkpoint_ns": configurable.get("checkpoint_ns", "") if configurable else None,
        "thread_ids": [
            *([args["target_thread_id"]] if "target_thread_id" in args else []),
            *(listed if isinstance(listed, (list, tuple, set)) else []),
        ],
    }
