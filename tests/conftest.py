"""Backend-parametrized fixtures: every saver test runs on mock, wire and (if set) mongodb."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from tests import backends
from tests.backends import (
    ASYNC_DRIVERS,
    MONGODB_URI,
    SYNC_DRIVERS,
    aclose,
    async_client,
    stop_wire,
    sync_client,
)

pytest_plugins = ["tests.store_support"]


def _param(backend: str, driver: str) -> Any:
    marks = [pytest.mark.mongodb] if backend == "mongodb" else []
    return pytest.param((backend, driver), id=f"{backend}-{driver}", marks=marks)


SERVER_CHECK_TIMEOUT_MS = 2_000


def pytest_configure(config: Any) -> None:
    """pytest creates ``--basetemp`` (build/pytest-tmp by default) but not its parent."""
    if config.option.basetemp:
        Path(config.option.basetemp).parent.mkdir(parents=True, exist_ok=True)


def pytest_sessionstart(session: Any) -> None:
    """With ``MONGODB_URI`` set, ping it once before anything runs; stop the run if it fails."""
    if not MONGODB_URI:
        return
    import pymongo
    from pymongo.errors import PyMongoError

    client: pymongo.MongoClient = pymongo.MongoClient(
        MONGODB_URI, serverSelectionTimeoutMS=SERVER_CHECK_TIMEOUT_MS
    )
    try:
        with pymongo.timeout(SERVER_CHECK_TIMEOUT_MS / 1000):  # also when the URI has timeoutMS
            client.admin.command("ping")
    except PyMongoError as exc:
        reason = str(exc).split(" (configured")[0].split(", Timeout:")[0][:200]
        pytest.exit(
            f"MONGODB_URI={MONGODB_URI!r} did not answer a ping within "
            f"{SERVER_CHECK_TIMEOUT_MS // 1000} s ({type(exc).__name__}: {reason}). Start the "
            "server (docker compose -f docker/compose.yml up -d --wait) or unset MONGODB_URI "
            "to run on the in-process backends only.",
            returncode=3,
        )
    finally:
        client.close()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    skip = pytest.mark.skip(reason="MONGODB_URI is not set: no real MongoDB to test against")
    for item in items:
        if "mongodb" in item.keywords and not MONGODB_URI:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _wire_server(tmp_path_factory: Any) -> Iterator[None]:
    """The wire server keeps its data in pytest's temp tree, deleted when the session ends."""
    backends.wire_storage_root = str(tmp_path_factory.mktemp("wire"))
    yield
    stop_wire()


@pytest.fixture
def db_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=[_param(*p) for p in ASYNC_DRIVERS])
async def aclient(request: Any) -> AsyncIterator[Any]:
    client = async_client(*request.param)
    yield client
    await aclose(client)


@pytest.fixture(params=[_param(*p) for p in SYNC_DRIVERS])
def client(request: Any) -> Iterator[Any]:
    c = sync_client(request.param[0])
    yield c
    c.close()


@pytest.fixture
async def asaver(aclient: Any, db_name: str) -> AsyncIterator[AsyncMongoDBSaver]:
    saver = AsyncMongoDBSaver(aclient, db_name)
    await saver.asetup()
    yield saver
    await _drop(aclient, db_name)


@pytest.fixture
def saver(client: Any, db_name: str) -> Iterator[MongoDBSaver]:
    s = MongoDBSaver(client, db_name)
    s.setup()
    yield s
    client.drop_database(db_name)


async def _drop(client: Any, db_name: str) -> None:
    result = client.drop_database(db_name)
    if hasattr(result, "__await__"):
        await result
