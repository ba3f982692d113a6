"""The node cache: get/set/clear semantics, one command per call, expiry by the server's
clock, refusals that send nothing, and the client it shares."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import mongomock
import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from mongomock_motor import AsyncMongoMockClient

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.cache import AsyncMongoDBCache, CacheInputError, CacheTypeError, MongoDBCache
from mongo_ckpt.cache.documents import KEY_ROOM, MAX_DOCUMENT_BYTES, MAX_VALUE_BYTES
from mongo_ckpt.cache.operations import CACHE
from mongo_ckpt.clock import CLOCK_ID, aware
from mongo_ckpt.drivers import ClientClosedError
from mongo_ckpt.schema import SCHEMA
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from tests.backends import Target, aclose, count_calls, maybe_await, total, wire_uri
from tests.cache.support import CacheApi, Clock, cache_class

NS = ("__pregel_ns_writes", "graph:node", "node")
OTHER = ("__pregel_ns_writes", "graph:other", "other")


def keys(n: int, namespace: tuple[str, ...] = NS) -> list[tuple[tuple[str, ...], str]]:
    return [(namespace, f"k{i}") for i in range(n)]


async def test_set_get_overwrite_and_clear(cache_api: CacheApi) -> None:
    await cache_api.set({
        (NS, "a"): ({"x": [1, 2]}, None),
        (NS, "b"): ("two", 60),
        (OTHER, "a"): (3, 60),
    })
    assert await cache_api.get([(NS, "a"), (NS, "b"), (OTHER, "a"), (NS, "missing")]) == {
        (NS, "a"): {"x": [1, 2]},
        (NS, "b"): "two",
        (OTHER, "a"): 3,
    }
    await cache_api.set({(NS, "a"): ("new", 60)})  # an overwrite replaces value and expiry
    assert await cache_api.get([(NS, "a")]) == {(NS, "a"): "new"}
    await cache_api.clear([NS])
    assert await cache_api.get([(NS, "a"), (NS, "b"), (OTHER, "a")]) == {(OTHER, "a"): 3}
    await cache_api.clear()
    assert await cache_api.get([(OTHER, "a")]) == {}
    assert await cache_api.docs() == []


TRICKY = [("a",), ("a", "b"), ("a", "b", "c"), ("a,b",), ("a-",), ('a"',), ("a\\",), ("é", "ß")]


@pytest.mark.parametrize("cleared", TRICKY, ids=repr)
async def test_a_namespace_is_matched_whole(cache_api: CacheApi, cleared: tuple[str, ...]) -> None:
    """Not the namespaces under it, nor those whose labels share its characters."""
    await cache_api.set({(ns, key): (i, None) for i, ns in enumerate(TRICKY) for key in "kl"})
    await cache_api.clear([cleared])
    expected = {(ns, key): i for i, ns in enumerate(TRICKY) for key in "kl" if ns != cleared}
    assert await cache_api.get([(ns, key) for ns in TRICKY for key in "kl"]) == expected


async def test_one_document_per_entry(cache_api: CacheApi) -> None:
    await cache_api.set({(NS, "a"): ("v", 30), (NS, "b"): ("w", None)})
    await cache_api.set({(NS, "a"): ("v2", None)})
    docs = {d["key"]: d for d in await cache_api.docs()}
    assert set(docs) == {"a", "b"}
    assert docs["a"]["namespace"] == list(NS)
    assert "expires_at" not in docs["a"] and "expires_at" not in docs["b"]
    assert {d["encoding"] for d in docs.values()} == {"msgpack"}


async def test_round_trips(cache_api: CacheApi) -> None:
    counter = count_calls(cache_api.cache.collections)
    await cache_api.set({key: (i, 60 if i % 2 else None) for i, key in enumerate(keys(50))})
    assert counter == {(CACHE, "bulk_write"): 1}
    counter.clear()
    assert len(await cache_api.get(keys(50) + keys(5, OTHER))) == 50
    assert counter == {(CACHE, "find"): 1}
    counter.clear()
    await cache_api.clear([NS, OTHER])
    await cache_api.clear()
    assert counter == {(CACHE, "delete_many"): 2}
    counter.clear()
    assert await cache_api.get([]) == {}
    await cache_api.set({})
    await cache_api.clear([])
    assert total(counter) == 0


async def test_setup_on_first_use_then_one_command(target: Target, db_name: str) -> None:
    client = target.client()
    try:
        api = CacheApi(cache_class(target)(client, db_name))
        counter = count_calls(api.cache.collections)
        await api.get(keys(1))  # indexes, the server's clock, then the find
        assert counter == {
            (CACHE, "create_indexes"): 1, (SCHEMA, "find_one_and_update"): 1, (CACHE, "find"): 1
        }
        counter.clear()
        await api.get(keys(1))
        assert counter == {(CACHE, "find"): 1}
        await api.setup()  # idempotent
        await api.setup()
        info = await maybe_await(api.cache.collection.index_information())
        assert info["expires_at"]["expireAfterSeconds"] == 0
        assert set(info) == {"_id_", "expires_at"}
    finally:
        await maybe_await(client.drop_database(db_name))
        await aclose(client)


async def test_an_entry_expires_at_its_ttl(cache_api: CacheApi, clock: Clock) -> None:
    await cache_api.set({(NS, "short"): (1, 10), (NS, "long"): (2, 100), (NS, "ever"): (3, None)})
    await cache_api.set({(NS, "zero"): (4, 0)})
    assert await cache_api.get(keys(0) + [(NS, k) for k in ("short", "long", "ever", "zero")]) == {
        (NS, "short"): 1, (NS, "long"): 2, (NS, "ever"): 3
    }
    clock.advance(10)
    assert set(await cache_api.get([(NS, "short"), (NS, "long"), (NS, "ever")])) == {
        (NS, "long"), (NS, "ever")
    }
    await cache_api.set({(NS, "long"): (5, None)})  # overwritten without a TTL: never expires
    clock.advance(10_000)
    assert await cache_api.get([(NS, "short"), (NS, "long"), (NS, "ever")]) == {
        (NS, "long"): 5, (NS, "ever"): 3
    }


class SkewedClockCollection:
    """The schema collection, answering the clock reading ``skew`` ahead of the server."""

    def __init__(self, inner: Any, skew: timedelta) -> None:
        self._inner, self._skew = inner, skew

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def find_one_and_update(self, *args: Any, **kwargs: Any) -> Any:
        result = self._inner.find_one_and_update(*args, **kwargs)

        async def shifted() -> Any:
            doc = await result
            return {**doc, "now": doc["now"] + self._skew}

        if hasattr(result, "__await__"):
            return shifted()
        return {**result, "now": result["now"] + self._skew}


async def test_expiry_is_judged_by_the_servers_clock(cache_api: CacheApi) -> None:
    """A cache whose client clock is an hour behind the server's: what it writes expires by
    the server's time, and an entry the server holds as expired is never served."""
    collections = cache_api.cache.collections
    collections[SCHEMA] = SkewedClockCollection(collections[SCHEMA], timedelta(hours=1))
    await cache_api.setup()  # reads the (skewed) server clock
    client_now = datetime.now(timezone.utc)
    await cache_api.set({(NS, "a"): (1, 60)})
    [doc] = await cache_api.docs()
    expires = aware(doc["expires_at"]) - client_now
    assert timedelta(minutes=60, seconds=50) < expires < timedelta(minutes=61, seconds=10)
    # An entry expiring half an hour from the client's now: past, for the server.
    stale = {**doc, "_id": '["x","stale"]', "namespace": ["x"], "key": "stale",
             "expires_at": client_now + timedelta(minutes=30)}
    await maybe_await(collections[CACHE].insert_one(stale))
    assert await cache_api.get([(("x",), "stale"), (NS, "a")]) == {(NS, "a"): 1}


