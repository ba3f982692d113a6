"""Clients made by ``from_conn_string`` and the demo give up on a frozen server in bounded time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.errors import PyMongoError

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.connection import DEFAULT_TIMEOUT_MS
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore

TIMEOUT_MS = 500
CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


@pytest.fixture
def frozen_uri() -> Iterator[str]:
    """A loopback server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"mongodb://127.0.0.1:{server.getsockname()[1]}/?directConnection=true"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def _bounded(started: float) -> None:
    elapsed = time.monotonic() - started
    # Far below the drivers' 10-30 s defaults, with room for a paused CI machine.
    assert elapsed < 10 * TIMEOUT_MS / 1000, f"gave up after {elapsed:.2f}s"


@pytest.mark.parametrize("cls", [MongoDBSaver, MongoDBStore], ids=lambda c: c.__name__)
def test_sync_operation_on_a_frozen_server_fails_within_the_timeout(
    cls: Any, frozen_uri: str
) -> None:
    started = time.monotonic()
    with (
        pytest.raises(PyMongoError, match="timed out|Timeout"),
        cls.from_conn_string(frozen_uri, "t_frozen", timeoutMS=TIMEOUT_MS) as owner,
    ):
        owner.setup()
    _bounded(started)


@pytest.mark.parametrize("cls", [AsyncMongoDBSaver, AsyncMongoDBStore], ids=lambda c: c.__name__)
async def test_async_operation_on_a_frozen_server_fails_within_the_timeout(
    cls: Any, frozen_uri: str
) -> None:
    started = time.monotonic()
    with pytest.raises(PyMongoError, match="timed out|Timeout"):
        async with cls.from_conn_string(frozen_uri, "t_frozen", timeoutMS=TIMEOUT_MS) as owner:
            await owner.asetup()
    _bounded(started)


def test_the_uri_sets_the_timeout_too(frozen_uri: str) -> None:
    started = time.monotonic()
    with (
        pytest.raises(PyMongoError),
        MongoDBSaver.from_conn_string(f"{frozen_uri}&timeoutMS={TIMEOUT_MS}") as saver,
    ):
        saver.get_tuple(CONFIG)
    _bounded(started)


def test_default_timeout_is_bounded_and_overridable() -> None:
    uri = "mongodb://127.0.0.1:1/?directConnection=true"
    with MongoDBSaver.from_conn_string(uri) as saver:
        assert saver.client.options.timeout == DEFAULT_TIMEOUT_MS / 1000 == 10
    with MongoDBSaver.from_conn_string(uri, client_kwargs={"timeoutMS": 2000}) as saver:
        assert saver.client.options.timeout == 2
    with MongoDBSaver.from_conn_string(uri + "&timeoutMS=3000") as saver:
        assert saver.client.options.timeout == 3


async def test_demo_client_has_the_default_timeout() -> None:
    from mongo_ckpt.demo import open_client

    client, _ = open_client("mongodb://127.0.0.1:1/?directConnection=true")
    try:
        assert client.options.timeout == DEFAULT_TIMEOUT_MS / 1000
    finally:
        await client.close()
