"""Backend-parametrized fixtures: every saver and store test runs on mock, wire and (if set)
mongodb; ``api`` also runs each test on the sync and the async saver."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.redaction import reason
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from tests import backends
from tests.backends import (
    ASYNC_DRIVERS,
    MONGODB_URI,
    SYNC_DRIVERS,
    TARGETS,
    Target,
    aclose,
    async_client,
    maybe_await,
    stop_wire,
    sync_client,
    target_params,
)
from tests.lengths import FIXED, LONG_RUN, Length
from tests.saver_support import Api
from tests.store_support import StoreApi


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
        why = reason(exc)
        pytest.exit(
            f"MONGODB_URI={MONGODB_URI!r} did not answer a ping within "
            f"{SERVER_CHECK_TIMEOUT_MS // 1000} s ({type(exc).__name__}: {why}). Start the "
            "server (docker compose -f docker/compose.yml up -d --wait) or unset MONGODB_URI "
            "to run on the in-process backends only.",
            returncode=3,
        )
    finally:
        client.close()


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="the exhaustive tier: what the default run leaves out (the rest of the backend x "
        "driver matrix, and the tests marked exhaustive); the default run and this one "
        "together run every test once",
    )


# The default tier runs each backend-parametrized test on this diagonal: both backends,
# both modes. The other driver combinations (Motor, sync on servers, async on mock) run
# in the exhaustive tier; tests marked every_driver (tests/test_driver_contract.py) run on
# every target by default.
DEFAULT_TARGETS = {"mock-sync", "wire-async", "mongodb-async"}


def _duplicate_put_path(item: Any) -> bool:
    """A mock case with ``client_bulk_write=False``: mock has no client-level bulk write, so
    its ``None`` case runs the same two-command path."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("client_bulk_write") is not False:
        return False
    return any(
        (isinstance(v, Target) and v.backend == "mock")
        or (isinstance(v, tuple) and len(v) == 2 and v[0] == "mock")
        for v in params.values()
    )


def _long_run_elsewhere(item: Any) -> bool:
    """A long run (``length``) on mongomock or on a driver other than the default one: long
    runs look for rare sequences in what the library sends, so they run once per server
    with PyMongo (async where the test has both modes); mongomock, slower than the wire
    server on them, and the other drivers run the fixed length."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("length") is not LONG_RUN:
        return False
    for value in params.values():
        if isinstance(value, Target):
            if value.backend == "mock" or value.driver == "motor" or not value.is_async:
                return True
        elif (
            isinstance(value, tuple)
            and len(value) == 2
            and value[0] in backends.BACKENDS
            and (value[0] == "mock" or value[1] == "motor")
        ):
            return True
    return False


def _in_default_tier(item: Any) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "every_driver" in item.keywords:
        return True
    mock_only = "mock_by_default" in item.keywords
    for value in params.values():
        if isinstance(value, Target):
            if value.id not in DEFAULT_TARGETS or (mock_only and value.backend != "mock"):
                return False
        elif isinstance(value, tuple) and len(value) == 2 and value[0] in backends.BACKENDS:
            backend, driver = value
            if driver == "motor" or (mock_only and backend != "mock"):
                return False
    return True


def _in_tier(item: Any, full: bool) -> bool:
    """The default tier, or with ``--full`` exactly what the default tier leaves out."""
    default = _in_default_tier(item) and "exhaustive" not in item.keywords
    return default != full


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    skip = pytest.mark.skip(reason="MONGODB_URI is not set: no real MongoDB to test against")
    full = config.getoption("--full")
    kept = [
        item
        for item in items
        if not _duplicate_put_path(item) and not _long_run_elsewhere(item) and _in_tier(item, full)
    ]
    if len(kept) < len(items):
        chosen = set(map(id, kept))
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in chosen])
        items[:] = kept
    for item in items:
        if "mongodb" in item.keywords and not MONGODB_URI:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _wire_server(tmp_path_factory: Any) -> Iterator[None]:
    """The wire server keeps its data in pytest's temp tree, deleted when the session ends."""
    backends.wire_storage_root = str(tmp_path_factory.mktemp("wire"))
    yield
    stop_wire()


