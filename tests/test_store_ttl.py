"""TTL in minutes: per item, default, refresh on read, invisible once expired, swept."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

from mongo_ckpt.store import documents, registry
from mongo_ckpt.store.documents import EPOCH, FOREVER, index_models, revive_requests
from tests.backends import maybe_await
from tests.clock_skew import skewed_client_clock
from tests.store_support import DIMS, FakeEmbeddings, ttl_indexes

LONG_AGO = datetime(2020, 1, 1, tzinfo=timezone.utc)


async def _doc(store: Any, key: str) -> dict[str, Any] | None:
    return await maybe_await(store.collections["store"].find_one({"key": key}))


async def _expire_in(store: Any, key: str, seconds: float) -> None:
    """Move an item's expiry (into the past for a negative ``seconds``), and its
    namespace's registry entry to the latest expiry of its items, as the clock passing
    would leave them."""
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    update = {"$set": {"expires_at": moment}}
    collection = store.collections["store"]
    ns = (await _doc(store, key))["ns"]
    await maybe_await(collection.update_one({"key": key}, update))
    found = collection.find({"ns": ns})
    docs = [d async for d in found] if hasattr(found, "__aiter__") else list(found)
    until = max(
        (d.get("expires_at", FOREVER).replace(tzinfo=timezone.utc) for d in docs), default=moment
    )
    entry = {"_id": registry.entry_id(ns)}
    entries = store.collections["registry"]
    await maybe_await(entries.update_one(entry, {"$set": {registry.UNTIL: until}}))


async def _expire(store: Any, key: str) -> None:
    await _expire_in(store, key, -1)


async def _no_ttl_monitor(store: Any) -> Any:
    """Set the store up, then drop its TTL indexes: expired items and registry entries stay
    stored, as they do for up to a minute on MongoDB (mongomock and SecantusDB delete them
    within a second, the latter even in the middle of a write that upserts the entry)."""
    await store.asetup()
    for logical in ("store", "registry"):
        collection = store.collections[logical]
        for index in ttl_indexes(await maybe_await(collection.index_information())):
            await maybe_await(collection.drop_index(index))
    return store


def _minutes_left(doc: dict[str, Any]) -> float:
    expires = doc["expires_at"].replace(tzinfo=timezone.utc)
    return (expires - datetime.now(timezone.utc)).total_seconds() / 60


async def test_per_item_ttl_and_never(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("t",), "short", {"v": 1}, ttl=5)
    await store.aput(("t",), "forever", {"v": 1}, ttl=None)
    await store.aput(("t",), "default", {"v": 1})  # no TTLConfig: no expiry
    short = await _doc(store, "short")
    assert short["ttl_minutes"] == 5
    assert 4.9 < _minutes_left(short) <= 5
    for key in ("forever", "default"):
        doc = await _doc(store, key)
        assert "expires_at" not in doc and "ttl_minutes" not in doc


async def test_default_ttl_and_explicit_none(make_astore: Any) -> None:
    store = make_astore(ttl={"default_ttl": 30})
    await store.aput(("t",), "default", {"v": 1})
    await store.aput(("t",), "never", {"v": 1}, ttl=None)
    await store.aput(("t",), "own", {"v": 1}, ttl=1.5)
    assert 29.9 < _minutes_left(await _doc(store, "default")) <= 30
    assert "expires_at" not in await _doc(store, "never")
    assert 1.4 < _minutes_left(await _doc(store, "own")) <= 1.5
    # overwriting without a TTL removes the expiry
    await store.aput(("t",), "own", {"v": 2}, ttl=None)
    assert "expires_at" not in await _doc(store, "own")


async def test_expired_items_are_invisible_at_once(make_astore: Any) -> None:
    store = await _no_ttl_monitor(make_astore())
    await store.aput(("t", "a"), "gone", {"v": 1}, ttl=60)
    await store.aput(("t", "b"), "kept", {"v": 2}, ttl=60)
    await _expire(store, "gone")
    assert await _doc(store, "gone") is not None  # still stored: the TTL monitor has not run
    assert await store.aget(("t", "a"), "gone") is None
    assert [i.key for i in await store.asearch(("t",))] == ["kept"]
    assert await store.alist_namespaces() == [("t", "b")]


async def test_omit_expired_false_shows_items_until_swept(make_astore: Any) -> None:
    store = await _no_ttl_monitor(make_astore(ttl={"omit_expired": False}))
    await store.aput(("t", "a"), "stale", {"v": 1}, ttl=60)
    await _expire(store, "stale")
    assert (await store.aget(("t", "a"), "stale")).value == {"v": 1}
    assert [i.key for i in await store.asearch(("t",))] == ["stale"]
    assert await store.alist_namespaces() == [("t", "a")]
    assert await store.asweep_ttl() == 1
    assert await store.aget(("t", "a"), "stale") is None


async def test_reput_of_an_expired_item_is_a_new_item(make_astore: Any) -> None:
    store = await _no_ttl_monitor(make_astore())
    await store.aput(("t",), "k", {"v": 1}, ttl=60)
    first = await store.aget(("t",), "k")
    await _expire(store, "k")
    await store.aput(("t",), "k", {"v": 2})
    second = await store.aget(("t",), "k")
    assert second.value == {"v": 2}
    assert second.created_at >= first.created_at
    assert second.created_at == second.updated_at


async def test_a_batch_renews_created_at_over_its_expired_copies_only(
    make_astore: Any, put_shape: str
) -> None:
    """One batch over several namespaces: the expired copies it puts are new items, its
    live copies keep ``created_at``, and an expired item it does not put is untouched
    (even one whose key the batch puts in another namespace)."""
    store = await _no_ttl_monitor(make_astore())
    await store.abatch(
        [PutOp(("a",), "x", {"v": 1}, ttl=60), PutOp(("a",), "y", {"v": 1}, ttl=60)]
        + [PutOp(("b",), "x", {"v": 1}, ttl=60)]
    )
    live_before = await store.aget(("a",), "y")
    collection = store.collections["store"]
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    expired = {"$set": {"expires_at": past, "created_at": LONG_AGO}}
    await maybe_await(collection.update_many({"key": "x"}, expired))  # both copies of "x"
    await store.abatch(
        [PutOp(("a",), "x", {"v": 2}), PutOp(("a",), "y", {"v": 2}, ttl=60)]
        + [PutOp(("b",), "z", {"v": 2}), PutOp(("a",), "y", {"v": 3}, ttl=60)]
    )
    renewed, kept, new = [
        await store.aget(*item) for item in [(("a",), "x"), (("a",), "y"), (("b",), "z")]
    ]
    assert renewed.value == {"v": 2} and renewed.created_at == renewed.updated_at
    assert kept.value == {"v": 3} and kept.created_at == live_before.created_at
    assert new.created_at == new.updated_at == renewed.updated_at
    untouched = await maybe_await(collection.find_one({"ns": "b", "key": "x"}))
    assert untouched["created_at"].replace(tzinfo=timezone.utc) == LONG_AGO
    assert await store.aget(("b",), "x") is None


def test_revive_requests_share_one_statement_per_set_of_keys() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    items = [(("a",), "x"), (("b",), "x"), (("a",), "y"), (("b",), "y"), (("c",), "x")]
    requests = revive_requests([*items, (("a",), "x")], now)
    filters = sorted((r._filter for r in requests), key=repr)
    expired = {"$gte": EPOCH, "$lte": now}  # bounded below: no item without an expiry
    assert filters == [
        {"expires_at": expired, "ns": "c", "key": "x"},
        {"expires_at": expired, "ns": {"$in": ["a", "b"]}, "key": {"$in": ["x", "y"]}},
    ]
    assert all(list(f)[0] == "expires_at" for f in filters)  # the clause SecantusDB serves
    assert {repr(r._doc) for r in requests} == {repr({"$set": {"created_at": now}})}


def test_only_batches_of_enough_puts_per_revive_statement_write_plain_updates() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    one_namespace = [(("a",), f"k{i}") for i in range(documents.PUTS_PER_REVIVE)]
    assert len(documents.revived_puts(one_namespace, now)) == 1
    assert documents.revived_puts(one_namespace[1:], now) == []
    # Each namespace its own keys: a statement each, too many for what it saves.
    scattered = [((f"n{i}",), f"k{i}") for i in range(100)]
    assert documents.revived_puts(scattered, now) == []
    fields = documents.item_fields(("a",), "k", {}, None, [], False, None, now)
    plain = documents.put_request(fields, now, revived=True)
    assert set(plain._doc) == {"$set", "$min", "$unset"}
    assert isinstance(documents.put_request(fields, now)._doc, list)


async def test_a_put_leaves_no_field_of_an_earlier_form(make_astore: Any, put_shape: str) -> None:
    index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}
    store = make_astore(index=index, exact_search=True)
    await store.aput(("t",), "k", {"text": "first", "old": 1}, ttl=5)
    first = await _doc(store, "k")
    assert {"expires_at", "ttl_minutes", "embeddings"} <= first.keys()
    await store.aput(("t",), "k", {"text": "second"}, index=False)
    doc = await _doc(store, "k")
    assert set(doc) == {"_id", "ns", "key", "namespace", "prefixes", "value"} | {
        "created_at",
        "updated_at",
    }
    assert doc["value"] == {"text": "second"} and doc["created_at"] == first["created_at"]


async def test_refresh_on_read_for_get_and_search(make_astore: Any) -> None:
    store = make_astore(ttl={"default_ttl": 10, "refresh_on_read": True})
    for key in ("got", "searched", "untouched", "no-refresh"):
        await store.aput(("t", key), key, {"v": key})
    for key in ("got", "searched", "untouched", "no-refresh"):
        await _expire_in(store, key, 60)
    before = (await _doc(store, "got"))["updated_at"]

    assert (await store.aget(("t", "got"), "got")).value == {"v": "got"}
    assert [i.key for i in await store.asearch(("t", "searched"))] == ["searched"]
    await store.aget(("t", "no-refresh"), "no-refresh", refresh_ttl=False)
    await store.asearch(("t", "no-refresh"), refresh_ttl=False)

    assert 9.9 < _minutes_left(await _doc(store, "got")) <= 10
    assert 9.9 < _minutes_left(await _doc(store, "searched")) <= 10
    assert _minutes_left(await _doc(store, "untouched")) < 1.01
    assert _minutes_left(await _doc(store, "no-refresh")) < 1.01
    assert (await _doc(store, "got"))["updated_at"] == before  # reading is not an update


async def test_a_reader_whose_clock_is_behind_never_shortens_an_expiry(make_astore: Any) -> None:
    """A refresh is ``now`` + the TTL on the reader's clock; behind by 5 minutes, it would
    move the expiry earlier while the namespace's registry entry (only ever raised by a
    refresh) kept the later one, listing the namespace after its items expired."""
    store = make_astore()
    await store.aput(("t",), "k", {"v": 1}, ttl=10)
    put = (await _doc(store, "k"))["expires_at"]
    with skewed_client_clock(timedelta(minutes=-5)):
        assert (await store.aget(("t",), "k")).value == {"v": 1}
    assert (await _doc(store, "k"))["expires_at"] == put
    entry = await maybe_await(
        store.collections["registry"].find_one({"_id": registry.entry_id("t")})
    )
    assert entry[registry.UNTIL] == put
    with skewed_client_clock(timedelta(minutes=5)):
        await store.asearch(("t",))
    assert 14.9 < _minutes_left(await _doc(store, "k")) <= 15


async def test_refresh_on_read_false_by_config(make_astore: Any) -> None:
    store = make_astore(ttl={"default_ttl": 10, "refresh_on_read": False})
    await store.aput(("t",), "k", {"v": 1})
    await _expire_in(store, "k", 60)
    await store.aget(("t",), "k")
    await store.asearch(("t",))
    assert _minutes_left(await _doc(store, "k")) < 1.01
    # an explicit per-op flag still wins
    await store.abatch([GetOp(("t",), "k", refresh_ttl=True)])
    assert _minutes_left(await _doc(store, "k")) > 9.9
    await _expire_in(store, "k", 60)
    await store.abatch([SearchOp(("t",), refresh_ttl=True)])
    assert _minutes_left(await _doc(store, "k")) > 9.9


async def test_sweep_ttl_deletes_only_expired(make_astore: Any) -> None:
    store = await _no_ttl_monitor(make_astore())
    await store.aput(("t",), "gone", {"v": 1}, ttl=60)
    await store.aput(("t",), "later", {"v": 1}, ttl=60)
    await store.aput(("t",), "never", {"v": 1})
    await _expire(store, "gone")
    assert await store.asweep_ttl() == 1
    assert await _doc(store, "gone") is None
    assert await _doc(store, "later") is not None and await _doc(store, "never") is not None
    assert await store.asweep_ttl() == 0


def test_sync_sweep_and_ttl(make_store: Any) -> None:
    store = make_store(ttl={"default_ttl": 1})
    store.setup()
    store.collections["store"].drop_index("expires_at")
    store.put(("t",), "k", {"v": 1})
    store.put(("t",), "n", {"v": 1}, ttl=None)
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    store.collections["store"].update_one({"key": "k"}, {"$set": {"expires_at": past}})
    assert store.get(("t",), "k") is None
    assert store.sweep_ttl() == 1
    assert store.get(("t",), "n") is not None


async def test_ttl_index_lets_the_server_delete(make_astore: Any, request: Any) -> None:
    store = make_astore()
    await store.aput(("t",), "gone", {"v": 1}, ttl=60)
    info = await maybe_await(store.collections["store"].index_information())
    assert list(info["expires_at"]["key"]) == [("expires_at", 1)]
    assert info["expires_at"]["expireAfterSeconds"] == 0
    assert [m.document["name"] for m in index_models()] == [
        "namespace_key",
        "prefix_recency",
        "expires_at",
    ]
    if request.node.callspec.params["aclient"][0] == "mongodb":
        return  # MongoDB's TTL monitor runs once a minute: too slow to wait for here
    await _expire(store, "gone")
    # mongomock deletes on the next read; SecantusDB's monitor wakes every second, then
    # walks every collection of the server (slow on a loaded machine, late in a run).
    deadline = time.monotonic() + 60
    while await _doc(store, "gone") is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert await _doc(store, "gone") is None


async def test_bad_ttl_config_is_refused(make_astore: Any) -> None:
    with pytest.raises(ValueError, match="default_ttl"):
        make_astore(ttl={"default_ttl": 0})
    store = make_astore()
    for bad in (0, -5, "10", True):
        with pytest.raises(ValueError, match="ttl"):
            await store.aput(("t",), "k", {"v": 1}, ttl=bad)
    assert await store.asearch(()) == []


async def test_a_put_timed_before_the_stored_one_keeps_created_at_no_later_than_updated_at(
    make_astore: Any, put_shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers: the one whose clock read later lands first, with a new item. The other
    put, timed a minute earlier, overwrites it: ``created_at`` is then its own time, never
    after the ``updated_at`` it writes (a reader would otherwise see an item created after
    its last update)."""
    store = make_astore()
    now = documents.utc_now()
    batch = [PutOp(("t",), f"k{i}", {"v": i}) for i in range(8)]
    monkeypatch.setattr(documents, "utc_now", lambda: now + timedelta(minutes=1))
    await store.abatch(batch)
    monkeypatch.setattr(documents, "utc_now", lambda: now)
    await store.abatch([op._replace(value={"v": -1}) for op in batch])
    for item in await store.asearch(("t",), limit=100):
        assert item.value == {"v": -1}
        assert item.created_at == item.updated_at == now
