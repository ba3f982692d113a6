"""Entry points for LangGraph Platform / ``langgraph dev`` (``langgraph.json``)::

    "checkpointer": {"path": "mongo_ckpt.platform.checkpointer"},
    "store": {"path": "mongo_ckpt.platform.store"}

Each is a zero-argument callable returning an async context manager, entered once
per event loop: it opens its own ``AsyncMongoClient`` from the environment (through
``from_conn_string``, so with its bounded ``timeoutMS``), awaits
``setup()``, yields the saver/store and closes the client on exit. The store's TTL
sweeper runs while the context is open. Variables (see docs/platform.md):

- ``MONGODB_URI`` (else ``LS_MONGODB_URI``): the connection string (required).
- ``MONGO_CKPT_DB``: database name (default ``checkpointing_db``).
- ``MONGO_CKPT_CHECKPOINTS_COLLECTION`` / ``MONGO_CKPT_WRITES_COLLECTION`` /
  ``MONGO_CKPT_BLOBS_COLLECTION`` / ``MONGO_CKPT_THREADS_COLLECTION``: the saver's
  collections (four names of their own, none ``mongo_ckpt_schema``, else
  ``CollectionNameClash`` naming the variables).
- ``MONGO_CKPT_TTL_SECONDS``: the saver's thread ttl (seconds of inactivity).
- ``MONGO_CKPT_TTL_STRATEGY``: what expiry does to a thread, ``delete`` (default) or
  ``keep_latest``.
- ``MONGO_CKPT_REFRESH_ON_READ``: ``true``/``false`` (default ``false``): the saver's
  ``refresh_on_read``.
- ``MONGO_CKPT_STORE_COLLECTION``: the store's collection (default ``store``; not one of
  the saver's).
- ``MONGO_CKPT_STORE_TTL_MINUTES``: the store's ``default_ttl`` (minutes).
- ``MONGO_CKPT_STORE_SWEEP_MINUTES``: minutes between TTL sweeps (default 5).
- ``MONGO_CKPT_STORE_REFRESH_ON_READ``: ``true``/``false`` (default ``true``).
- ``MONGO_CKPT_STORE_INDEX_DIMS`` + ``MONGO_CKPT_STORE_INDEX_EMBED`` (e.g.
  ``openai:text-embedding-3-small``) + optional ``MONGO_CKPT_STORE_INDEX_FIELDS``
  (comma-separated): semantic search.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from langgraph.store.base import IndexConfig

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.connection import DEFAULT_DB_NAME
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import (
    ARGUMENTS,
    BLOBS,
    CHECKPOINTS,
    STORE,
    THREADS,
    WRITES,
    Layout,
    check_names,
)

__all__ = ["checkpointer", "store"]


# The variable that names each collection (what a CollectionNameClash tells to change).
VARIABLES = {
    CHECKPOINTS: "MONGO_CKPT_CHECKPOINTS_COLLECTION",
    BLOBS: "MONGO_CKPT_BLOBS_COLLECTION",
    WRITES: "MONGO_CKPT_WRITES_COLLECTION",
    THREADS: "MONGO_CKPT_THREADS_COLLECTION",
    STORE: "MONGO_CKPT_STORE_COLLECTION",
}


class ConfigurationError(MongoCkptError, RuntimeError):
    """The environment lacks what an entry point needs."""


def _uri(env: Mapping[str, str]) -> str:
    uri = env.get("MONGODB_URI") or env.get("LS_MONGODB_URI")
    if not uri:
        raise ConfigurationError(
            "mongo_ckpt.platform needs a MongoDB connection string: set MONGODB_URI "
            "(or LS_MONGODB_URI), e.g. MONGODB_URI=mongodb://localhost:27017"
        )
    return uri


def _number(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value


def _collections(env: Mapping[str, str]) -> dict[str, str]:
    """The saver's collection names by logical name, as the environment sets them."""
    defaults = Layout().by_logical()
    return {logical: env.get(VARIABLES[logical]) or defaults[logical] for logical in defaults}


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    """The boolean variable ``name`` (``true``/``false``, ``1``/``0``, ``yes``/``no``), if set."""
    raw = env.get(name)
    if not raw:
        return None
    if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigurationError(f"{name} must be true or false, got {raw!r}")
    return raw.lower() in ("true", "1", "yes")


