"""What the sync and the async store share: construction and every public method."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    BaseStore,
    IndexConfig,
    Op,
    Result,
    TTLConfig,
    ensure_embeddings,
    validate_op_namespace,
)
from typing_extensions import Self

from mongo_ckpt import client_bulk, rekeying
from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.calls import CLIENT, Operation
from mongo_ckpt.client_bulk import ClientCalls
from mongo_ckpt.connection import (
    DEFAULT_DB_NAME,
    ClientT,
    CollectionT,
    Owned,
    acknowledged,
    adopt_client,
    shared_client,
)
from mongo_ckpt.layout import REGISTRY, STORE, check_names
from mongo_ckpt.schema import SCHEMA, SCHEMA_COLLECTION
from mongo_ckpt.store import layouts
from mongo_ckpt.store.namespaces import check_namespace_shape
from mongo_ckpt.store.operations import Plan, StoreOperations
from mongo_ckpt.store.vectors import aembed, embed
from mongo_ckpt.telemetry import SpanInfo, Tracing, operation_tracer

T = TypeVar("T")


def _one_spelling(name: str, value: T | None, official: str, official_value: T | None) -> T | None:
    """The option given as ``name`` or as its official spelling ``official``, not both."""
    if value is not None and official_value is not None:
        raise TypeError(
            f"{name}= and {official}= are two spellings of one option (ours and "
            f"langgraph-store-mongodb's): pass one of them"
        )
    return value if value is not None else official_value


def unused_index_keys(keys: list[str]) -> str:
    """The warning for the keys of an index configuration the store does not read (the
    rest of langgraph-store-mongodb's ``VectorIndexConfig``)."""
    return (
        f"index keys {', '.join(map(repr, keys))} are ignored: mongo_ckpt.store reads only "
        f"{', '.join(map(repr, IndexConfig.__annotations__))} (its search index, similarity "
        "and vector field are its own, docs/store.md)"
    )


class MongoStoreBase(BaseStore, Generic[ClientT, CollectionT]):
    """State and the public API common to ``MongoDBStore`` and ``AsyncMongoDBStore``
    (``ClientT``, ``CollectionT``: the clients the class accepts, and their collections).

    Subclasses mix in the drivers ``_run`` and ``_arun``.
    """

    supports_ttl: bool = True
    _saver_type: ClassVar[type[MongoSaverBase[Any]]]

    def __init__(
        self,
        client: ClientT | CollectionT,
        db_name: Any = DEFAULT_DB_NAME,
        collection_name: str = "store",
        ttl_config: TTLConfig | None = None,
        index_config: IndexConfig | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        exact_search: bool = False,
        serde: SerializerProtocol | None = None,
        auto_index_timeout: int | None = None,
        tracing: Tracing | None = None,
        registry_collection_name: str | None = None,
        client_bulk_write: bool | None = None,
    ) -> None:
        """``index``: semantic search (``IndexConfig``); ``ttl``: expiry (``TTLConfig``, minutes).

        ``client`` may also be a collection (``MongoDBStore(collection, ttl_config=...,
        index_config=...)``, as in langgraph-store-mongodb); ``ttl_config`` and
        ``index_config`` are the official names of ``ttl`` and ``index`` (both spellings of
        one option together are a ``TypeError``; the keys of the official
        ``VectorIndexConfig`` besides ``dims``, ``embed`` and ``fields`` are a warning);
        ``auto_index_timeout`` is accepted for compatibility and ignored.

        ``exact_search=True`` ranks every candidate exactly even where Atlas Vector Search
        exists: no search index, and new items are searchable at once (``$vectorSearch``
        sees them only when its index has caught up).

        ``serde`` (e.g. ``EncryptedSerializer``): values are stored as ``serde`` serializes
        them instead of as BSON documents, and search filters run in Python on the values
        read back (same operators and results).

        ``tracing``: OpenTelemetry spans (``mongo_ckpt.telemetry.Tracing``); by default
        traced when a global tracer provider is set (see docs/observability.md).

        ``registry_collection_name``: the collection of the namespace registry
        ``list_namespaces`` reads (default: the items collection's name + ``_namespaces``);
        the items collection holds only items.

        ``client_bulk_write``: send a batch's writes (its items, then its namespaces'
        registry entries) as one client-level ``bulkWrite`` command, as the savers' option
        of that name does: ``None`` (default) where the server (MongoDB 8.0+) and the client
        library have it, ``False`` never (two commands), ``True`` always
        (``ClientBulkWriteUnavailable`` at setup where they do not).
        """
        given: Any = client
        if _is_collection(given):  # MongoDBStore(collection, ttl_config=..., index_config=...)
            if isinstance(db_name, Mapping):  # the official positional order
                db_name, ttl_config = DEFAULT_DB_NAME, db_name
            collection_name = given.name
            db_name = given.database.name
            given = given.database.client
        adopt_client(self, given)
        registry_name = registry_collection_name or f"{collection_name}_namespaces"
        names = {STORE: collection_name, REGISTRY: registry_name}
        check_names(names, layouts.ARGUMENTS)
        index = _one_spelling("index", index, "index_config", index_config)
        ttl = _one_spelling("ttl", ttl, "ttl_config", ttl_config)
        unused = sorted(set(index or {}) - set(IndexConfig.__annotations__))
        if unused:
            warnings.warn(unused_index_keys(unused), UserWarning, stacklevel=2)
        if index is not None and not (isinstance(index.get("dims"), int) and index["dims"] > 0):
            raise ValueError("IndexConfig needs 'dims', the positive size of the vectors")
        default_ttl = (ttl or {}).get("default_ttl")
        if default_ttl is not None and not default_ttl > 0:
            raise ValueError(f"default_ttl must be a positive number of minutes or None, got {ttl}")
        if serde is not None and not all(
            callable(getattr(serde, name, None)) for name in ("dumps_typed", "loads_typed")
        ):
            raise TypeError(
                f"serde must have dumps_typed and loads_typed (a SerializerProtocol such as "
                f"EncryptedSerializer), got {type(serde).__name__}"
            )
        self.client: Any = given
        self.db = given[db_name]
        self.index_config = index
        self.ttl_config = ttl
        self.embeddings = ensure_embeddings(index.get("embed")) if index else None
        self.serde = serde
        self.ops = StoreOperations(index, serde)
        self.ops.omit_expired = bool((ttl or {}).get("omit_expired", True))
        if exact_search:
            self.ops.vector_search = False
        self.collections: dict[str, Any] = {
            **{logical: acknowledged(self, self.db[name]) for logical, name in names.items()},
            SCHEMA: self.db[SCHEMA_COLLECTION],
            CLIENT: ClientCalls(given, None),
        }
        self.client_bulk_write = client_bulk_write
        self._put_path = self.ops.put_path = client_bulk.PutPath(given, client_bulk_write)
        self._is_setup = False
        self._tracer = operation_tracer(tracing, self.db.name)

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        db_name: str = DEFAULT_DB_NAME,
        collection_name: str = "store",
        ttl_config: TTLConfig | None = None,
        index_config: IndexConfig | None = None,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        exact_search: bool = False,
        serde: SerializerProtocol | None = None,
        auto_index_timeout: int | None = None,
        tracing: Tracing | None = None,
        registry_collection_name: str | None = None,
        client_bulk_write: bool | None = None,
        client_kwargs: dict[str, Any] | None = None,
        timeoutMS: int | None = None,  # noqa: N803 (PyMongo's spelling)
    ) -> Owned[Self]:
        """A store on a new client of the class's mode, closed when the context exits
        (``with`` / ``async with``, as the savers' ``from_conn_string``); the arguments are
        the constructor's, in langgraph-store-mongodb's order."""
        return Owned(
            cls, conn_string, client_kwargs, timeoutMS,
            lambda client: cls(
                client, db_name, collection_name, ttl_config, index_config, index=index,
                ttl=ttl, exact_search=exact_search, serde=serde,
                auto_index_timeout=auto_index_timeout, tracing=tracing,
                registry_collection_name=registry_collection_name,
                client_bulk_write=client_bulk_write,
            ),
        )

    @classmethod
    def from_saver(cls, saver: Any, **kwargs: Any) -> Self:
        """A store on the checkpointer's client and database (``collection_name``, ``index``,
        ``ttl``, ``exact_search``, ``serde`` as in the constructor)::

            store = AsyncMongoDBStore.from_saver(saver)
            graph = builder.compile(checkpointer=saver, store=store)

        When the saver's serde is an ``EncryptedSerializer`` the store uses it too, so its
        values are encrypted with the same key (``serde=None`` keeps them plain BSON).
        """
        return cls(*shared_client(cls, "store", saver, cls._saver_type, "saver", kwargs), **kwargs)

    if TYPE_CHECKING:  # the drivers, from ``drivers.SyncDriver`` or ``drivers.AsyncDriver``

        def _run(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

        async def _arun(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

    def _prepared(self, operation: Operation[T], span: SpanInfo | None) -> Operation[T]:
        """``operation``, preceded by setup on first use; in ``span`` when traced."""
        prepared = self._after_setup(operation)
        if self._tracer is None or span is None:
            return prepared
        return self._tracer.traced(
            f"mongo_ckpt.store.{span.name}", prepared, namespaces=span.namespaces
        )

    def _after_setup(self, operation: Operation[T]) -> Operation[T]:
        yield from self._setup_once()
        return (yield from operation)

    def _setup_once(self) -> Operation[None]:
        """Index creation (and the vector index where there is one), unless done already.
        The first setup also decides whether writes use the client-level bulk write."""
        if not self._is_setup:
            yield from self._put_path.decide(self.db.name, self._names)
            yield from self.ops.setup(self.db.name, self._names)
            self._is_setup = True

    # -- sync API -------------------------------------------------------------

    def setup(self) -> None:
        """Check the layout version (``SchemaTooNewError`` for data of a newer mongo-ckpt);
        on new collections refuse another layout (``ForeignCollectionError``: the
        checkpointer's, langgraph-store-mongodb's; nothing written), then create the indexes
        and record the version; refuse data of a pre-release layout
        (``SchemaUpgradeRequired``, nothing written); where Atlas Vector Search exists, create
        the vector index (idempotent; also done on first use).
        A coroutine on ``AsyncMongoDBStore``."""
        self._is_setup = False
        self._run(self._setup_once(), SpanInfo("setup"))

    def upgrade(self) -> None:
        """Set up, then take the data up every layout version of this release, those only an
        upgrade takes included (``schema.LADDERS``; idempotent; with one layout there is
        nothing to do). A coroutine on ``AsyncMongoDBStore``."""
        self._is_setup = False  # setup first, as on first use
        self._run(self.ops.upgrade(self.db.name, self._names), SpanInfo("upgrade"))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: gets in one query, puts in one ``bulk_write``; results in op order."""
        plan = self.ops.plan(_validated(ops))
        embedded = embed(self.embeddings, plan.embedding, self._dims)
        return self._run(self.ops.run_plan(plan, embedded), _span_of(plan))

    def put(self, namespace: Any, key: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """``BaseStore.put``, with the namespace's shape checked first (a dict would
        otherwise fail inside LangGraph's own validation with ``KeyError: 0``)."""
        check_namespace_shape(namespace)
        super().put(namespace, key, value, *args, **kwargs)

    def sweep_ttl(self) -> int:
        """Delete expired items now (the server's TTL monitor does it about once a minute).

        Returns how many were deleted.
        """
        return self._run(self.ops.sweep_ttl(), SpanInfo("sweep_ttl"))

    def rekey(self, *, batch_size: int = rekeying.BATCH) -> rekeying.Rekeyed:
        """Encrypt every item a ``KeyRing`` key other than the current one wrote under the
        current key, beside live writers, each read back; run it again to resume
        (``mongo_ckpt.rekeying``). ``MissingKeyError`` names a key the ring lacks."""
        rekey = rekeying.rekey(rekeying.ring_of(self.serde), rekeying.STORE_PLACES, batch_size)
        return self._run(rekey, SpanInfo("rekey"))

    # -- async API ------------------------------------------------------------

    async def asetup(self) -> None:
        """Async ``setup``."""
        self._is_setup = False
        await self._arun(self._setup_once(), SpanInfo("setup"))

    async def aupgrade(self) -> None:
        """Async ``upgrade``."""
        self._is_setup = False  # setup first, as on first use
        await self._arun(self.ops.upgrade(self.db.name, self._names), SpanInfo("upgrade"))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async ``batch``."""
        plan = self.ops.plan(_validated(ops))
        embedded = await aembed(self.embeddings, plan.embedding, self._dims)
        return await self._arun(self.ops.run_plan(plan, embedded), _span_of(plan))

    async def aput(self, namespace: Any, key: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Async ``put``, with the namespace's shape checked first."""
        check_namespace_shape(namespace)
        await super().aput(namespace, key, value, *args, **kwargs)

    async def asweep_ttl(self) -> int:
        """Async ``sweep_ttl``."""
        return await self._arun(self.ops.sweep_ttl(), SpanInfo("sweep_ttl"))

    async def arekey(self, *, batch_size: int = rekeying.BATCH) -> rekeying.Rekeyed:
        """Async ``rekey``."""
        rekey = rekeying.rekey(rekeying.ring_of(self.serde), rekeying.STORE_PLACES, batch_size)
        return await self._arun(rekey, SpanInfo("rekey"))

    # -- helpers --------------------------------------------------------------

    def _sweep_interval_seconds(self, sweep_interval_minutes: float | None) -> float:
        minutes = sweep_interval_minutes
        if minutes is None:
            minutes = (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        if not minutes > 0:
            raise ValueError(f"sweep_interval_minutes must be positive, got {minutes!r}")
        return float(minutes) * 60

    @property
    def collection(self) -> Any:
        """The items collection (the official ``MongoDBStore.collection``; the documents'
        layout differs, see docs/migrating.md)."""
        return self.collections[STORE]

    @property
    def uses_client_bulk_write(self) -> bool:
        """Whether a batch's writes go as one client-level ``bulkWrite`` (decided at setup;
        ``False`` for good once the server refuses the command)."""
        return self._put_path.namespaces is not None

    @property
    def _names(self) -> dict[str, str]:
        return {logical: self.collections[logical].name for logical in (STORE, REGISTRY)}

    @property
    def _dims(self) -> int:
        return self.index_config["dims"] if self.index_config else 0


def _validated(ops: Iterable[Op]) -> list[Op]:
    """``ops``, each namespace checked as ``BaseStore``'s methods check it (ops given to
    ``batch`` directly skip those checks)."""
    ops = list(ops)
    for op in ops:
        validate_op_namespace(op)
    return ops


def _is_collection(obj: Any) -> bool:
    """A PyMongo/Motor/mongomock collection (a client's ``__getattr__`` would answer
    any attribute, so the type name decides)."""
    return "Collection" in type(obj).__name__


def _span_of(plan: Plan) -> SpanInfo:
    """A batch's span: named after the kind of its operations, with their namespaces."""
    return SpanInfo(plan.kind(), namespaces=plan.namespaces())
