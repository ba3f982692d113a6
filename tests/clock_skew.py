"""A client clock that is off: every ``datetime.now`` the library calls, shifted (this module
holds no tests).

The server (mongomock in process, or the wire server) keeps the true time, so a test
can tell the server's clock from the client's: only ``mongo_ckpt``'s own modules see
the shift.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo
from typing import Any


def _shifted(offset: timedelta) -> type[datetime]:
    class Shifted(datetime):
        skewed = True

        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Shifted:  # type: ignore[override]
            moment = datetime.now(tz) + offset
            return cls.fromtimestamp(moment.timestamp(), tz)

        @classmethod
        def utcnow(cls) -> Shifted:  # type: ignore[override]
            return cls.now()

    return Shifted


@contextmanager
def skewed_client_clock(offset: timedelta) -> Iterator[None]:
    """Within the block, ``mongo_ckpt`` modules read a clock ``offset`` from the true time
    (in a block nested in another, that block's offset alone)."""
    shifted = _shifted(offset)
    patched: list[tuple[Any, Any]] = []  # (module, its clock before: nested blocks nest)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "mongo_ckpt" or name.startswith("mongo_ckpt.")):
            continue
        clock = getattr(module, "datetime", None)
        if clock is datetime or getattr(clock, "skewed", False):
            patched.append((module, clock))
            module.datetime = shifted  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module, clock in patched:
            module.datetime = clock  # type: ignore[attr-defined]
