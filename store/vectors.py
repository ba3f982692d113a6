"""Semantic search: which texts an item is embedded from, and how items are ranked.

Every indexed field of an item (each element for a ``[*]`` path) gets its own
vector, stored normalised to unit length in ``embeddings`` (packed: little-endian
float64 in one BSON binary, so the server stores one value instead of one number per
dimension); an item's score for a query is the best cosine similarity among its
vectors, as in ``InMemoryStore``.

Two modes: on a server with Atlas Vector Search (Atlas or ``mongodb-atlas-local``)
``$vectorSearch`` picks the candidates from an index over each item's mean
vector; everywhere else every item that passes the namespace and value filter is
a candidate. Candidates are then ranked exactly, by the same function, streamed:
only the best ``offset + limit`` are kept while they are read.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import mul
from typing import Any

from bson import Binary
from langchain_core.embeddings import Embeddings
from langgraph.store.base import get_text_at_path, tokenize_path
from pymongo.operations import SearchIndexModel

from mongo_ckpt.store.namespaces import ItemKey

SEARCH_INDEX_NAME = "store_vectors"
Path = tuple[str, "str | list[str]"]  # the path as written, and how get_text_at_path takes it


def index_paths(fields: Sequence[str] | None) -> list[Path]:
    """The configured fields, tokenised once (``"$"`` is the whole value)."""
    return [(p, p if p == "$" else tokenize_path(p)) for p in (fields or ["$"])]


def field_texts(value: Mapping[str, Any], paths: Iterable[Path]) -> list[tuple[str, str]]:
    """``(label, text)`` per vector of an item; ``[*]`` paths yield ``path.0``, ``path.1``..."""
    texts: list[tuple[str, str]] = []
    for path, tokens in paths:
        found = get_text_at_path(value, tokens)
        if len(found) == 1:
            texts.append((path, found[0]))
        else:
            texts.extend((f"{path}.{i}", text) for i, text in enumerate(found))
    return texts


@dataclass
class EmbeddingRequest:
    """The texts one batch needs embedded: item fields (deduplicated) and search queries."""

    texts: dict[str, list[tuple[ItemKey, str]]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)

    def add_item(self, item: ItemKey, texts: list[tuple[str, str]]) -> None:
        for label, text in texts:
            self.texts.setdefault(text, []).append((item, label))

    def add_query(self, query: str) -> None:
        if query not in self.queries:
            self.queries.append(query)


@dataclass
class Embedded:
    """The vectors of a batch, unit length: per item ``[(label, vector)]``, per query one."""

    items: dict[ItemKey, list[tuple[str, list[float]]]] = field(default_factory=dict)
    queries: dict[str, list[float]] = field(default_factory=dict)


def embed(embeddings: Embeddings | None, request: EmbeddingRequest, dims: int) -> Embedded:
    """Embed with one ``embed_documents`` call plus one ``embed_query`` per distinct query."""
    if embeddings is None:
        return Embedded()
    texts = list(request.texts)
    vectors = embeddings.embed_documents(texts) if texts else []
    queries = [embeddings.embed_query(q) for q in request.queries]
    return _assemble(request, vectors, queries, dims)


async def aembed(embeddings: Embeddings | None, request: EmbeddingRequest, dims: int) -> Embedded:
    """Async ``embed``: the document and query embeddings run concurrently."""
    if embeddings is None:
        return Embedded()
    texts = list(request.texts)
    vectors, queries = await asyncio.gather(
        embeddings.aembed_documents(texts) if texts else _nothing(),
        asyncio.gather(*(embeddings.aembed_query(q) for q in request.queries)),
    )
    return _assemble(request, vectors, queries, dims)


async def _nothing() -> list[list[float]]:
    return []


def _assemble(
    request: EmbeddingRequest,
    vectors: Sequence[Sequence[float]],
    queries: Sequence[Sequence[float]],
    dims: int,
) -> Embedded:
    if len(vectors) != len(request.texts):
        raise ValueError(
            f"the embedding function returned {len(vectors)} vectors for {len(request.texts)} texts"
        )
    embedded = Embedded()
    for vector, targets in zip(vectors, request.texts.values()):
        unit_vector = unit(vector, dims)
        for item, label in targets:
            embedded.items.setdefault(item, []).append((label, unit_vector))
    embedded.queries = {q: unit(v, dims) for q, v in zip(request.queries, queries)}
    return embedded


def unit(vector: Sequence[float], dims: int) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero); checks its dimension."""
    if len(vector) != dims:
        raise ValueError(
            f"the embedding function returned a vector of {len(vector)} dimensions; "
            f"IndexConfig dims is {dims}"
        )
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm else [0.0] * dims


