"""Inputs that used to corrupt data, match the wrong things or fail late (issue 7, item 4).

Each shape gets a specific exception naming what to pass instead, raised before any
database call, on the sync and the async saver and store, on every backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from bson import Code, Regex
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt.operations import CHECKPOINTS
from mongo_ckpt.store import registry
from tests.saver_support import Api, put_chain, refuses, untouched
from tests.store_support import StoreApi

MIB = 2**20


# -- checkpointer -----------------------------------------------------------------


async def check_str_subclass_ids(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    await put_chain(api, "a", 1)
    for field in ("thread_id", "checkpoint_ns", "checkpoint_id"):
        config = generate_config("t", checkpoint_id="x")
        config["configurable"][field] = Code("t")
        attempts = [
            lambda c=config: api.get_tuple(c),
            lambda c=config: api.list(c),
            lambda c=config: api.put(c, generate_checkpoint(), generate_metadata(), {}),
            lambda c=config: api.put_writes(c, [("w", 1)], "task"),
        ]
        await refuses(api, attempts, TypeError, "pass str(value)")
    good = generate_config("t", checkpoint_id="x")
    await refuses(api, [lambda: api.put_writes(good, [("w", 1)], Code("t"))], TypeError, "task_id")
    await refuses(
        api,
        [lambda: api.copy_thread("a", Code("b"))],
        TypeError,
        "target_thread_id must be a plain str",
    )
    await refuses(api, [lambda: api.delete_thread(Code("t"))], TypeError, "pass str(value)")
    await refuses(api, [lambda: api.delete_for_runs([Code("r")])], TypeError, "run_ids[0]")
    assert len(await api.list(None)) == 3  # every thread still lists


async def check_regex_filters(api: Api) -> None:
    await put_chain(api, "t", 2, source="loop")
    for value in (
        re.compile("lo"),
        Regex("lo"),
        [re.compile("lo")],
        {"nested": {"deeper": Regex("lo")}},
    ):
        await refuses(
            api,
            [lambda v=value: api.list(None, filter={"source": v})],
            TypeError,
            "must not be a regular expression",
        )


async def check_list_limit(api: Api) -> None:
    await put_chain(api, "t", 2)
    await refuses(api, [lambda: api.list(None, limit=2**63)], ValueError, "at most 2**63 - 1")


async def check_nul_metadata_key(api: Api) -> None:
    config = generate_config("t")
    metadata = {**generate_metadata(), "a\x00b": 1, "kept": 2}
    saved = await api.put(config, generate_checkpoint(), metadata, {})
    [doc] = await api.docs(CHECKPOINTS)
    assert "a\x00b" not in doc["metadata"]
    assert doc["metadata"]["kept"] == 2
    loaded = await api.get_tuple(saved)
    assert loaded.metadata["a\x00b"] == 1 and loaded.metadata["kept"] == 2
    assert [t.metadata["kept"] for t in await api.list(None, filter={"kept": 2})] == [2]


async def check_huge_metadata(api: Api) -> None:
    await put_chain(api, "t", 1)
    checkpoint = generate_checkpoint(channel_values={"c": "value"}, channel_versions={"c": 1})
    # Stored twice (plain BSON would give the int64 back as ``bson.Int64``): over 15 MiB.
    metadata = {**generate_metadata(), "big": "x" * (8 * MIB), "wide": 2**40}
    async with untouched(api):  # in particular: no value document left behind
        with pytest.raises(ValueError, match=re.escape("15 MiB")):
            await api.put(generate_config("t"), checkpoint, metadata, {"c": 1})


async def check_ttl_beyond_maximum(api: Api) -> None:
    await put_chain(api, "t", 1)
    for ttl in (float("inf"), 1e12, float("nan")):
        await refuses(
            api, [lambda t=ttl: _construct(api, t)], ValueError, "at most 3153600000 seconds"
        )


async def _construct(api: Api, ttl: float) -> None:
    api.reopened(ttl=ttl)


CHECKS = [
    check_str_subclass_ids,
    check_regex_filters,
    check_list_limit,
    check_nul_metadata_key,
    check_huge_metadata,
    check_ttl_beyond_maximum,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_saver(api: Api, check: Callable[[Api], Any]) -> None:
    await check(api)


# -- store ------------------------------------------------------------------------


async def check_store_str_subclass(s: StoreApi) -> None:
    await s.put(("a",), "k", {"v": 1})
    await s.refuses(
        lambda: s.batch([PutOp(("a",), Code("k"), {"v": 2})]), TypeError, "key must be a plain str"
    )
    await s.refuses(lambda: s.batch([GetOp(("a",), Code("k"))]), TypeError, "pass str(value)")
    await s.refuses(lambda: s.put((Code("a"),), "k", {"v": 2}), TypeError, "pass str(label)")
    await s.refuses(lambda: s.search((Code("a"),)), TypeError, "must be a plain str")


async def check_store_dict_namespace(s: StoreApi) -> None:
    await s.put(("a",), "k", {"v": 1})
    for attempt in (
        lambda: s.put({"a": 1}, "k", {"v": 2}),
        lambda: s.get({"a": 1}, "k"),
        lambda: s.batch([PutOp({"a": 1}, "k", {"v": 2})]),
    ):
        await s.refuses(attempt, TypeError, "Namespace must be a tuple of strings")


async def check_store_literal_suffix(s: StoreApi) -> None:
    memory = InMemoryStore()
    for namespace in (("team", "$ns"), ("other", "x"), ("a", "$key"), ("b", "ns")):
        await s.put(namespace, "k", {"v": 1})
        memory.put(namespace, "k", {"v": 1})
    for conditions in (
        {"suffix": ("$ns",)},
        {"suffix": ("*", "$key")},
        {"suffix": ("$namespace",)},
    ):
        expected = memory.list_namespaces(**conditions)
        assert await s.list_namespaces(**conditions) == expected, conditions
    assert await s.list_namespaces(suffix=("$ns",)) == [("team", "$ns")]


async def check_store_regex_filter(s: StoreApi) -> None:
    await s.put(("a",), "k", {"name": "alice", "tags": ["x"]})
    for filter in (
        {"name": re.compile("ali")},
        {"name": Regex("ali")},
        {"name": {"$eq": re.compile("ali")}},
        {"name": {"$in": [Regex("ali")]}},
        {"tags": [re.compile("x")]},
        {"profile": {"name": re.compile("ali")}},
    ):
        await s.refuses(
            lambda f=filter: s.search(("a",), filter=f),
            TypeError,
            "must not be a regular expression",
        )


async def check_store_limits(s: StoreApi) -> None:
    await s.put(("a",), "k", {"v": 1})
    await s.refuses(lambda: s.search(("a",), limit=2**63), ValueError, "at most 2**63 - 1")
    await s.refuses(lambda: s.list_namespaces(limit=2**63), ValueError, "at most 2**63 - 1")


async def check_store_huge_value(s: StoreApi) -> None:
    await s.put(("a",), "k", {"v": 1})
    batch = [
        PutOp(("a",), "small", {"v": 2}),
        PutOp(("a",), "big", {"blob": "x" * (16 * MIB)}),
    ]
    # The whole batch is refused before anything is written (the small item too).
    await s.refuses(lambda: s.batch(batch), ValueError, "namespace ('a',) key 'big'")
    await s.refuses(lambda: s.batch(batch), ValueError, "15 MiB")


async def check_store_huge_namespace(s: StoreApi) -> None:
    """A namespace too large for its registry entry (one huge label, or very many levels)
    is refused before any write, in a batch of many namespaces too; listings keep working,
    and a namespace under the limit is stored and listed."""
    await s.put(("a",), "k", {"v": 1})
    many = [("users", f"u{i}") for i in range(registry.BATCH_FROM)]
    for huge in [("users", "x" * (3 * MIB)), tuple(f"{i:0200d}" for i in range(2_000))]:
        batch = [*(PutOp(ns, "k", {"v": 1}) for ns in many), PutOp(huge, "k", {"v": 1})]
        await s.refuses(lambda b=batch: s.batch(b), InvalidNamespaceError, "-byte limit")
        await s.refuses(lambda h=huge: s.put(h, "k", {"v": 1}), InvalidNamespaceError,
                        "use shorter labels")
    assert await s.list_namespaces() == [("a",)]
    large = ("users", "y" * 40_000)
    await s.put(large, "k", {"v": 1})
    assert await s.list_namespaces(prefix=("users",)) == [large]
    assert (await s.get(large, "k")).value == {"v": 1}


async def check_store_ttl_beyond_maximum(s: StoreApi) -> None:
    await s.put(("a",), "k", {"v": 1})
    for ttl in (float("inf"), 1e12):
        await s.refuses(
            lambda t=ttl: s.put(("a",), "k", {"v": 2}, ttl=t),
            ValueError,
            "at most 52560000 minutes",
        )


STORE_CHECKS = [
    check_store_ttl_beyond_maximum,
    check_store_str_subclass,
    check_store_dict_namespace,
    check_store_literal_suffix,
    check_store_regex_filter,
    check_store_limits,
    check_store_huge_value,
    check_store_huge_namespace,
]


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda c: c.__name__)
async def test_store(store_api: StoreApi, check: Callable[[StoreApi], Any]) -> None:
    await check(store_api)
