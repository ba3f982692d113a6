"""What the sync and the async cache share: construction and every public method."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol
from typing_extensions import Self

from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.cache import documents
from mongo_ckpt.cache.operations import CACHE, CacheOperations, ServerClock
from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import (
    DEFAULT_DB_NAME,
    ClientT,
    Owned,
    acknowledged,
    adopt_client,
    shared_client,
)
from mongo_ckpt.keyring import MissingKeyError
from mongo_ckpt.schema import SCHEMA, SCHEMA_COLLECTION
from mongo_ckpt.store.base import MongoStoreBase
from mongo_ckpt.telemetry import SpanInfo, Tracing, operation_tracer

T = TypeVar("T")
DEFAULT_COLLECTION = "cache"
Prepared = tuple[str, bytes, float | None]


class MongoCacheBase(BaseCache[ValueT], Generic[ValueT, ClientT]):
    """State and the public API common to ``MongoDBCache`` and ``AsyncMongoDBCache``
    (``ClientT``: the clients the class accepts).

    Subclasses mix in the drivers ``_run`` and ``_arun``.
    """

    _saver_type: ClassVar[type[MongoSaverBase[Any]]]
    _store_type: ClassVar[type[MongoStoreBase[Any, Any]]]

    def __init__(
        self,
        client: ClientT,
        db_name: str = DEFAULT_DB_NAME,
        *,
        collection_name: str = DEFAULT_COLLECTION,
        serde: SerializerProtocol | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        """``client``: a PyMongo/Motor/mongomock client of the class's mode, never closed
        by the cache; entries live in ``db_name.collection_name``.

        ``serde``: how values are serialized (default LangGraph's ``JsonPlusSerializer``);
        with ``EncryptedSerializer`` they are stored encrypted.

        ``tracing``: OpenTelemetry spans (``mongo_ckpt.telemetry.Tracing``); by default
        traced when a global tracer provider is set (see docs/observability.md).
        """
        adopt_client(self, client)
        super().__init__(serde=serde)
        given: Any = client  # ClientT is a union of client types: one client's API
        self.client = given
        self.db = given[db_name]
        self.collections: dict[str, Any] = {
            CACHE: acknowledged(self, self.db[collection_name]),
            SCHEMA: self.db[SCHEMA_COLLECTION],
        }
        self.ops = CacheOperations(ServerClock())
        self._is_setup = False
        self._tracer = operation_tracer(tracing, self.db.name)

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        db_name: str = DEFAULT_DB_NAME,
        *,
        collection_name: str = DEFAULT_COLLECTION,
        serde: SerializerProtocol | None = None,
        tracing: Tracing | None = None,
        client_kwargs: dict[str, Any] | None = None,
        timeoutMS: int | None = None,  # noqa: N803 (PyMongo's spelling)
    ) -> Owned[Self]:
        """A cache on a new client of the class's mode, closed when the context exits
        (``with`` / ``async with``, as the savers' ``from_conn_string``)."""
        return Owned(
            cls, conn_string, client_kwargs, timeoutMS,
            lambda client: cls(
                client, db_name, collection_name=collection_name, serde=serde, tracing=tracing
            ),
        )

    @classmethod
    def from_saver(cls, saver: Any, **kwargs: Any) -> Self:
        """A cache on the checkpointer's client and database (``collection_name``,
        ``serde``, ``tracing`` as in the constructor)::

            cache = AsyncMongoDBCache.from_saver(saver)
            graph = builder.compile(checkpointer=saver, cache=cache)

        When the saver's serde is an ``EncryptedSerializer`` the cache uses it too.
        """
        return cls(*shared_client(cls, "cache", saver, cls._saver_type, "saver", kwargs), **kwargs)

    @classmethod
    def from_store(cls, store: Any, **kwargs: Any) -> Self:
        """A cache on the store's client and database, as ``from_saver``."""
        return cls(*shared_client(cls, "cache", store, cls._store_type, "store", kwargs), **kwargs)

    if TYPE_CHECKING:  # the drivers, from ``drivers.SyncDriver`` or ``drivers.AsyncDriver``

        def _run(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

        async def _arun(self, operation: Operation[T], span: SpanInfo | None = None) -> T: ...

    def _prepared(self, operation: Operation[T], span: SpanInfo | None) -> Operation[T]:
        # What the drivers call; each public method has prepared its operation already
        # (``_operation``), naming its span itself.
        return operation

    def _operation(self, name: str, operation: Operation[T]) -> Operation[T]:
        return self._traced(name, self._after_setup(operation))

    def _traced(self, name: str, operation: Operation[T]) -> Operation[T]:
        if self._tracer is None:
            return operation
        return self._tracer.traced(f"mongo_ckpt.cache.{name}", operation)

    def _after_setup(self, operation: Operation[T]) -> Operation[T]:
        if not self._is_setup:
            yield from self._set_up()
        return (yield from operation)

    def _set_up(self) -> Operation[None]:
        yield from self.ops.setup()
        self._is_setup = True

    def _get(self, keys: Sequence[FullKey]) -> Operation[dict[FullKey, ValueT]]:
        checked = [documents.checked_key(key) for key in keys]
        found = yield from self._operation("get", self.ops.get(checked))
        values = {}
        for key, typed in found:
            try:
                values[key] = self.serde.loads_typed(typed)
            except MissingKeyError:  # written under a key dropped since: a miss
                continue
        return values

    def _set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> Operation[None]:
        return self._operation("set", self.ops.set(self._prepared_pairs(pairs)))

    def _prepared_pairs(
        self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]
    ) -> dict[FullKey, Prepared]:
        """Every pair checked and serialized, before anything is sent; a value too large
        for a document is left out (``documents.fits``)."""
        if not isinstance(pairs, Mapping):
            raise documents.CacheTypeError(
                "set takes a mapping of (namespace, key) to (value, ttl), got "
                f"{type(pairs).__name__}"
            )
        prepared: dict[FullKey, Prepared] = {}
        for full_key, pair in pairs.items():
            key = documents.checked_key(full_key)
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise documents.CacheTypeError(
                    f"set maps each (namespace, key) to a (value, ttl) pair; cache key "
                    f"{key!r} has {type(pair).__name__} {pair!r}"
                )
            value, ttl = pair
            seconds = documents.checked_ttl(key, ttl)
            encoding, data = documents.serialized(self.serde, key, value)
            if documents.fits(key, encoding, data):
                prepared[key] = (encoding, data, seconds)
        return prepared

    def _clear(self, namespaces: Sequence[Namespace] | None) -> Operation[None]:
        return self._operation("clear", self.ops.clear(documents.checked_namespaces(namespaces)))

    # -- sync API -------------------------------------------------------------

    def setup(self) -> None:
        """Create the indexes (idempotent; also done on first use) and read the server's
        clock. A coroutine on ``AsyncMongoDBCache``."""
        self._run(self._traced("setup", self._set_up()))

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The live values of ``keys`` (missing and expired ones left out): one ``find``."""
        return self._run(self._get(keys))

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Store each ``(namespace, key) -> (value, ttl seconds or None)``, replacing any
        earlier entry: one unordered ``bulk_write``."""
        self._run(self._set(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of ``namespaces``, or every entry: one ``delete_many``."""
        self._run(self._clear(namespaces))

    # -- async API ------------------------------------------------------------

    async def asetup(self) -> None:
        """Async ``setup``."""
        await self._arun(self._traced("setup", self._set_up()))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """Async ``get``."""
        return await self._arun(self._get(keys))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Async ``set``."""
        await self._arun(self._set(pairs))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Async ``clear``."""
        await self._arun(self._clear(namespaces))

    @property
    def collection(self) -> Any:
        """The entries collection."""
        return self.collections[CACHE]