def saver_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``AsyncMongoDBSaver`` arguments the environment sets; ``CollectionNameClash``
    (naming the variables) when two collections would share a name."""
    check_names(_collections(env), VARIABLES)
    kwargs: dict[str, Any] = {"db_name": env.get("MONGO_CKPT_DB") or DEFAULT_DB_NAME}
    for logical, arg in ARGUMENTS.items():
        if env.get(VARIABLES[logical]):
            kwargs[arg] = env[VARIABLES[logical]]
    ttl = _number(env, "MONGO_CKPT_TTL_SECONDS")
    if env.get("MONGO_CKPT_TTL_STRATEGY"):
        kwargs["ttl_strategy"] = env["MONGO_CKPT_TTL_STRATEGY"]
    refresh = _flag(env, "MONGO_CKPT_REFRESH_ON_READ")
    if refresh is not None:
        kwargs["refresh_on_read"] = refresh
    return kwargs if ttl is None else {**kwargs, "ttl": ttl}


def store_kwargs(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``AsyncMongoDBStore`` arguments the environment sets; ``CollectionNameClash``
    when the store's collection is one of the checkpointer's."""
    collection = env.get(VARIABLES[STORE]) or "store"
    check_names({**_collections(env), STORE: collection}, VARIABLES)
    kwargs: dict[str, Any] = {
        "db_name": env.get("MONGO_CKPT_DB") or DEFAULT_DB_NAME,
        "collection_name": collection,
    }
    numbers = {
        "default_ttl": _number(env, "MONGO_CKPT_STORE_TTL_MINUTES"),
        "sweep_interval_minutes": _number(env, "MONGO_CKPT_STORE_SWEEP_MINUTES"),
    }
    ttl: dict[str, Any] = {arg: value for arg, value in numbers.items() if value is not None}
    refresh = _flag(env, "MONGO_CKPT_STORE_REFRESH_ON_READ")
    if refresh is not None:
        ttl["refresh_on_read"] = refresh
    if ttl:
        ttl.setdefault("refresh_on_read", True)
        kwargs["ttl"] = ttl
    dims = env.get("MONGO_CKPT_STORE_INDEX_DIMS")
    if dims:
        embed = env.get("MONGO_CKPT_STORE_INDEX_EMBED")
        if not dims.isdigit() or not embed:
            raise ConfigurationError(
                "semantic search needs MONGO_CKPT_STORE_INDEX_DIMS (a positive integer) and "
                "MONGO_CKPT_STORE_INDEX_EMBED (e.g. openai:text-embedding-3-small)"
            )
        index: IndexConfig = {"dims": int(dims), "embed": embed}
        fields = env.get("MONGO_CKPT_STORE_INDEX_FIELDS")
        if fields:
            index["fields"] = [f.strip() for f in fields.split(",") if f.strip()]
        kwargs["index"] = index
    return kwargs


@asynccontextmanager
async def _opened(
    kind: Any, kwargs_from: Callable[[Mapping[str, str]], dict[str, Any]]
) -> AsyncIterator[Any]:
    """A ``kind`` (saver or store class) on the environment's server, set up."""
    kwargs = kwargs_from(os.environ)
    async with kind.from_conn_string(_uri(os.environ), kwargs.pop("db_name"), **kwargs) as opened:
        await opened.setup()
        yield opened


@asynccontextmanager
async def _store() -> AsyncIterator[Any]:
    from mongo_ckpt.store import AsyncMongoDBStore

    async with _opened(AsyncMongoDBStore, store_kwargs) as store:
        if store.ttl_config:
            await store.start_ttl_sweeper()
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()


def checkpointer() -> Any:
    """An async context manager of an ``AsyncMongoDBSaver`` configured from the environment."""
    return _opened(AsyncMongoDBSaver, saver_kwargs)


def store() -> Any:
    """An async context manager of an ``AsyncMongoDBStore`` configured from the environment."""
    return _store()