async def test_the_servers_clock_is_read_again_after_a_while(
    cache_api: CacheApi, clock: Clock
) -> None:
    counter = count_calls(cache_api.cache.collections)
    clock.advance(cache_api.cache.ops.clock.refresh_seconds + 1)
    await cache_api.get(keys(2))
    await cache_api.get(keys(2))
    assert counter == {(SCHEMA, "find_one_and_update"): 1, (CACHE, "find"): 2}


async def test_the_clock_document_is_the_one_the_saver_uses(cache_api: CacheApi) -> None:
    doc = await maybe_await(cache_api.cache.collections[SCHEMA].find_one({"_id": CLOCK_ID}))
    assert set(doc) == {"_id", "now"}


class Unserializable:
    pass


BAD_SETS = [
    ({((1, "b"), "k"): ("v", None)}, CacheTypeError, "namespace labels must be strings"),
    ({(("a",), 7): ("v", None)}, CacheTypeError, "cache keys must be strings"),
    ({((), "k"): ("v", None)}, CacheInputError, "needs at least one label"),
    ({("abc", "k"): ("v", None)}, CacheTypeError, "write ('abc',)"),
    ({(("a",), "k"): ("v", -1)}, CacheInputError, "must be from 0 to"),
    ({(("a",), "k"): ("v", float("nan"))}, CacheInputError, "must be from 0 to"),
    ({(("a",), "k"): ("v", "10")}, CacheTypeError, "number of seconds or None"),
    ({(("a",), "k"): "v"}, CacheTypeError, "(value, ttl) pair"),
    ({(("a",), "k"): (Unserializable(), None)}, CacheInputError, "cannot serialize the value"),
]


