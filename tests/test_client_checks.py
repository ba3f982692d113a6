"""Constructors accept exactly the clients of their mode, and say what to use instead."""

from __future__ import annotations

import inspect
from typing import Any

import mongomock
import pytest
from mongomock_motor import AsyncMongoMockClient
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient, WriteConcern

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver, UnacknowledgedWritesError
from mongo_ckpt.cache import AsyncMongoDBCache, MongoDBCache
from mongo_ckpt.connection import DEFAULT_WRITE_CONCERN, client_mode
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore

NOWHERE = "mongodb://127.0.0.1:1"  # never contacted: connect=False, and checks come first


def _clients() -> dict[str, Any]:
    return {
        "pymongo.MongoClient": MongoClient(NOWHERE, connect=False),
        "mongomock.MongoClient": mongomock.MongoClient(),
        "pymongo.AsyncMongoClient": AsyncMongoClient(NOWHERE, connect=False),
        "motor.AsyncIOMotorClient": AsyncIOMotorClient(NOWHERE, connect=False),
        "mongomock_motor.AsyncMongoMockClient": AsyncMongoMockClient(),
    }


SYNC = {"pymongo.MongoClient", "mongomock.MongoClient"}
ASYNC = {"pymongo.AsyncMongoClient", "motor.AsyncIOMotorClient",
         "mongomock_motor.AsyncMongoMockClient"}
CLASSES = {
    MongoDBSaver: ("sync", AsyncMongoDBSaver),
    MongoDBStore: ("sync", AsyncMongoDBStore),
    AsyncMongoDBSaver: ("async", MongoDBSaver),
    AsyncMongoDBStore: ("async", MongoDBStore),
}


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_each_class_takes_the_clients_of_its_mode_and_refuses_the_others(cls: type) -> None:
    mode, partner = CLASSES[cls]
    for name, client in _clients().items():
        if name in (SYNC if mode == "sync" else ASYNC):
            instance = cls(client, "t_checks")
            assert instance.client is client
            continue
        with pytest.raises(TypeError) as raised:
            cls(client, "t_checks")
        message = str(raised.value)
        assert message.startswith(f"{cls.__name__} needs ")
        assert ("synchronous" if mode == "sync" else "asynchronous") in message
        assert f"use {partner.__name__}" in message


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_a_uri_string_points_at_from_conn_string(cls: type) -> None:
    with pytest.raises(TypeError) as raised:
        cls("mongodb://localhost:27017", "t_checks")
    message = str(raised.value)
    assert "got str 'mongodb://localhost:27017'" in message
    assert f"{cls.__name__}.from_conn_string(uri)" in message


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "thing", [object(), None, 42, {"db": 1}], ids=["object", "None", "42", "a dict"]
)
def test_anything_else_is_refused_by_name(cls: type, thing: Any) -> None:
    with pytest.raises(TypeError, match=f"^{cls.__name__} needs .*; got {type(thing).__name__}"):
        cls(thing, "t_checks")


def test_store_refuses_an_async_client_instead_of_writing_nothing() -> None:
    client = AsyncMongoClient(NOWHERE, connect=False)
    with pytest.raises(TypeError, match="use AsyncMongoDBStore"):
        MongoDBStore(client).put(("a",), "k", {"v": 1})


def test_client_mode_recognises_subclasses() -> None:
    class MyClient(MongoClient):
        pass

    assert client_mode(MyClient(NOWHERE, connect=False)) == "sync"
    assert client_mode(object()) is None


@pytest.mark.parametrize("cls", [AsyncMongoDBSaver, AsyncMongoDBStore, MongoDBSaver, MongoDBStore])
def test_signatures_show_the_real_parameters(cls: type) -> None:
    params = inspect.signature(cls).parameters
    assert list(params)[:2] == ["client", "db_name"]
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values())
    if "Saver" in cls.__name__:
        assert "write_concern" in params and "checkpoint_collection_name" in params
    else:
        assert "collection_name" in params and "index" in params


async def test_async_saver_built_in_a_loop_notes_it() -> None:
    import asyncio

    saver = AsyncMongoDBSaver(AsyncMongoMockClient(), "t_checks")
    assert saver.loop is asyncio.get_running_loop()
    assert AsyncMongoDBSaver(AsyncMongoClient(NOWHERE, connect=False)).loop is not None


