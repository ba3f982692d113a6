"""Set-up, collection names and who closes the client."""

from __future__ import annotations

import gc
from contextlib import AsyncExitStack
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_config

from mongo_ckpt import ClientClosedError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, THREADS, WRITES
from mongo_ckpt.schema import SCHEMA
from tests.backends import (
    TARGETS,
    Target,
    count_calls,
    maybe_await,
    sync_client,
    target_params,
    uri_for,
)
from tests.saver_support import LOGICAL, Api, put_chain, values_at

# The unique keys of DESIGN.md; an index may add ``part`` (chunks of a large payload).
UNIQUE_KEYS = {
    CHECKPOINTS: ("thread_id", "checkpoint_ns", "checkpoint_id"),
    BLOBS: ("thread_id", "checkpoint_ns", "channel", "version"),
    WRITES: ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
}
NAMES = {
    "checkpoint_collection_name": "my_checkpoints",
    "writes_collection_name": "my_writes",
    "blobs_collection_name": "my_blobs",
}


async def assert_unique_keys(api: Api) -> None:
    for logical, fields in UNIQUE_KEYS.items():
        keys = await api.unique_keys(logical)
        assert any(key[: len(fields)] == fields for key in keys), (logical, keys)


async def test_setup_is_idempotent(api: Api) -> None:
    fresh = api.reopened(**NAMES)
    counter = count_calls(fresh.saver.collections)
    await fresh.setup()
    # New collections: the version is read, the checkpoints looked at (empty: nothing to
    # upgrade), one create_indexes call per collection, and the version recorded.
    assert dict(counter) == {
        (SCHEMA, "find_one"): 1,
        (CHECKPOINTS, "find"): 1,
        **{(logical, "create_indexes"): 1 for logical in (*LOGICAL, THREADS)},
        (SCHEMA, "find_one_and_update"): 1,
    }
    counter.clear()
    await fresh.setup()
    # At the current version, setup is one round trip.
    assert dict(counter) == {(SCHEMA, "find_one"): 1}
    await assert_unique_keys(fresh)
    await put_chain(fresh, "t", 2, writes=True)
    assert len(await fresh.list(generate_config("t"))) == 2


async def test_setup_runs_on_first_use(api: Api) -> None:
    fresh = api.reopened(**NAMES)
    counter = count_calls(fresh.saver.collections)
    [config] = await put_chain(fresh, "t", 1)
    assert {m for (_, m) in counter} == {
        "find_one",
        "find",
        "create_indexes",
        "bulk_write",
        "find_one_and_update",
    }
    await assert_unique_keys(fresh)
    # Only once: later calls neither read the version nor create indexes.
    counter.clear()
    await fresh.get_tuple(config)
    await put_chain(fresh, "u", 1)
    assert not any(
        (logical, method) in (("schema", "find_one"), (CHECKPOINTS, "find"))
        or method == "create_indexes"
        for (logical, method) in counter
    )


async def test_collection_names(api: Api) -> None:
    named = api.reopened(**NAMES)
    await put_chain(named, "t", 2, writes=True)
    collections = set(await maybe_await(named.saver.db.list_collection_names()))
    assert set(NAMES.values()) <= collections
    assert await named.counts() == {CHECKPOINTS: 2, BLOBS: 3, WRITES: 2}
    # Nothing landed in the default collections (the fixture's saver set them up).
    assert await api.counts() == {CHECKPOINTS: 0, BLOBS: 0, WRITES: 0}
    assert (await named.get_tuple(generate_config("t"))).checkpoint["channel_values"] == (
        values_at(1, "t")
    )
    assert await api.get_tuple(generate_config("t")) is None


async def test_given_client_stays_open(api: Api) -> None:
    other = api.reopened()
    await put_chain(other, "t", 1)
    client = other.saver.client
    del other
    gc.collect()
    # The client still works, directly and for a new saver.
    coll = client[api.saver.db.name]["still_open"]
    await maybe_await(coll.insert_one({"x": 1}))
    assert await maybe_await(coll.count_documents({})) == 1
    assert (await api.get_tuple(generate_config("t"))).checkpoint["channel_values"] == (
        values_at(0, "t")
    )


# -- from_conn_string owns its client ----------------------------------------------

# The default driver of each saver on each server.
SERVERS = [t for t in TARGETS if t.backend != "mock" and t.driver == "pymongo"]


@pytest.mark.parametrize("target", target_params(SERVERS))
async def test_from_conn_string(target: Target, db_name: str) -> None:
    opened = target.saver_class.from_conn_string(uri_for(target.backend), db_name)
    try:
        async with AsyncExitStack() as stack:
            if target.is_async:
                saver = await stack.enter_async_context(opened)
            else:
                saver = stack.enter_context(opened)
            api = Api(saver)
            await put_chain(api, "t", 1)
            found = await api.get_tuple(generate_config("t"))
            assert found.checkpoint["channel_values"] == values_at(0, "t")
        with pytest.raises(ClientClosedError):
            await api.get_tuple(generate_config("t"))
        with pytest.raises(ClientClosedError):
            await put_chain(api, "u", 1)
    finally:
        _drop(target.backend, db_name)


def _drop(backend: str, db_name: str) -> None:
    client: Any = sync_client(backend)
    with client:
        client.drop_database(db_name)
