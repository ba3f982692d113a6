"""Storage logic as plain generators of collection calls, run by a sync or async driver.

Every saver and store operation is written once, as a generator that yields
``Call`` (one collection method call; the driver sends back its result),
``NextBatch`` (the next documents of a streamed cursor) and ``Emit`` (an item
for the caller of an iterating operation). ``mongo_ckpt.drivers`` runs these
generators on PyMongo, Motor or mongomock, blocking or awaiting.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    """``collections[collection].method(*args, **kwargs)``.

    ``find`` and ``aggregate`` come back as a list of documents, or with
    ``stream=True`` as a cursor handle for ``NextBatch``.
    """

    collection: str
    method: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True)
class NextBatch:
    """Up to ``size`` further documents of a streamed cursor; empty when exhausted."""

    cursor: Any
    size: int


@dataclass(frozen=True)
class Emit:
    """An item an iterating operation hands to its caller."""

    item: Any


Step = Call | NextBatch | Emit
Operation = Generator[Step, Any, Any]
