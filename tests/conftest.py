"""Backend-parametrized fixtures: every saver test runs on mock, wire and (if set) mongodb."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
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


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    skip = pytest.mark.skip(reason="MONGODB_URI is not set: no real MongoDB to test against")
    for item in items:
        if "mongodb" in item.keywords and not MONGODB_URI:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _wire_server() -> Iterator[None]:
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