@pytest.fixture(
    params=[pytest.param(FIXED, id="fixed"),
            pytest.param(LONG_RUN, id="long", marks=pytest.mark.exhaustive)]
)
def length(request: Any) -> Length:
    """A generative test's length: fixed in the default tier, long in the exhaustive one
    (tests/lengths.py)."""
    return request.param


@pytest.fixture
def wire_client() -> Iterator[Any]:
    """A PyMongo client of this worker's wire server."""
    client: Any = sync_client("wire")
    yield client
    client.close()


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


@pytest.fixture(params=target_params(TARGETS))
def target(request: Any) -> Target:
    """Each backend with each driver, sync and async (``mock-sync``, ``wire-async``...)."""
    return request.param


@pytest.fixture
def client_bulk_write() -> bool | None:
    """The ``client_bulk_write`` of the ``api`` fixture's saver: detected (the wire server
    has the client-level bulk write). Tests of both put paths parametrize it
    (``saver_support.BOTH_PUT_PATHS``)."""
    return None


@pytest.fixture
async def api(target: Target, db_name: str, client_bulk_write: bool | None) -> AsyncIterator[Api]:
    """A set-up saver of ``target``'s kind in a fresh database, behind ``Api``."""
    client = target.client()
    api = Api(target.saver_class(client, db_name, client_bulk_write=client_bulk_write))
    await api.setup()
    yield api
    await api.drop_database()
    await aclose(client)


@pytest.fixture
async def asaver(aclient: Any, db_name: str) -> AsyncIterator[AsyncMongoDBSaver]:
    saver = AsyncMongoDBSaver(aclient, db_name)
    await saver.asetup()
    yield saver
    await maybe_await(aclient.drop_database(db_name))


@pytest.fixture
def saver(client: Any, db_name: str) -> Iterator[MongoDBSaver]:
    s = MongoDBSaver(client, db_name)
    s.setup()
    yield s
    client.drop_database(db_name)


@pytest.fixture
async def make_astore(
    aclient: Any, db_name: str
) -> AsyncIterator[Callable[..., AsyncMongoDBStore]]:
    """Factory of ``AsyncMongoDBStore``s on the parametrized async client, in a fresh database."""

    def make(**kwargs: Any) -> AsyncMongoDBStore:
        return AsyncMongoDBStore(aclient, db_name, **kwargs)

    yield make
    await maybe_await(aclient.drop_database(db_name))


@pytest.fixture
def make_store(client: Any, db_name: str) -> Iterator[Callable[..., MongoDBStore]]:
    """Factory of ``MongoDBStore``s on the parametrized sync client, in a fresh database."""

    def make(**kwargs: Any) -> MongoDBStore:
        return MongoDBStore(client, db_name, **kwargs)

    yield make
    client.drop_database(db_name)


@pytest.fixture
async def store_api(target: Target, db_name: str) -> AsyncIterator[StoreApi]:
    """A store of ``target``'s kind in a fresh database, behind ``StoreApi``."""
    client = target.client()
    store_class = AsyncMongoDBStore if target.is_async else MongoDBStore
    yield StoreApi(store_class(client, db_name))
    await maybe_await(client.drop_database(db_name))
    await aclose(client)


# How a batch's puts are written: update pipelines (a few puts), plain upserts after the
# revive statements (many puts per set of keys), or inserts first, the rest as upserts
# once a stored item refuses its insert (a batch of at least documents.INSERTS_FROM puts).
PUT_SHAPES = {
    "pipeline": {"PUTS_PER_REVIVE": 10**6, "INSERTS_FROM": 10**6},
    "plain": {"PUTS_PER_REVIVE": 1, "INSERTS_FROM": 10**6},
    "insert": {"PUTS_PER_REVIVE": 10**6, "INSERTS_FROM": 1},
}


@pytest.fixture(params=list(PUT_SHAPES))
def put_shape(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every batch of the test writes its puts in one shape (``PUT_SHAPES``)."""
    from mongo_ckpt.store import documents

    for name, value in PUT_SHAPES[request.param].items():
        monkeypatch.setattr(documents, name, value)
    return str(request.param)
