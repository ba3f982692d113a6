"""``mongo_ckpt.platform``: loaded as langgraph-api loads ``langgraph.json`` paths."""

from __future__ import annotations

import importlib
import importlib.util
import json
import operator
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from mongomock_motor import AsyncMongoMockClient
from pymongo.errors import InvalidOperation
from typing_extensions import TypedDict

from mongo_ckpt import AsyncMongoDBSaver, platform
from tests.backends import wire_uri

REPO = Path(__file__).resolve().parent.parent


def load(path: str) -> Any:
    """As langgraph-api does: split the dotted path on its last dot."""
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


class State(TypedDict):
    items: Annotated[list[str], operator.add]


async def remember(state: State, *, store: BaseStore) -> dict:
    count = len(await store.asearch(("memories",)))
    await store.aput(("memories",), f"m{count}", {"n": count})
    return {"items": [f"seen {count}"]}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> str:
    db = f"p_{uuid.uuid4().hex[:10]}"
    monkeypatch.delenv("LS_MONGODB_URI", raising=False)
    monkeypatch.setenv("MONGODB_URI", wire_uri())
    monkeypatch.setenv("MONGO_CKPT_DB", db)
    monkeypatch.setenv("MONGO_CKPT_STORE_TTL_MINUTES", "60")
    monkeypatch.setenv("MONGO_CKPT_STORE_SWEEP_MINUTES", "0.01")
    return db


async def test_platform_entry_points_run_a_graph(env: str) -> None:
    make_checkpointer = load("mongo_ckpt.platform.checkpointer")
    make_store = load("mongo_ckpt.platform.store")
    async with make_checkpointer() as saver, make_store() as store:
        assert isinstance(saver, AsyncMongoDBSaver)
        assert saver.db.name == env and store.db.name == env
        assert store.ttl_config == {
            "default_ttl": 60.0,
            "sweep_interval_minutes": 0.01,
            "refresh_on_read": True,
        }
        assert store._sweeper is not None and not store._sweeper.done()
        sweeper = store._sweeper
        builder = StateGraph(State)
        builder.add_node("remember", remember)
        builder.add_edge(START, "remember")
        builder.add_edge("remember", END)
        graph = builder.compile(checkpointer=saver, store=store)
        config = {"configurable": {"thread_id": "1"}}
        await graph.ainvoke({"items": []}, config)
        result = await graph.ainvoke({"items": []}, config)
        assert result["items"] == ["seen 0", "seen 1"]
        assert len([c async for c in saver.alist(config)]) > 2
        item = await store.aget(("memories",), "m1")
        assert item is not None and item.value == {"n": 1}
        client = saver.client
        await client.drop_database(env)
    assert sweeper.done()
    with pytest.raises(InvalidOperation):  # the client is closed on exit
        await client[env].command("ping")


async def test_missing_uri_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    monkeypatch.delenv("LS_MONGODB_URI", raising=False)
    for factory in (platform.checkpointer, platform.store):
        with pytest.raises(platform.ConfigurationError, match="MONGODB_URI"):
            async with factory():
                pass


async def test_ls_uri_fallback_and_collection_names(monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"p_{uuid.uuid4().hex[:10]}"
    monkeypatch.delenv("MONGODB_URI", raising=False)
    monkeypatch.setenv("LS_MONGODB_URI", wire_uri())
    monkeypatch.setenv("MONGO_CKPT_DB", db)
    monkeypatch.setenv("MONGO_CKPT_CHECKPOINTS_COLLECTION", "cks")
    monkeypatch.setenv("MONGO_CKPT_STORE_COLLECTION", "mem")
    async with platform.checkpointer() as saver, platform.store() as store:
        assert saver.checkpoint_collection.name == "cks"
        assert store.collections["store"].name == "mem" and store._sweeper is None
        await saver.client.drop_database(db)


def test_bad_numbers_are_refused() -> None:
    with pytest.raises(platform.ConfigurationError, match="MONGO_CKPT_STORE_TTL_MINUTES"):
        platform.store_kwargs({"MONGO_CKPT_STORE_TTL_MINUTES": "soon"})
    with pytest.raises(platform.ConfigurationError, match="INDEX"):
        platform.store_kwargs({"MONGO_CKPT_STORE_INDEX_DIMS": "8"})


def documented_langgraph_json() -> dict[str, Any]:
    """The ``langgraph.json`` of docs/platform.md."""
    doc = (REPO / "docs" / "platform.md").read_text()
    block = re.search(r"## `langgraph.json`\s+```json\n(.*?)```", doc, re.DOTALL)
    assert block, "docs/platform.md has no langgraph.json block"
    return json.loads(block.group(1))


def test_langgraph_server_loads_the_documented_entry_points() -> None:
    """langgraph-api's own loader (as ``langgraph dev`` configures it from langgraph.json)
    enters both factories, a graph runs on what it loaded, thread deletion prunes with
    ``delete_all``, and leaving the server's lifespan closes the client."""
    if importlib.util.find_spec("langgraph_api") is None:
        pytest.skip("langgraph-api comes with the bench extra")
    langgraph_json = documented_langgraph_json()
    db = f"p_{uuid.uuid4().hex[:10]}"
    env = {
        **{k: v for k, v in os.environ.items() if k != "LS_MONGODB_URI"},
        # What langgraph-api's CLI sets for `langgraph dev` from langgraph.json.
        "LANGGRAPH_CHECKPOINTER": json.dumps(langgraph_json["checkpointer"]),
        "LANGGRAPH_STORE": json.dumps(langgraph_json["store"]),
        "DATABASE_URI": ":memory:",
        "REDIS_URI": "fake",
        "MIGRATIONS_PATH": "__inmem",
        "MONGODB_URI": wire_uri(),
        "MONGO_CKPT_DB": db,
        "MONGO_CKPT_STORE_TTL_MINUTES": "60",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.platform_server"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "checkpointer": "mongo_ckpt.aio.AsyncMongoDBSaver",
        "store": "mongo_ckpt.store.aio.AsyncMongoDBStore",
        "db": [db, db],
        "items": ["seen 0", "seen 1"],
        "history": 6,
        "memory": {"n": 1},
        "values_after_delete": {},
        "sweeping": True,
        "sweeper_stopped": True,
        "client_closed": True,
    }


def test_the_environment_sets_retention_and_the_threads_collection() -> None:
    env = {
        "MONGO_CKPT_TTL_SECONDS": "86400",
        "MONGO_CKPT_TTL_STRATEGY": "keep_latest",
        "MONGO_CKPT_THREADS_COLLECTION": "own_ttls",
        "MONGO_CKPT_REFRESH_ON_READ": "yes",
    }
    assert platform.saver_kwargs(env) == {
        "db_name": "checkpointing_db",
        "threads_collection_name": "own_ttls",
        "ttl": 86400.0,
        "ttl_strategy": "keep_latest",
        "refresh_on_read": True,
    }
    with pytest.raises(platform.ConfigurationError, match="MONGO_CKPT_REFRESH_ON_READ must be"):
        platform.saver_kwargs({"MONGO_CKPT_REFRESH_ON_READ": "often"})
    kwargs = platform.saver_kwargs({"MONGO_CKPT_TTL_STRATEGY": "keep"})
    with pytest.raises(ValueError, match="ttl_strategy must be one of"):
        AsyncMongoDBSaver(AsyncMongoMockClient(), **kwargs)