def mean(vectors: Sequence[Sequence[float]]) -> list[float]:
    """The normalised mean: the one vector per item the Atlas index holds."""
    total = [sum(xs) for xs in zip(*vectors)]
    return unit(total, len(total))


def packed(vector: Sequence[float]) -> Binary:
    """A vector as stored in ``embeddings``: its float64 values, little-endian."""
    stored: Binary = Binary(struct.pack(f"<{len(vector)}d", *vector))
    return stored


def unpacked(stored: Any) -> Sequence[float]:
    """A stored vector: packed, or a list of numbers (as layout version 1 wrote them)."""
    if isinstance(stored, bytes):
        return struct.unpack(f"<{len(stored) // 8}d", stored)
    return stored  # type: ignore[no-any-return]


def score(query: Sequence[float], doc: Mapping[str, Any]) -> float | None:
    """Best cosine similarity between ``query`` and the item's vectors (``None``: no vectors)."""
    vectors = [unpacked(e["vector"]) for e in doc.get("embeddings") or ()]
    return max((sum(map(mul, query, v)) for v in vectors), default=None)


Scored = tuple[float | None, Mapping[str, Any]]


def ranked(query: Sequence[float], docs: Iterable[Mapping[str, Any]]) -> list[Scored]:
    """Candidates by score, best first; items without vectors last, newest first within ties."""
    return best([], ((score(query, d), d) for d in docs), None)


def best(kept: list[Scored], scored: Iterable[Scored], k: int | None) -> list[Scored]:
    """The ``k`` best of ``kept`` (already in order) and ``scored`` (all for ``None``), in
    ``ranked`` order; what a streamed search holds between batches."""
    merged = [*kept, *scored]
    merged.sort(key=lambda pair: (pair[1]["ns"], pair[1]["key"]))
    merged.sort(key=lambda pair: pair[1]["updated_at"], reverse=True)
    merged.sort(key=lambda pair: (pair[0] is not None, pair[0] or 0.0), reverse=True)
    return merged if k is None else merged[:k]


def search_index_model(dims: int) -> SearchIndexModel:
    """The Atlas Vector Search index: the mean vector, pre-filtered by namespace prefix."""
    definition = {
        "fields": [
            {"type": "vector", "path": "embedding", "numDimensions": dims, "similarity": "cosine"},
            {"type": "filter", "path": "prefixes"},
        ]
    }
    return SearchIndexModel(definition, name=SEARCH_INDEX_NAME, type="vectorSearch")


def vector_search_stage(
    query: Sequence[float], prefix_clause: Mapping[str, Any], wanted: int
) -> dict[str, Any]:
    """``$vectorSearch`` over-fetching ``wanted`` so value filters and re-ranking keep enough."""
    limit = min(max(wanted * 4, 50), 10_000)
    stage: dict[str, Any] = {
        "index": SEARCH_INDEX_NAME,
        "path": "embedding",
        "queryVector": list(query),
        "numCandidates": min(limit * 10, 10_000),
        "limit": limit,
    }
    if prefix_clause:
        stage["filter"] = dict(prefix_clause)
    return {"$vectorSearch": stage}
