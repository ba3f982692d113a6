"""Shared helpers for the store tests (no tests here): store factories and a fake embedder."""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore

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


async def _maybe_await(result: Any) -> Any:
    if hasattr(result, "__await__"):
        return await result
    return result


@pytest.fixture
async def make_astore(
    aclient: Any, db_name: str
) -> AsyncIterator[Callable[..., AsyncMongoDBStore]]:
    """Factory of ``AsyncMongoDBStore``s on the parametrized async client, in a fresh database."""

    def make(**kwargs: Any) -> AsyncMongoDBStore:
        return AsyncMongoDBStore(aclient, db_name, **kwargs)

    yield make
    await _maybe_await(aclient.drop_database(db_name))


@pytest.fixture
def make_store(client: Any, db_name: str) -> Iterator[Callable[..., MongoDBStore]]:
    """Factory of ``MongoDBStore``s on the parametrized sync client, in a fresh database."""

    def make(**kwargs: Any) -> MongoDBStore:
        return MongoDBStore(client, db_name, **kwargs)

    yield make
    client.drop_database(db_name)


def stored(docs: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], str]]:
    return sorted((tuple(d["namespace"]), d["key"]) for d in docs)
