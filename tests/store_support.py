"""Shared helpers for the store tests (no tests here): a fake embedder, document keys,
registry entries' invariant fields, and ``StoreApi``, a sync or async store behind one
awaitable interface.

The store fixtures (``make_store``, ``make_astore``, ``store_api``) are in ``conftest.py``."""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import REGISTRY, STORE
from mongo_ckpt.store import registry
from tests.backends import count_calls, total
from tests.saver_support import AwaitableMethods

DIMS = 32


class FakeEmbeddings(Embeddings):
    """Bag of words hashed into ``DIMS`` buckets: deterministic, and texts sharing words are close.

    Counts its calls, so tests can assert how often a batch embeds.
    """

    def __init__(self) -> None:
        self.document_calls: list[list[str]] = []
        self.query_calls: list[str] = []

    @staticmethod
    def vector(text: str) -> list[float]:
        vector = [0.0] * DIMS
        for word in re.findall(r"\w+", text.lower()):
            vector[zlib.crc32(word.encode()) % DIMS] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls.append(list(texts))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls.append(text)
        return self.vector(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def stored(docs: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], str]]:
    return sorted((tuple(d["namespace"]), d["key"]) for d in docs)


def ttl_indexes(info: dict[str, Any]) -> list[str]:
    """The TTL indexes among a collection's ``index_information()``: those to drop for
    expired documents to stay stored."""
    return [name for name, spec in info.items() if "expireAfterSeconds" in spec]


def writes(store: Any, inserted: bool = False) -> dict[tuple[str, str], int]:
    """The calls of a batch's writes: one client-level bulk write, or its items, then its
    namespaces' registry entries (always, for a batch ``inserted``: of many new items)."""
    if store.uses_client_bulk_write and not inserted:
        return {(CLIENT, "bulk_write"): 1}
    return {("store", "bulk_write"): 1, ("registry", "bulk_write"): 1}


def keep_expired(store: Any) -> None:
    """Drop the TTL indexes of a sync store's items and registry: expired documents stay
    stored, as they do for up to a minute on MongoDB."""
    for logical in (STORE, REGISTRY):
        collection = store.collections[logical]
        for index in ttl_indexes(collection.index_information()):
            collection.drop_index(index)


def assert_entry_fields(entry: dict[str, Any]) -> None:
    """A registry entry is found by its namespace's marks."""
    assert entry[registry.PREFIXES] == registry.marks(entry[registry.LABELS]), entry


class StoreApi(AwaitableMethods):
    """A store behind async methods: ``await s.put(...)`` is ``aput`` or ``put``."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.store = store

    async def items(self) -> list[tuple[Any, ...]]:
        cursor = self.store.collections[STORE].find({})
        docs = [d async for d in cursor] if self.is_async else list(cursor)
        return sorted((tuple(d["namespace"]), d["key"], repr(d.get("value"))) for d in docs)

    @asynccontextmanager
    async def untouched(self) -> AsyncIterator[None]:
        before = await self.items()
        counter = count_calls(self.store.collections)
        yield
        assert total(counter) == 0, counter
        assert await self.items() == before

    async def refuses(self, attempt: Callable[[], Any], error: type, text: str) -> None:
        async with self.untouched():
            with pytest.raises(error, match=re.escape(text)):
                await attempt()
