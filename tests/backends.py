"""The three test backends (mock, wire, mongodb) and client factories for each driver."""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import mongomock
import pytest

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.inprocess import patch_mongomock_bulk

patch_mongomock_bulk()

MONGODB_URI = os.environ.get("MONGODB_URI")
BACKENDS = ["mock", "wire", "mongodb"]
# (backend, async driver) pairs the async suites run on.
ASYNC_DRIVERS = [("mock", "mongomock_motor"), ("wire", "pymongo"), ("wire", "motor"),
                 ("mongodb", "pymongo"), ("mongodb", "motor")]
SYNC_DRIVERS = [("mock", "mongomock"), ("wire", "pymongo"), ("mongodb", "pymongo")]


@dataclass(frozen=True)
class Target:
    """One backend driven through one driver, sync or async: what a test case runs on."""

    backend: str
    driver: str
    is_async: bool

    @property
    def id(self) -> str:
        """``mock-sync``, ``wire-async`` (PyMongo), ``wire-motor-async``..."""
        motor = "-motor" if self.driver == "motor" else ""
        return f"{self.backend}{motor}-{'async' if self.is_async else 'sync'}"

    @property
    def saver_class(self) -> type[MongoDBSaver] | type[AsyncMongoDBSaver]:
        return AsyncMongoDBSaver if self.is_async else MongoDBSaver

    def client(self) -> Any:
        """A new client of this driver on this backend."""
        if self.is_async:
            return async_client(self.backend, self.driver)
        return sync_client(self.backend)


TARGETS = [Target(b, d, False) for b, d in SYNC_DRIVERS] + [
    Target(b, d, True) for b, d in ASYNC_DRIVERS
]


def target_params(targets: Iterable[Target]) -> list[Any]:
    """One ``pytest.param`` per target, with its id; those on the real server are marked
    ``mongodb`` (skipped without ``MONGODB_URI``)."""
    return [
        pytest.param(t, id=t.id, marks=[pytest.mark.mongodb] if t.backend == "mongodb" else [])
        for t in targets
    ]

_wire_server: Any = None
_wire_storage: str | None = None
# Where the wire server keeps its data: set by conftest to a directory in pytest's temp tree.
wire_storage_root: str | None = None
# Seconds between the wire server's TTL sweeps: often, so TTL tests see expiry soon. Each
# sweep decodes every document of every collection with a TTL index (MongoDB's TTL monitor
# walks the index instead), so the benchmarks set mongod's default, 60, before first use.
wire_ttl_sweep_seconds = 1.0


def wire_uri() -> str:
    """URI of the in-process SecantusDB server, started on first use."""
    global _wire_server, _wire_storage
    if _wire_server is None:
        from secantus import SecantusDBServer

        _wire_storage = tempfile.mkdtemp(prefix="mongo-ckpt-wire-", dir=wire_storage_root)
        _wire_server = SecantusDBServer(
            port=0, storage_path=_wire_storage, ttl_sweep_seconds=wire_ttl_sweep_seconds
        )
        _wire_server.start()
    return _wire_server.uri


def wire_storage() -> str | None:
    """The running wire server's data directory (``None`` when it is not running)."""
    return _wire_storage


def stop_wire() -> None:
    """Stop the wire server and delete its data."""
    global _wire_server, _wire_storage
    if _wire_server is not None:
        _wire_server.stop()
        _wire_server = None
    if _wire_storage is not None:
        shutil.rmtree(_wire_storage, ignore_errors=True)
        _wire_storage = None


def uri_for(backend: str) -> str:
    if backend == "wire":
        return wire_uri()
    if backend == "mongodb":
        assert MONGODB_URI
        return MONGODB_URI
    raise ValueError(backend)


def sync_client(backend: str) -> Any:
    if backend == "mock":
        return mongomock.MongoClient()
    from pymongo import MongoClient

    return MongoClient(uri_for(backend), directConnection=backend == "wire")


def async_client(backend: str, driver: str) -> Any:
    if driver == "mongomock_motor":
        from mongomock_motor import AsyncMongoMockClient

        return AsyncMongoMockClient()
    kwargs = {"directConnection": True} if backend == "wire" else {}
    if driver == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        return AsyncIOMotorClient(uri_for(backend), **kwargs)
    from pymongo import AsyncMongoClient

    return AsyncMongoClient(uri_for(backend), **kwargs)


async def maybe_await(value: Any) -> Any:
    """``value``, awaited if it is awaitable (async drivers return coroutines or futures)."""
    return await value if inspect.isawaitable(value) else value


async def aclose(client: Any) -> None:
    """Close a sync or an async client."""
    await maybe_await(client.close())


class CountingCollection:
    """Delegates to a collection (or the saver's client, under ``calls.CLIENT``) and counts
    every method call on it (one round trip each: a client-level bulk write is one)."""

    def __init__(self, inner: Any, name: str, counter: Counter) -> None:
        self._inner, self._name, self._counter = inner, name, counter

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counter[(self._name, attr)] += 1
            return value(*args, **kwargs)

        return call


class FirstArguments:
    """Delegates to a collection (or the saver's client) and keeps the first argument of
    every call of ``method`` on it (the requests of a ``bulk_write``, the pipeline of an
    ``aggregate``)."""

    def __init__(self, inner: Any, method: str, sent: list[Any]) -> None:
        self._inner, self._method, self._sent = inner, method, sent

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr != self._method:
            return value

        def call(first: Any, *args: Any, **kwargs: Any) -> Any:
            self._sent.append(first)
            return value(first, *args, **kwargs)

        return call


def record_first_arguments(
    collections: dict[str, Any], names: Iterable[str], method: str
) -> list[Any]:
    """Wrap ``collections[name]`` for each of ``names`` in place; the returned list fills
    with the first argument of each ``method`` call on them."""
    sent: list[Any] = []
    for name in names:
        collections[name] = FirstArguments(collections[name], method, sent)
    return sent


def count_calls(collections: dict[str, Any]) -> Counter:
    """Wrap ``collections`` in place; the returned counter fills as calls are made."""
    counter: Counter = Counter()
    for name, coll in list(collections.items()):
        collections[name] = CountingCollection(coll, name, counter)
    return counter


def total(counter: Mapping[Any, int]) -> int:
    return sum(counter.values())


@contextmanager
def failing_bulk_write(client: Any, code: int) -> Iterator[None]:
    """The wire server fails the next ``bulkWrite`` command with ``code``, as a server
    without it does, before running any of it."""
    spec = {"failCommands": ["bulkWrite"], "errorCode": code, "errmsg": "no bulkWrite here"}
    client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1}, "data": spec})
    try:
        yield
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
