"""The place a serialized value is stored at, for a cipher that binds its ciphertext to it.

``KeyRing(bind=True)`` encrypts each value with its place as associated data, so a value
copied to another thread, namespace, channel, version, checkpoint or store key does not
decrypt there. The saver and the store name the place around each ``dumps_typed`` and
``loads_typed`` (``at``), from the stored document's own key fields; the cipher reads it
with ``current``. The block around a call holds no ``yield`` of an operation, so the place
never outlives the call it is for, in a thread or a task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import bson

from mongo_ckpt.layout import BLOB_KEY, CHECKPOINT_KEY, WRITE_KEY

KINDS = {
    "checkpoint": CHECKPOINT_KEY,
    "metadata": CHECKPOINT_KEY,
    "value": (*BLOB_KEY, "base", "keep"),  # a list delta's base and kept prefix too
    "write": (*WRITE_KEY, "channel", "task_path"),
    "item": ("ns", "key"),
}
"""What is stored where: the fields of the document that name its place (``None`` for one
it does not have)."""

_CURRENT: ContextVar[bytes | None] = ContextVar("mongo_ckpt_place", default=None)


def of(kind: str, doc: Mapping[str, Any]) -> bytes:
    """The place of the ``kind`` value of document (or key) ``doc``, as associated data."""
    return bson.encode({"kind": kind, "at": [doc.get(name) for name in KINDS[kind]]})


@contextmanager
def at(kind: str | None, doc: Mapping[str, Any]) -> Iterator[None]:
    """Values serialized or read within the block are at ``kind``'s place in ``doc``
    (``kind`` ``None``: at none)."""
    token = _CURRENT.set(None if kind is None else of(kind, doc))
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextmanager
def exactly(place: bytes | None) -> Iterator[None]:
    """Values serialized within the block are at ``place`` (from ``of``)."""
    token = _CURRENT.set(place)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> bytes | None:
    """The place named around this call, if any."""
    return _CURRENT.get()