def test_async_saver_built_outside_a_loop_has_none() -> None:
    assert AsyncMongoDBSaver(AsyncMongoMockClient(), "t_checks").loop is None


def test_savers_write_majority_journaled_by_default_and_can_be_told_otherwise() -> None:
    from pymongo.write_concern import WriteConcern

    client = MongoClient(NOWHERE, connect=False)
    saver = MongoDBSaver(client, "t_checks")
    assert DEFAULT_WRITE_CONCERN.document == {"w": "majority", "j": True}
    assert all(c.write_concern == DEFAULT_WRITE_CONCERN for c in saver.collections.values())
    custom = MongoDBSaver(client, "t_checks", write_concern=WriteConcern(w=1))
    assert all(c.write_concern.document == {"w": 1} for c in custom.collections.values())
    plain = MongoDBSaver(client, "t_checks", write_concern=None)
    assert all(c.write_concern == client.write_concern for c in plain.collections.values())
    asaver = AsyncMongoDBSaver(AsyncIOMotorClient(NOWHERE, connect=False), "t_checks")
    assert all(c.write_concern == DEFAULT_WRITE_CONCERN for c in asaver.collections.values())
    # mongomock has no write concerns: the saver runs on it unchanged.
    MongoDBSaver(mongomock.MongoClient(), "t_checks").setup()


CACHES = {MongoDBCache: "sync", AsyncMongoDBCache: "async"}


@pytest.mark.parametrize("cls", [*CLASSES, *CACHES], ids=lambda c: c.__name__)
def test_from_conn_string_has_the_constructors_parameters(cls: type) -> None:
    made = inspect.signature(cls.from_conn_string).parameters
    built = inspect.signature(cls.__init__).parameters
    assert list(made)[:2] == ["conn_string", "db_name"]
    assert made["conn_string"].annotation == "str"
    assert [p for p in made if p not in ("conn_string", "client_kwargs", "timeoutMS")] == [
        p for p in built if p not in ("self", "client")
    ]
    assert {p: built[p].default for p in built if p in made} == {
        p: made[p].default for p in made if p in built
    }


async def test_from_conn_string_in_the_wrong_statement_says_which() -> None:
    wrong = r"AsyncMongoDBSaver.from_conn_string\(...\) is used with `async with`"
    with pytest.raises(TypeError, match=wrong), AsyncMongoDBSaver.from_conn_string(NOWHERE):
        pass
    with pytest.raises(TypeError, match=r"MongoDBStore.from_conn_string\(...\) is used with "
                                        "`with`"):
        async with MongoDBStore.from_conn_string(NOWHERE):
            pass


UNACKNOWLEDGED = "mongodb://127.0.0.1:1/?w=0"
ASYNC_CLASSES = (AsyncMongoDBSaver, AsyncMongoDBStore, AsyncMongoDBCache)


def _client(cls: type, uri: str) -> Any:
    return (AsyncMongoClient if cls in ASYNC_CLASSES else MongoClient)(uri, connect=False)


@pytest.mark.parametrize("cls", [*CLASSES, MongoDBCache, AsyncMongoDBCache],
                         ids=lambda c: c.__name__)
def test_unacknowledged_writes_are_refused_at_construction(cls: type) -> None:
    """With ``w=0`` a write reports nothing back (PyMongo refuses the client-level bulk
    write, a put could not tell a value stored already): refused before any call. A saver
    writes with its own write concern (``w="majority"`` by default), so only the client's
    ``w=0`` taken as is (``write_concern=None``) or given is refused."""
    is_saver = cls in (MongoDBSaver, AsyncMongoDBSaver)
    options = {"write_concern": None} if is_saver else {}
    with pytest.raises(UnacknowledgedWritesError) as raised:
        cls(_client(cls, UNACKNOWLEDGED), "t_checks", **options)
    assert str(raised.value).startswith(f"{cls.__name__} needs acknowledged writes")
    assert "use a client without w=0" in str(raised.value)
    if is_saver:
        with pytest.raises(UnacknowledgedWritesError, match="leave write_concern= at its"):
            cls(_client(cls, NOWHERE), "t_checks", write_concern=WriteConcern(w=0))
        saver = cls(_client(cls, UNACKNOWLEDGED), "t_checks")  # its own write concern
        assert saver.collections["checkpoints"].write_concern == DEFAULT_WRITE_CONCERN
