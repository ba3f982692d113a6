"""Shared helpers for the cache tests (no tests here): ``CacheApi``, a sync or async cache
behind one awaitable interface, and ``Clock``, the time the ``clock`` fixture gives the cache.

The fixtures are in ``tests/cache/conftest.py``."""

from __future__ import annotations

import time
from typing import Any

import bson

from mongo_ckpt.cache import AsyncMongoDBCache, MongoDBCache
from mongo_ckpt.cache.operations import CACHE
from tests.backends import Target, maybe_await
from tests.saver_support import AwaitableMethods


class CacheApi(AwaitableMethods):
    """A cache behind async methods: ``await c.get(...)`` is ``aget`` or ``get``."""

    def __init__(self, cache: Any) -> None:
        super().__init__(cache)
        self.cache = cache

    async def docs(self) -> list[dict[str, Any]]:
        """Every stored entry document, bypassing the cache."""
        cursor = self.cache.collections[CACHE].find({})
        return [d async for d in cursor] if self.is_async else list(cursor)

    async def raw_bytes(self) -> bytes:
        """Every document of every collection in the cache's database, as BSON."""
        db = self.cache.db
        chunks = []
        for name in await maybe_await(db.list_collection_names()):
            cursor = db[name].find({})
            docs = [d async for d in cursor] if self.is_async else list(cursor)
            chunks += [bson.encode(doc) for doc in docs]
        return b"".join(chunks)


def cache_class(target: Target) -> type[MongoDBCache[Any]] | type[AsyncMongoDBCache[Any]]:
    return AsyncMongoDBCache if target.is_async else MongoDBCache


class Clock:
    """The cache's monotonic clock, ``offset`` seconds ahead of the real one (or frozen)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.frozen: float | None = None

    def __call__(self) -> float:
        return (self.frozen if self.frozen is not None else time.monotonic()) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def freeze(self) -> None:
        self.frozen = time.monotonic()
