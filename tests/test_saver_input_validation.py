"""Bad input gets a specific exception naming what to fix, before any database call."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt import ClientClosedError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import (
    TARGETS,
    Target,
    aclose,
    sync_client,
    target_params,
)
from tests.saver_support import Api, Attempt, put_chain, refuses

# A query operator and a list: either would change what a query matches.
BAD_IDS: list[Any] = [{"$ne": None}, ["t"]]


def config_calls(api: Api, config: RunnableConfig) -> dict[str, Attempt]:
    """Every saver method that takes ``config``, called with it."""
    return {
        "get_tuple": lambda: api.get_tuple(config),
        "list": lambda: api.list(config),
        "put": lambda: api.put(config, generate_checkpoint(), generate_metadata(), {}),
        "put_writes": lambda: api.put_writes(config, [("w", 1)], "task"),
    }


async def test_missing_thread_id(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    for config in ({"configurable": {}}, {"configurable": {"checkpoint_id": "x"}}, {}):
        await refuses(api, config_calls(api, config).values(), ValueError, "thread_id")


def bad_id_attempts(api: Api, bad: Any) -> list[tuple[str, Attempt]]:
    """``(text the message must contain, call)`` for every identifier a call takes."""
    good = generate_config("t", checkpoint_id="x")
    checkpoint = {**generate_checkpoint(), "id": bad}
    attempts: list[tuple[str, Attempt]] = []
    for field in ("thread_id", "checkpoint_ns", "checkpoint_id"):
        config = generate_config("t", checkpoint_id="x")
        config["configurable"][field] = bad
        attempts += [(field, attempt) for attempt in config_calls(api, config).values()]
    return [
        *attempts,
        ("checkpoint['id']", lambda: api.put(good, checkpoint, generate_metadata(), {})),
        ("task_id", lambda: api.put_writes(good, [("w", 1)], bad)),
        ("before", lambda: api.list(None, before={"configurable": {"checkpoint_id": bad}})),
        ("thread_id", lambda: api.delete_thread(bad)),
        ("source_thread_id", lambda: api.copy_thread(bad, "u")),
        ("target_thread_id", lambda: api.copy_thread("t", bad)),
        ("thread_ids[0]", lambda: api.prune([bad])),
        ("run_ids[0]", lambda: api.delete_for_runs([bad])),
    ]


async def test_identifier_not_a_string(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    for bad in BAD_IDS:
        for text, attempt in bad_id_attempts(api, bad):
            await refuses(api, [attempt], TypeError, text)
    not_lists = [lambda: api.prune({"$ne": None}), lambda: api.delete_for_runs("run-1")]
    await refuses(api, not_lists, TypeError, "must be a list of strings")


async def test_metadata_filter_keys(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    for key in ("$where", "$ne", "a\x00b", ""):
        await refuses(api, [partial(api.list, None, filter={key: 1})], ValueError, repr(key))
    # An operator inside a filter value is refused too: values are matched literally.
    attempt = partial(api.list, None, filter={"step": {"$gt": -10}})
    await refuses(api, [attempt], ValueError, "'$gt'")


async def test_put_writes_without_checkpoint_id(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    attempt = partial(api.put_writes, generate_config("t"), [("w", 1)], "task")
    await refuses(api, [attempt], ValueError, "checkpoint_id")


async def test_unknown_prune_strategy(api: Api) -> None:
    await put_chain(api, "t", 2, writes=True)
    await refuses(api, [partial(api.prune, ["t"], strategy="bogus")], ValueError, "bogus")
    with pytest.raises(ValueError, match="keep_latest"):
        await api.prune(["t"], strategy="bogus")


async def test_int_identifiers_are_strings(api: Api) -> None:
    config: RunnableConfig = {"configurable": {"thread_id": 42, "checkpoint_ns": ""}}
    checkpoint = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": "1"})
    stored = await api.put(config, checkpoint, generate_metadata(), {"a": "1"})
    assert stored["configurable"]["thread_id"] == "42"
    await api.put_writes(stored, [("w", 1)], 7)
    for logical in (CHECKPOINTS, BLOBS, WRITES):
        assert [d["thread_id"] for d in await api.docs(logical)] == ["42"]
    assert [d["task_id"] for d in await api.docs(WRITES)] == ["7"]
    for thread_id in (42, "42"):
        found = await api.get_tuple({"configurable": {"thread_id": thread_id}})
        assert found is not None
        assert found.checkpoint["channel_values"] == {"a": 1}
        assert found.pending_writes == [("7", "w", 1)]
        assert len(await api.list({"configurable": {"thread_id": thread_id}})) == 1
    await api.delete_thread(42)
    assert await api.counts() == {CHECKPOINTS: 0, BLOBS: 0, WRITES: 0}


async def test_int_run_ids_are_strings(api: Api) -> None:
    await put_chain(api, "t", 3, run_ids=[5, 5, 6])
    assert {d["run_id"] for d in await api.docs(CHECKPOINTS)} == {"5", "6"}
    await api.delete_for_runs([5])
    assert [t.metadata["step"] for t in await api.list(generate_config("t"))] == [2]


# -- a closed client ------------------------------------------------------------
# mongomock's close() does nothing, so this is about the real drivers.


@pytest.mark.every_driver
@pytest.mark.parametrize("target", target_params(t for t in TARGETS if t.backend != "mock"))
async def test_closed_client(target: Target, db_name: str) -> None:
    client = target.client()
    api = Api(target.saver_class(client, db_name))
    try:
        [config] = await put_chain(api, "t", 1)
    finally:
        await aclose(client)
    attempts = [
        *config_calls(api, config).values(),
        partial(api.delete_thread, "t"),
        partial(api.copy_thread, "t", "u"),
        api.setup,
    ]
    try:
        for attempt in attempts:
            with pytest.raises(ClientClosedError, match="client was closed"):
                await attempt()
    finally:
        with sync_client(target.backend) as cleanup:
            cleanup.drop_database(db_name)
