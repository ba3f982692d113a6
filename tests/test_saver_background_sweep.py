"""The automatic retention sweep runs beside a user's ``put``, never inside it: the put costs
its own round trips, an error of the sweep is logged and never raised, and the sweep
deletes in bounded batches."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo import MongoClient

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver, maintenance
from mongo_ckpt.calls import Call, NextBatch, Operation
from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import maybe_await, wire_uri
from tests.saver_support import Api
from tests.stepping import drive

TTL = 3600.0


class ByThread:
    """Wraps a collection; counts the calls made from each thread."""

    def __init__(self, collection: Any, counter: Counter[str]) -> None:
        self._collection, self._counter = collection, counter

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._collection, name)
        if not callable(attribute):
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counter[threading.current_thread().name] += 1
            return attribute(*args, **kwargs)

        return counted


def count_by_thread(api: Api) -> Counter[str]:
    counter: Counter[str] = Counter()
    collections = api.saver.collections
    for name, collection in list(collections.items()):
        collections[name] = ByThread(collection, counter)
    return counter


async def put_one(api: Api, thread_id: str) -> None:
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    await api.put(generate_config(thread_id), checkpoint, generate_metadata(), {"a": "1"})


async def expired_threads(api: Api, n: int) -> list[str]:
    """``n`` threads of one checkpoint each, idle for twice ``TTL``."""
    old = datetime.now(timezone.utc) - timedelta(seconds=2 * TTL)
    ids = [f"idle-{i:03}" for i in range(n)]
    docs = [
        {
            "thread_id": t,
            "checkpoint_ns": "",
            "checkpoint_id": "1",
            "created_at": old,
            "checkpoint": {},
        }
        for t in ids
    ]
    await maybe_await(api.raw(CHECKPOINTS).insert_many(docs))
    return ids


async def test_a_put_costs_its_own_round_trips_while_100_threads_expire(api: Api) -> None:
    plain = api.reopened()
    plain_calls = count_by_thread(plain)
    await put_one(plain, "plain")
    await expired_threads(api, 100)
    expiring = api.reopened(ttl=TTL)
    calls = count_by_thread(expiring)
    caller = threading.current_thread().name

    await put_one(expiring, "fresh")
    # Counted when the put returns: the sweep runs in another thread (sync) or in a task
    # that starts once the caller yields (async), so none of its calls is the put's.
    assert calls[caller] == plain_calls[caller]

    assert await expiring.join_sweep(timeout=120)
    assert await api.count(CHECKPOINTS, {"thread_id": {"$regex": "^idle-"}}) == 0
    assert await api.count(CHECKPOINTS, {"thread_id": "fresh"}) == 1


async def test_a_failing_sweep_never_fails_the_put(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing(*args: Any, **kwargs: Any) -> Operation[list[str]]:
        raise RuntimeError("the sweep broke on another thread")
        yield  # an operation

    monkeypatch.setattr(maintenance, "sweep_expired", failing)
    expiring = api.reopened(ttl=TTL)
    with caplog.at_level(logging.ERROR, logger="mongo_ckpt"):
        await put_one(expiring, "t")
        assert await expiring.join_sweep(timeout=60)
    assert await api.count(CHECKPOINTS, {"thread_id": "t"}) == 1
    failures = [r for r in caplog.records if r.name == "mongo_ckpt" and r.exc_info]
    assert len(failures) == 1
    assert "the sweep broke" in str(failures[0].exc_info[1])


async def test_the_automatic_sweep_runs_once_per_interval(api: Api) -> None:
    await expired_threads(api, 3)
    expiring = api.reopened(ttl=TTL, sweep_interval=TTL)
    for thread_id in (
        "a",
        "b",
        "c",
    ):  # the first starts the sweep, the others are within its interval
        await put_one(expiring, thread_id)
    assert await expiring.join_sweep(timeout=60)
    assert await api.count(CHECKPOINTS, {"thread_id": {"$regex": "^idle-"}}) == 0
    await expired_threads(api, 1)
    await put_one(expiring, "d")
    assert await expiring.join_sweep(timeout=60)
    assert await api.count(CHECKPOINTS, {"thread_id": "idle-000"}) == 1


def thread_lists(value: Any) -> Iterator[list[Any]]:
    """Every ``{"thread_id": {"$in": [...]}}`` list inside ``value``."""
    if isinstance(value, dict):
        ids = value.get("thread_id")
        if isinstance(ids, dict) and isinstance(ids.get("$in"), list):
            yield ids["$in"]
        for inner in value.values():
            yield from thread_lists(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from thread_lists(inner)


async def test_a_sweep_of_several_batches_deletes_every_expired_thread(api: Api) -> None:
    ids = await expired_threads(api, 7)
    await put_one(api, "fresh")
    largest: list[int] = []

    async def sizes(step: Call | NextBatch) -> None:
        if isinstance(step, Call):
            largest.extend(len(found) for found in thread_lists(step.args))

    swept = await drive(
        api, maintenance.sweep_expired(api.saver.memory.forget, TTL, batch=3), sizes
    )
    assert swept == ids
    assert max(largest) == 3  # no call carries more ids than a batch
    assert await api.count(CHECKPOINTS) == 1


def _records_of_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mongo_ckpt" and r.levelno >= logging.ERROR]


def _expired_on_wire(db_name: str, n: int) -> None:
    """``n`` expired threads in a set-up database: the sweep is still running when the
    context exits."""
    client: MongoClient = MongoClient(wire_uri())
    MongoDBSaver(client, db_name).setup()
    old = datetime.now(timezone.utc) - timedelta(seconds=2 * TTL)
    docs = [
        {
            "thread_id": f"idle-{i:03}",
            "checkpoint_ns": "",
            "checkpoint_id": "1",
            "created_at": old,
            "checkpoint": {},
        }
        for i in range(n)
    ]
    client[db_name]["checkpoints"].insert_many(docs)
    client.close()


def test_leaving_from_conn_string_stops_the_sweep_before_closing_the_client(
    db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = generate_config("t")
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    _expired_on_wire(db_name, 200)
    with caplog.at_level(logging.ERROR, logger="mongo_ckpt"):
        with MongoDBSaver.from_conn_string(wire_uri(), db_name, ttl=TTL) as saver:
            saver.put(config, checkpoint, generate_metadata(), {"a": "1"})
            job = saver._background
            assert job is not None
        assert not job.is_alive()
        MongoClient(wire_uri()).drop_database(db_name)
    # Stopped, not cut by the closed client: nothing failed.
    assert _records_of_failures(caplog) == []


async def test_leaving_async_from_conn_string_stops_the_sweep_before_closing_the_client(
    db_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = generate_config("t")
    checkpoint = generate_checkpoint(channel_values={"a": "x"}, channel_versions={"a": "1"})
    _expired_on_wire(db_name, 200)
    with caplog.at_level(logging.ERROR, logger="mongo_ckpt"):
        async with AsyncMongoDBSaver.from_conn_string(wire_uri(), db_name, ttl=TTL) as saver:
            await saver.aput(config, checkpoint, generate_metadata(), {"a": "1"})
            task = saver._background
            assert task is not None
        assert task.done()
        MongoClient(wire_uri()).drop_database(db_name)
    assert _records_of_failures(caplog) == []
