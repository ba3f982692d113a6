"""Shared helpers for the store tests (no tests here): a fake embedder and document keys.

The store factories ``make_store`` and ``make_astore`` are fixtures in ``conftest.py``."""

from __future__ import annotations

import re
import zlib
from typing import Any

from langchain_core.embeddings import Embeddings

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