@pytest.mark.parametrize(("pairs", "error", "text"), BAD_SETS)
async def test_a_bad_pair_refuses_the_whole_batch(
    cache_api: CacheApi, pairs: dict[Any, Any], error: type, text: str
) -> None:
    counter = count_calls(cache_api.cache.collections)
    batch = {(NS, "good"): ("fine", None), **pairs}
    with pytest.raises(error, match=re.escape(text)):
        await cache_api.set(batch)
    assert total(counter) == 0
    assert await cache_api.docs() == []


async def test_bad_keys_and_namespaces_send_nothing(cache_api: CacheApi) -> None:
    counter = count_calls(cache_api.cache.collections)
    with pytest.raises(CacheTypeError, match="cache keys must be strings"):
        await cache_api.get([(NS, "fine"), (NS, None)])
    with pytest.raises(CacheTypeError, match=r"a \(namespace, key\) pair"):
        await cache_api.get(["not-a-pair"])
    with pytest.raises(CacheInputError, match="needs at least one label"):
        await cache_api.clear([NS, ()])
    with pytest.raises(CacheTypeError, match="sequence of namespaces"):
        await cache_api.clear("node")
    assert total(counter) == 0
    assert issubclass(CacheTypeError, TypeError) and issubclass(CacheInputError, ValueError)


async def test_a_value_too_large_for_a_document_is_left_uncached_beside_the_others(
    cache_api: CacheApi, caplog: Any
) -> None:
    """A node's result over 16 MiB serialized is not bad input: the pairs beside it are
    stored, it is not (with a warning), and a later get misses it, as an empty cache would."""
    big = (NS, "big")
    await cache_api.set({big: (b"x" * MAX_DOCUMENT_BYTES, None), (NS, "k"): (b"v", None)})
    assert [doc["key"] for doc in await cache_api.docs()] == ["k"]
    assert await cache_api.get([big, (NS, "k")]) == {(NS, "k"): b"v"}
    assert "left uncached" in caplog.text and repr(big) in caplog.text


async def test_a_key_too_long_for_its_document_refuses_the_whole_set(
    cache_api: CacheApi,
) -> None:
    """An entry over 16 MiB because of its key and namespace (more than the room a value
    leaves them) is bad input: the whole set is refused, nothing sent. A long key that
    fits is stored and read like any other."""
    counter = count_calls(cache_api.cache.collections)
    long_key = (NS, "k" * (9 * 2**20))
    with pytest.raises(CacheInputError, match="use a hash of the key"):
        await cache_api.set({(NS, "a"): (b"1", None), long_key: (b"2", None)})
    deep = (("a",) * 6000, "k")  # small labels, but many: room for no full-size value
    with pytest.raises(CacheInputError, match=f"more than the {KEY_ROOM} a value leaves"):
        await cache_api.set({deep: (b"x" * (MAX_VALUE_BYTES - 100), None)})
    assert total(counter) == 0 and await cache_api.docs() == []
    fits = (NS, "k" * 40_000)
    await cache_api.set({fits: (b"3", None)})
    assert await cache_api.get([fits]) == {fits: b"3"}


CLASSES = [
    (MongoDBCache, mongomock.MongoClient, AsyncMongoMockClient, "AsyncMongoDBCache"),
    (AsyncMongoDBCache, AsyncMongoMockClient, mongomock.MongoClient, "MongoDBCache"),
]


