"""Serialized payloads and their split into chunk documents.

MongoDB refuses documents over 16 MiB. A payload larger than ``CHUNK_SIZE`` is
stored as several documents sharing one logical key and numbered by ``part``;
the head (``part`` 0) records how many parts there are, so a reader ignores
parts left over from an earlier, longer value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bson import Binary

CHUNK_SIZE = 8 * 1024 * 1024


def split(type_: str, data: bytes, chunk_size: int = CHUNK_SIZE) -> Iterator[dict[str, Any]]:
    """Yield the payload fields of each part document of one serialized value."""
    parts = max(1, math.ceil(len(data) / chunk_size))
    for part in range(parts):
        fields: dict[str, Any] = {
            "part": part,
            "data": Binary(data[part * chunk_size : (part + 1) * chunk_size]),
        }
        if part == 0:
            fields["type"] = type_
            fields["parts"] = parts
        yield fields


def join(
    docs: Iterable[Mapping[str, Any]], key_fields: tuple[str, ...]
) -> dict[tuple, tuple[Mapping[str, Any], tuple[str, bytes]]]:
    """Group part documents by ``key_fields``: ``{key: (head document, (type, bytes))}``.

    Values whose parts are not all present (an interrupted write) are left out.
    """
    heads: dict[tuple, Mapping[str, Any]] = {}
    tails: dict[tuple, dict[int, bytes]] = {}
    for doc in docs:
        key = tuple(doc[f] for f in key_fields)
        if doc.get("part", 0) == 0:
            heads[key] = doc
        else:
            tails.setdefault(key, {})[doc["part"]] = doc["data"]
    out: dict[tuple, tuple[Mapping[str, Any], tuple[str, bytes]]] = {}
    for key, head in heads.items():
        rest = tails.get(key, {})
        parts = head.get("parts", 1)
        if any(p not in rest for p in range(1, parts)):
            continue
        data = b"".join([bytes(head["data"]), *(bytes(rest[p]) for p in range(1, parts))])
        out[key] = (head, (head["type"], data))
    return out
