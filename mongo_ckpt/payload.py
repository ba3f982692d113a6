"""Serialized payloads and their split into chunk documents.

MongoDB refuses documents over 16 MiB. A payload larger than ``CHUNK_SIZE`` is
stored as several documents sharing one logical key. Every part carries ``vid``,
a digest of the whole value. The head (``part`` 0) holds the type, the part
count and the first chunk; the other parts are keyed by ``"<vid>:<n>"``, so two
attempts with different values never overwrite each other's parts. A reader
joins a head only with the parts carrying the head's ``vid`` and checks the
digest of the joined bytes: a value is read whole or not at all, never stitched
from two attempts. Writers put the parts first and the head last.

A payload of at least ``COMPRESS_FROM`` bytes may be stored compressed. Its type tag then
names the encoding after the serializer's type (``msgpack+zlib``, as ``EncryptedSerializer``
tags ciphertext ``msgpack+aes``), so a reader that does not know an encoding hands the tag
to its serializer, which refuses it, instead of decoding the compressed bytes as the
value. The digest is of the stored type and bytes, so two attempts storing one value with
and without compression never share a part key.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bson import Binary

CHUNK_SIZE = 8 * 1024 * 1024
COMPRESS_FROM = 2048
"""Smallest serialized value stored compressed (below it zlib's framing outweighs the gain)."""
NEW_PARTS = "rekeying"
"""Marks the parts ``rekeying`` writes before their head names them: the writers that
remove parts their head does not name (a retried put, a special channel's overwrite)
leave marked ones, which ``rekeying`` itself removes or unmarks."""
REPLACED = "replaced_vid"
"""On a head ``rekeying`` swapped to new parts: the value id of the old parts, until they
are deleted."""
ZLIB = "+zlib"
"""The suffix of a compressed value's type tag."""
_LEVEL = 1  # zlib's fastest: most of the gain on serialized messages, at a fraction of the CPU


def digest(type_: str, data: bytes) -> str:
    """The value id stored in every part: a digest of the type and the bytes."""
    h = hashlib.blake2b(digest_size=16)
    h.update(type_.encode())
    h.update(b"\0")
    h.update(data)
    return h.hexdigest()


def split(
    type_: str, data: bytes, chunk_size: int | None = None, *, compress: bool = False
) -> Iterator[dict[str, Any]]:
    """Yield the payload fields of each part document of one serialized value.

    ``compress``: store a value of at least ``COMPRESS_FROM`` bytes zlib-compressed where
    that is smaller. The head (``part`` 0) comes last, so writers that send requests in
    this order never publish a head before the parts it names.
    """
    size = chunk_size or CHUNK_SIZE
    # A serializer's own tag ending in ``+zlib`` gets this layer on top, whatever it saves:
    # a reader takes off exactly one.
    own = type_.endswith(ZLIB)
    if own or (compress and len(data) >= COMPRESS_FROM):
        packed = zlib.compress(data, _LEVEL)
        if own or len(packed) < len(data):
            type_, data = type_ + ZLIB, packed
    vid = digest(type_, data)
    parts = max(1, math.ceil(len(data) / size))
    for n in [*range(1, parts), 0]:
        fields: dict[str, Any] = {
            "part": f"{vid}:{n}" if n else 0,
            "vid": vid,
            "data": Binary(data[n * size : (n + 1) * size]),
        }
        if n == 0:
            fields["type"] = type_
            fields["parts"] = parts
        yield fields


def may_span_parts(data: bytes) -> bool:
    """Whether an attempt storing the serialized ``data`` may need several parts: one that
    does not compress it does when it is over ``CHUNK_SIZE``."""
    return len(data) > CHUNK_SIZE


def _serialized(type_: str, data: bytes) -> tuple[str, bytes] | None:
    """The serializer's ``(type, bytes)`` from a value's stored type tag and joined bytes;
    ``None`` when compressed bytes do not decompress (read as absent, as a failed digest
    is)."""
    if not type_.endswith(ZLIB):
        return type_, data
    try:
        return type_.removesuffix(ZLIB), zlib.decompress(data)
    except zlib.error:
        return None


def _tail(doc: Mapping[str, Any]) -> tuple[Any, int] | None:
    """``(vid, n)`` of a non-head part; ``None`` for a head."""
    part = doc.get("part", 0)
    if part == 0:
        return None
    if isinstance(part, str):
        vid, _, n = part.rpartition(":")
        return vid, int(n)
    return None, int(part)  # written before values carried an id


def join(
    docs: Iterable[Mapping[str, Any]], key_fields: tuple[str, ...]
) -> dict[tuple[Any, ...], tuple[Mapping[str, Any], tuple[str, bytes]]]:
    """Group part documents by ``key_fields``: ``{key: (head document, (type, bytes))}``,
    the bytes as serialized (decompressed).

    A value is left out unless every part named by its head is present with the
    head's value id and the joined bytes match the head's digest (an interrupted
    or mixed write reads as absent, never as a stitched value).
    """
    heads: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    tails: dict[tuple[Any, ...], dict[int, bytes]] = {}
    for doc in docs:
        key = tuple(doc[f] for f in key_fields)
        tail = _tail(doc)
        if tail is None:
            heads[key] = doc
        else:
            tails.setdefault((*key, tail[0]), {})[tail[1]] = doc["data"]
    out: dict[tuple[Any, ...], tuple[Mapping[str, Any], tuple[str, bytes]]] = {}
    for key, head in heads.items():
        vid = head.get("vid")
        rest = tails.get((*key, vid), {})
        parts = head.get("parts", 1)
        if any(p not in rest for p in range(1, parts)):
            continue
        data = b"".join([bytes(head["data"]), *(bytes(rest[p]) for p in range(1, parts))])
        if vid is not None and digest(head["type"], data) != vid:
            continue
        serialized = _serialized(head["type"], data)
        if serialized is not None:
            out[key] = (head, serialized)
    return out


def stray_parts(
    docs: Iterable[Mapping[str, Any]], key_fields: tuple[str, ...], *, headless: bool = False
) -> list[Any]:
    """``_id`` of the non-head parts (from ``docs``, all parts of some keys) that no read
    ever joins: those whose value id is not their head's (a cut or losing attempt) and,
    with ``headless``, those whose key has no head at all.

    Without ``headless`` only keys with a head are judged: a write may still be on its way.
    """
    heads: dict[tuple[Any, ...], Any] = {}
    tails: list[tuple[tuple[Any, ...], Mapping[str, Any]]] = []
    for doc in docs:
        key = tuple(doc[f] for f in key_fields)
        if _tail(doc) is None:
            heads[key] = doc.get("vid")
        else:
            tails.append((key, doc))
    return [
        doc["_id"]
        for key, doc in tails
        if (key in heads and doc.get("vid") != heads[key]) or (headless and key not in heads)
    ]
