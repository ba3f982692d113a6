"""What the sync and the async store share: construction and every public method."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.store.base import BaseStore, IndexConfig, Op, Result, TTLConfig, ensure_embeddings
from mongo_ckpt.store.operations import STORE, StoreOperations
from mongo_ckpt.store.vectors import aembed, embed
from pymongo.errors import OperationFailure
from typing_extensions import Self

from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import DEFAULT_DB_NAME, adopt_client

logger = logging.getLogger(__name__)
# What asking for search indexes raises where there is no Atlas Search
# (MongoDB Community, SecantusDB: OperationFailure; mongomock: NotImplementedError).
SEARCH_UNAVAILABLE = (OperationFailure, NotImplementedError)


class MongoStoreBase(BaseStore):
    """State and the public API common to ``MongoDBStore`` and ``AsyncMongoDBStore``.

    Subclasses supply ``_run_op`` and ``_arun_op``, which run an operation as is.
    """

    supports_ttl: bool = True
    _saver_type: ClassVar[type]

    def __init__(
        self,
        client: Any,
        db_name: str = DEFAULT_DB_NAME,
        *,
        collection_name: str = "store",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        exact_search: bool = False,
        serde: SerializerProtocol | None = None,
    ) -> None:
        """``index``: semantic search (``IndexConfig``); ``ttl``: expiry (``TTLConfig``, minutes).

        ``exact_search=True`` ranks every candidate exactly even where Atlas Vector Search
        exists: no search index, and new items are searchable at once (``$vectorSearch``
        sees them only when its index has caught up).

        ``serde`` (e.g. ``EncryptedSerializer``): values are stored as ``serde`` serializes
        them instead of as BSON documents, and search filters run in Python on the values
        read back (same operators and results).
        """
        adopt_client(self, client)
        if index is not None and not (isinstance(index.get("dims"), int) and index["dims"] > 0):
            raise ValueError("IndexConfig needs 'dims', the positive size of the vectors")
        if ttl and ttl.get("default_ttl") is not None and not ttl["default_ttl"] > 0:
            raise ValueError(f"default_ttl must be a positive number of minutes or None, got {ttl}")
        if serde is not None and not all(
            callable(getattr(serde, name, None)) for name in ("dumps_typed", "loads_typed")
        ):
            raise TypeError(
                f"serde must have dumps_typed and loads_typed (a SerializerProtocol such as "
                f"EncryptedSerializer), got {type(serde).__name__}"
            )
        self.client = client
        self.db = client[db_name]
        self.index_config = index
        self.ttl_config = ttl
        self.embeddings = ensure_embeddings(index.get("embed")) if index else None
        self.serde = serde
        self.ops = StoreOperations(index, serde)
        if exact_search:
            self.ops.vector_search = False
        self.collections: dict[str, Any] = {STORE: self.db[collection_name]}
        self._is_setup = False

    @classmethod
    def from_saver(cls, saver: Any, **kwargs: Any) -> Self:
        """A store on the checkpointer's client and database (``collection_name``, ``index``,
        ``ttl``, ``exact_search``, ``serde`` as in the constructor)::

            store = AsyncMongoDBStore.from_saver(saver)
            graph = builder.compile(checkpointer=saver, store=store)

        When the saver's serde is an ``EncryptedSerializer`` the store uses it too, so its
        values are encrypted with the same key (``serde=None`` keeps them plain BSON).
        """
        if not isinstance(saver, cls._saver_type):
            raise TypeError(
                f"{cls.__name__}.from_saver expects {cls._saver_type.__name__}, got "
                f"{type(saver).__name__}: pair the sync store with the sync saver and "
                "the async store with the async saver"
            )
        if isinstance(saver.serde, EncryptedSerializer):
            kwargs.setdefault("serde", saver.serde)
        return cls(saver.client, saver.db.name, **kwargs)

    # -- drivers, supplied by the subclasses ---------------------------------

    def _run_op(self, operation: Operation) -> Any:
        raise NotImplementedError

    async def _arun_op(self, operation: Operation) -> Any:
        raise NotImplementedError

    def _run(self, operation: Operation) -> Any:
        if not self._is_setup:
            self.setup()
        return self._run_op(operation)

    async def _arun(self, operation: Operation) -> Any:
        if not self._is_setup:
            await self.asetup()
        return await self._arun_op(operation)

    # -- sync API -------------------------------------------------------------

    def setup(self) -> None:
        """Create the indexes and, where Atlas Vector Search exists, the vector index
        (idempotent; also done on first use)."""
        self._run_op(self.ops.create_indexes())
        if self.index_config and self.ops.vector_search is None:
            try:
                self.ops.vector_search = self._run_op(self.ops.ensure_search_index())
            except SEARCH_UNAVAILABLE as exc:
                self._without_vector_search(exc)
        self._is_setup = True

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: gets in one query, puts in one ``bulk_write``; results in op order."""
        plan = self.ops.plan(ops)
        embedded = embed(self.embeddings, plan.embedding, self._dims)
        return self._run(self.ops.execute(plan, embedded))

    def sweep_ttl(self) -> int:
        """Delete expired items now (the server's TTL monitor does it about once a minute).

        Returns how many were deleted.
        """
        return self._run(self.ops.sweep_ttl())

    # -- async API ------------------------------------------------------------

    async def asetup(self) -> None:
        """Async ``setup``."""
        await self._arun_op(self.ops.create_indexes())
        if self.index_config and self.ops.vector_search is None:
            try:
                self.ops.vector_search = await self._arun_op(self.ops.ensure_search_index())
            except SEARCH_UNAVAILABLE as exc:
                self._without_vector_search(exc)
        self._is_setup = True

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async ``batch``."""
        plan = self.ops.plan(ops)
        embedded = await aembed(self.embeddings, plan.embedding, self._dims)
        return await self._arun(self.ops.execute(plan, embedded))

    async def asweep_ttl(self) -> int:
        """Async ``sweep_ttl``."""
        return await self._arun(self.ops.sweep_ttl())

    # -- helpers --------------------------------------------------------------

    @property
    def _dims(self) -> int:
        return self.index_config["dims"] if self.index_config else 0

    def _without_vector_search(self, reason: Exception) -> None:
        logger.info("no Atlas Vector Search on this server (%s): exact vector search", reason)
        self.ops.vector_search = False
