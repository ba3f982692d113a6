"""What the savers and stores share about their client: checking it is of the class's
mode, owning one made from a URI (with a bounded ``timeoutMS``), the write concern the
savers write with, and, for the async classes, the event loop they run on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeAlias, TypeVar

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from pymongo import AsyncMongoClient, MongoClient
from pymongo.write_concern import WriteConcern

from mongo_ckpt.drivers import AsyncDriver, SyncDriver, run_on_loop, running_loop
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.inprocess import patch_mongomock_bulk

if TYPE_CHECKING:  # Motor and the mongomock packages are optional: imported for types only.
    import mongomock
    from mongomock_motor import AsyncMongoMockClient, AsyncMongoMockCollection
    from motor.motor_asyncio import AsyncIOMotorClient, AsyncIOMotorCollection
    from pymongo.asynchronous.collection import AsyncCollection as PyMongoAsyncCollection
    from pymongo.collection import Collection

T = TypeVar("T")
# The client type of a saver, store or cache class: ``SyncClient`` or ``AsyncClient``;
# a store's may also be a collection of that client (``SyncCollection``...).
ClientT = TypeVar("ClientT")
CollectionT = TypeVar("CollectionT")
# The clients each mode accepts (``_ACCEPTED``), as the constructors' ``client`` annotation.
SyncClient: TypeAlias = "MongoClient[Any] | mongomock.MongoClient[Any]"
AsyncClient: TypeAlias = (
    "AsyncMongoClient[Any] | AsyncIOMotorClient[Any] | AsyncMongoMockClient[Any]"
)
SyncCollection: TypeAlias = "Collection[Any] | mongomock.Collection[Any]"
AsyncCollection: TypeAlias = (
    "PyMongoAsyncCollection[Any] | AsyncIOMotorCollection[Any] | AsyncMongoMockCollection[Any]"
)

DEFAULT_DB_NAME = "checkpointing_db"
# Every operation of a client made by ``from_conn_string`` (and the demo) gives up after
# this many milliseconds unless the URI or a ``timeoutMS=`` keyword says otherwise.
DEFAULT_TIMEOUT_MS = 10_000
# What the savers write with unless given ``write_concern=``: acknowledged by a majority
# of the replica set and journaled, so an acknowledged checkpoint survives a failover.
DEFAULT_WRITE_CONCERN = WriteConcern(w="majority", j=True)

Mode = Literal["sync", "async"]

# (module prefix, class name) of the clients each mode accepts; matched along the MRO so
# Motor and mongomock need not be installed (or imported) for the check.
_ACCEPTED: dict[str, tuple[tuple[str, str], ...]] = {
    "sync": (("pymongo", "MongoClient"), ("mongomock", "MongoClient")),
    "async": (
        ("pymongo", "AsyncMongoClient"),
        ("motor", "AsyncIOMotorClient"),
        ("mongomock_motor", "AsyncMongoMockClient"),
    ),
}
_PAIRED = ("MongoDBSaver", "MongoDBStore", "MongoDBCache")  # each with its Async... partner
_WANTED = {
    "sync": "a synchronous MongoClient (pymongo.MongoClient or mongomock.MongoClient)",
    "async": (
        "an asynchronous client (pymongo.AsyncMongoClient, "
        "motor.motor_asyncio.AsyncIOMotorClient or mongomock_motor.AsyncMongoMockClient)"
    ),
}


def client_mode(client: Any) -> Mode | None:
    """``"sync"`` or ``"async"`` for a supported client, ``None`` for anything else."""
    for klass in type(client).__mro__:
        module = klass.__module__.split(".")[0]
        for mode, accepted in _ACCEPTED.items():
            if (module, klass.__name__) in accepted:
                return mode  # type: ignore[return-value]
    return None


def _qualname(obj: Any) -> str:
    # mongomock-motor's clients are classes named after Motor's, built on its own class.
    klass = next(
        (k for k in type(obj).__mro__ if k.__module__.startswith("mongomock_motor")), type(obj)
    )
    module = klass.__module__.split(".")[0]
    return klass.__name__ if module == "builtins" else f"{module}.{klass.__name__}"


def check_client(owner: str, mode: Mode, client: Any) -> None:
    """Raise ``TypeError`` unless ``client`` is a client of ``mode`` (before any I/O)."""
    found = client_mode(client)
    if found == mode:
        return
    message = f"{owner} needs {_WANTED[mode]}; got {_qualname(client)}"
    if isinstance(client, str):
        message += f" {client[:40]!r} — to connect to a URI use {owner}.from_conn_string(uri)"
    elif found is not None and owner.removeprefix("Async") in _PAIRED:
        partner = owner.removeprefix("Async") if owner.startswith("Async") else f"Async{owner}"
        message += f" — use {partner}"
    raise TypeError(message)


class UnacknowledgedWritesError(MongoCkptError, ValueError):
    """A saver, store or cache was given a client or write concern whose writes the server
    does not acknowledge (``w=0``)."""


def acknowledged(owner: object, collection: Any, also: str = "") -> Any:
    """``collection``, unless its writes are unacknowledged: every operation reads what its
    writes report (ids inserted, values stored already, write errors), which ``w=0`` does
    not give, so ``owner`` refuses it at construction (``also``: what else to change)."""
    concern = getattr(collection, "write_concern", None)
    if getattr(concern, "acknowledged", True) is False:
        raise UnacknowledgedWritesError(
            f"{type(owner).__name__} needs acknowledged writes, got {concern!r}: it reads "
            "what each write reports (ids inserted, values stored already), which w=0 does "
            f"not give; use a client without w=0 (in its URI or keywords){also}"
        )
    return collection


def with_write_concern(collection: Any, write_concern: WriteConcern | None) -> Any:
    """``collection`` writing with ``write_concern``; as is when ``None`` or when the client
    library has no write concerns (mongomock, mongomock-motor)."""
    if write_concern is None or _is_mongomock(collection):
        return collection
    try:
        return collection.with_options(write_concern=write_concern)
    except (AttributeError, TypeError, NotImplementedError):
        return collection


def _client_kwargs(
    conn_string: str, client_kwargs: dict[str, Any] | None, timeout_ms: int | None
) -> dict[str, Any]:
    kwargs = dict(client_kwargs or {})
    if timeout_ms is not None:
        kwargs["timeoutMS"] = timeout_ms
    if "timeoutms" not in conn_string.lower() and not any(
        k.lower() == "timeoutms" for k in kwargs
    ):
        kwargs["timeoutMS"] = DEFAULT_TIMEOUT_MS
    return kwargs


def adopt_client(owner: Any, client: Any) -> None:
    """Called first by the saver and store constructors: check ``client`` against the
    owner's ``client_mode``, let an async owner note the running loop, and make a
    mongomock client (or mongomock-motor's) accept what PyMongo sends it."""
    adopt = getattr(owner, "_adopt_client", None)
    if adopt is not None:
        adopt(client)
    if _is_mongomock(client):
        patch_mongomock_bulk()


def shared_client(
    cls: type, what: str, owner: Any, expected: type[Any], kind: str, kwargs: dict[str, Any]
) -> tuple[Any, str]:
    """``(client, db_name)`` of ``owner`` (a ``kind`` of type ``expected``) for ``cls`` (a
    ``what``) to be built on, with ``owner``'s ``EncryptedSerializer`` as the default
    ``serde`` in ``kwargs``; a ``TypeError`` for an owner of the other mode."""
    if not isinstance(owner, expected):
        raise TypeError(
            f"{cls.__name__}.from_{kind} expects {expected.__name__}, got "
            f"{type(owner).__name__}: pair the sync {what} with the sync {kind} and the "
            f"async {what} with the async {kind}"
        )
    if isinstance(owner.serde, EncryptedSerializer):
        kwargs.setdefault("serde", owner.serde)
    return owner.client, owner.db.name


def _is_mongomock(client: Any) -> bool:
    return any(
        klass.__module__.split(".")[0] in ("mongomock", "mongomock_motor")
        for klass in type(client).__mro__
    )


class ClientOwner:
    """The mode a class's client must be of; ``_adopt_client`` checks it at construction."""

    client_mode: ClassVar[Mode]

    def _adopt_client(self, client: Any) -> None:
        check_client(type(self).__name__, self.client_mode, client)


class SyncClientOwner(ClientOwner):
    """A class on a synchronous client; ``owning`` is what its ``from_conn_string`` runs."""

    client_mode: ClassVar[Mode] = "sync"

    @staticmethod
    @contextmanager
    def owning(
        conn_string: str,
        client_kwargs: dict[str, Any] | None,
        timeout_ms: int | None,
        build: Callable[[MongoClient[dict[str, Any]]], T],
    ) -> Iterator[T]:
        """``build(client)`` on a new ``MongoClient`` that is closed when the context exits.

        The client's ``timeoutMS`` is ``DEFAULT_TIMEOUT_MS`` (10 s) unless the URI,
        ``timeout_ms`` or ``client_kwargs`` set it.
        """
        options = _client_kwargs(conn_string, client_kwargs, timeout_ms)
        with MongoClient(conn_string, **options) as client:
            owner = build(client)
            try:
                yield owner
            finally:
                if isinstance(owner, SyncDriver):  # its background upkeep stops first
                    owner._join_background(None, stop=True)


class AsyncClientOwner(ClientOwner):
    """A class on an asynchronous client (``owning`` on ``AsyncMongoClient``), and the loop
    its sync calls are sent to."""

    client_mode: ClassVar[Mode] = "async"
    loop: asyncio.AbstractEventLoop | None = None

    def _adopt_client(self, client: Any) -> None:
        super()._adopt_client(client)
        # Built inside the application's loop: sync calls from other threads work at once.
        self.loop = running_loop()

    @staticmethod
    @asynccontextmanager
    async def owning(
        conn_string: str,
        client_kwargs: dict[str, Any] | None,
        timeout_ms: int | None,
        build: Callable[[AsyncMongoClient[dict[str, Any]]], T],
    ) -> AsyncIterator[T]:
        """``build(client)`` on a new ``AsyncMongoClient`` that is closed when the context
        exits (``timeoutMS`` as in ``SyncClientOwner.owning``)."""
        options = _client_kwargs(conn_string, client_kwargs, timeout_ms)
        async with AsyncMongoClient(conn_string, **options) as client:
            owner = build(client)
            try:
                yield owner
            finally:
                if isinstance(owner, AsyncDriver):  # its background upkeep stops first
                    await owner._ajoin_background(None, stop=True)

    def _bind_running_loop(self) -> None:
        self.loop = asyncio.get_running_loop()

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return run_on_loop(coro, self.loop, type(self).__name__)


SyncOwnerT = TypeVar("SyncOwnerT", bound=SyncClientOwner)
AsyncOwnerT = TypeVar("AsyncOwnerT", bound=AsyncClientOwner)


class Owned(Generic[T]):
    """What ``from_conn_string`` returns: ``with`` it on a sync class, ``async with`` on an
    async one, for the instance ``build(client)`` on a new client closed on exit (the
    class's ``owning``). Typed so that the other statement is a mypy error."""

    _sync: AbstractContextManager[Any]
    _async: AbstractAsyncContextManager[Any]

    def __init__(
        self,
        owner: type[Any],
        conn_string: str,
        client_kwargs: dict[str, Any] | None,
        timeout_ms: int | None,
        build: Callable[[Any], T],
    ) -> None:
        self._owner = owner
        self._arguments = (conn_string, client_kwargs, timeout_ms, build)

    def _statement(self, sync: bool) -> None:
        if issubclass(self._owner, SyncClientOwner) != sync:
            right = "with" if not sync else "async with"
            raise TypeError(
                f"{self._owner.__name__}.from_conn_string(...) is used with `{right}`"
            )

    def __enter__(self: Owned[SyncOwnerT]) -> SyncOwnerT:
        self._statement(sync=True)
        self._sync = SyncClientOwner.owning(*self._arguments)
        owner: SyncOwnerT = self._sync.__enter__()
        return owner

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._sync.__exit__(*exc_info)

    async def __aenter__(self: Owned[AsyncOwnerT]) -> AsyncOwnerT:
        self._statement(sync=False)
        self._async = AsyncClientOwner.owning(*self._arguments)
        owner: AsyncOwnerT = await self._async.__aenter__()
        return owner

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._async.__aexit__(*exc_info)