@pytest.mark.parametrize(("cls", "good", "wrong", "partner"), CLASSES)
def test_the_wrong_client_names_the_class_to_use(
    cls: type, good: Any, wrong: Any, partner: str
) -> None:
    assert cls(good(), "t").client is not None
    with pytest.raises(TypeError, match=f"^{cls.__name__} needs .* use {partner}$"):
        cls(wrong(), "t")
    with pytest.raises(TypeError, match=re.escape(f"use {cls.__name__}.from_conn_string(uri)")):
        cls("mongodb://localhost", "t")


async def test_from_saver_and_from_store_share_the_client() -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    sync_client, async_client = mongomock.MongoClient(), AsyncMongoMockClient()
    pairs = [
        (MongoDBCache, MongoDBSaver(sync_client, "db1", serde=serde), AsyncMongoDBSaver),
        (MongoDBCache, MongoDBStore(sync_client, "db2"), AsyncMongoDBStore),
        (AsyncMongoDBCache, AsyncMongoDBSaver(async_client, "db3"), MongoDBSaver),
        (AsyncMongoDBCache, AsyncMongoDBStore(async_client, "db4", serde=serde), MongoDBStore),
    ]
    for cls, owner, _ in pairs:
        share = cls.from_saver if "Saver" in type(owner).__name__ else cls.from_store
        cache = share(owner, collection_name="node_cache")
        assert cache.client is owner.client and cache.db.name == owner.db.name
        assert cache.collection.name == "node_cache"
        assert (cache.serde is serde) == (owner.serde is serde)
    with pytest.raises(TypeError, match="pair the sync cache with the sync saver"):
        MongoDBCache.from_saver(AsyncMongoDBSaver(async_client, "x"))
    with pytest.raises(TypeError, match="pair the sync cache with the sync store"):
        AsyncMongoDBCache.from_store(MongoDBStore(sync_client, "x"))


def test_from_conn_string_owns_and_closes_its_client() -> None:
    with MongoDBCache.from_conn_string(
        wire_uri(), "t_cache_uri", collection_name="c", timeoutMS=5_000
    ) as cache:
        cache.set({(NS, "a"): (1, None)})
        assert cache.get([(NS, "a")]) == {(NS, "a"): 1}
        assert cache.collection.name == "c"
        cache.client.drop_database("t_cache_uri")
    with pytest.raises(ClientClosedError):
        cache.get([(NS, "a")])


async def test_async_from_conn_string_owns_and_closes_its_client() -> None:
    async with AsyncMongoDBCache.from_conn_string(wire_uri(), "t_cache_auri") as cache:
        await cache.aset({(NS, "a"): (1, None)})
        assert await cache.aget([(NS, "a")]) == {(NS, "a"): 1}
        await cache.client.drop_database("t_cache_auri")
    with pytest.raises(ClientClosedError):
        await cache.aget([(NS, "a")])


async def test_spans_name_each_call_and_count_its_round_trips(
    target: Target, db_name: str
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mongo_ckpt.telemetry import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = target.client()
    try:
        api = CacheApi(cache_class(target)(client, db_name, tracing=Tracing(provider)))
        await api.setup()
        await api.set({key: (1, 60) for key in keys(10)})
        await api.get(keys(10))
        await api.clear()
        spans = {s.name: s.attributes for s in exporter.get_finished_spans()}
        assert set(spans) == {f"mongo_ckpt.cache.{n}" for n in ("setup", "set", "get", "clear")}
        assert spans["mongo_ckpt.cache.setup"]["mongo_ckpt.round_trips"] == 2
        for name in ("set", "get", "clear"):
            assert spans[f"mongo_ckpt.cache.{name}"]["mongo_ckpt.round_trips"] == 1
    finally:
        await maybe_await(client.drop_database(db_name))
        await aclose(client)


async def test_the_async_cache_sync_methods_work_from_another_thread(
    aclient: Any, db_name: str
) -> None:
    cache: AsyncMongoDBCache[Any] = AsyncMongoDBCache(aclient, db_name)
    await cache.aset({(NS, "a"): ("v", None)})
    assert await asyncio.to_thread(cache.get, [(NS, "a")]) == {(NS, "a"): "v"}
    await asyncio.to_thread(cache.set, {(NS, "b"): ("w", 60)})
    assert await cache.aget([(NS, "b")]) == {(NS, "b"): "w"}
    with pytest.raises(asyncio.InvalidStateError, match="use the async interface"):
        cache.get([(NS, "a")])
    await maybe_await(aclient.drop_database(db_name))
