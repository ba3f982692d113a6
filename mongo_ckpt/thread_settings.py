"""Settings of single threads, in the saver's threads collection: their own ``ttl`` and
their last read.

A thread has a document there only once it has a setting: ``"ttl": seconds``, or
``"never": true`` for a thread that never expires (without either the saver's ``ttl``
applies), and ``"active_at"``, the server's time of its last ``get_tuple`` on a saver with
``refresh_on_read``. ``set_thread_ttl`` (and ``mongo-ckpt ttl``) sets the ttl, and so does
a ``put`` whose ``configurable`` holds ``thread_ttl``; the retention sweep reads both
(``maintenance.sweep_expired``: a thread is idle since its newest checkpoint or its last
read, whichever is later) and deletes the document with its thread, and ``copy_thread``
copies the ttl.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId
from langchain_core.runnables import RunnableConfig

from mongo_ckpt.calls import Operation, find, update_one
from mongo_ckpt.clock import aware
from mongo_ckpt.layout import THREADS

CONFIG_KEY = "thread_ttl"  # in ``configurable``: the thread's own ttl, set by its puts
NEVER, DEFAULT = "never", "default"
# Largest ``ttl``: 100 years (longer would overflow the dates an expiry is computed with).
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
FIELDS = ("ttl", "never", "active_at")  # the settings (the document may hold a lease too)
_FIELDS = {"_id": 0, "thread_id": 1, **dict.fromkeys(FIELDS, 1), "rev": 1}


@dataclass(frozen=True)
class Setting:
    """What a thread's document says: its own ttl in seconds (``math.inf``: never expires;
    ``None``: the saver's), its last read (``None``: none recorded), and the revision of
    the document (new at every write: a deletion takes only the revision it read)."""

    ttl: float | None
    active_at: datetime | None
    rev: Any = None


def check_ttl(ttl: Any) -> float | str:
    """``ttl`` as stored (seconds as a float, ``"never"`` or ``"default"``); ``ValueError``
    naming what a thread's ttl may be for anything else."""
    if ttl in (NEVER, DEFAULT) and isinstance(ttl, str):
        return str(ttl)
    number = isinstance(ttl, numbers.Real) and not isinstance(ttl, bool)
    if number and 0 < ttl <= MAX_TTL_SECONDS:
        return float(ttl)
    raise ValueError(
        f"a thread's ttl is a number of seconds above 0 and at most {MAX_TTL_SECONDS} (100 "
        f"years), {NEVER!r} (it never expires) or {DEFAULT!r} (the saver's ttl), got {ttl!r}"
    )


def configured(config: RunnableConfig) -> float | str | None:
    """The thread's own ttl ``config``'s ``configurable`` sets (checked), if it sets one."""
    ttl = config.get("configurable", {}).get(CONFIG_KEY)
    return None if ttl is None else check_ttl(ttl)


def set_ttl(thread_id: str, ttl: float | str) -> Operation[None]:
    """Store ``ttl`` (checked already) as the thread's own; ``"default"`` removes it."""
    key = {"thread_id": thread_id}
    if ttl == DEFAULT:
        update = {"$unset": {"ttl": "", "never": ""}, "$set": {"rev": ObjectId()}}
        yield from update_one(THREADS, key, update, upsert=False)
        return
    stored, dropped = ({"never": True}, "ttl") if ttl == NEVER else ({"ttl": ttl}, "never")
    update = {"$set": {**stored, "rev": ObjectId()}, "$unset": {dropped: ""}}
    yield from update_one(THREADS, key, update, upsert=True)


def touch(thread_id: str) -> Operation[None]:
    """Record a read of the thread now, by the server's clock (``refresh_on_read``)."""
    # A new revision only for a new document: a read is not a setting, and the revision a
    # deletion read must still match after a read of the thread meanwhile.
    now = {"$currentDate": {"active_at": True}, "$setOnInsert": {"rev": ObjectId()}}
    yield from update_one(THREADS, {"thread_id": thread_id}, now, upsert=True)


def copy(source: str, target: str) -> Operation[None]:
    """Give thread ``target`` the ttl of ``source`` (``copy_thread``), the saver's when
    ``source`` has none of its own."""
    found = (yield from read({"thread_id": source})).get(source)
    ttl = None if found is None else found.ttl
    yield from set_ttl(target, DEFAULT if ttl is None else NEVER if ttl == math.inf else ttl)


def read(query: Mapping[str, Any]) -> Operation[dict[str, Setting]]:
    """The settings of the threads whose documents match ``query``, by thread id."""
    docs = yield from find(THREADS, query, projection=_FIELDS)
    return {d["thread_id"]: _setting(d) for d in docs}


def _setting(doc: Mapping[str, Any]) -> Setting:
    ttl = math.inf if doc.get("never") else doc.get("ttl")
    active_at = doc.get("active_at")
    moment = aware(active_at) if isinstance(active_at, datetime) else None
    return Setting(ttl, moment, doc.get("rev"))


def of(thread_ids: Iterable[str]) -> dict[str, Any]:
    """The settings of ``thread_ids``."""
    return {"thread_id": {"$in": sorted(thread_ids)}}


def as_read(thread_ids: Iterable[str], found: Mapping[str, Setting]) -> dict[str, Any] | None:
    """The documents of ``thread_ids`` as ``found`` read them (their revision then, unique
    to one document), so that a setting written since (a new conversation on the thread
    id) stays; ``None`` when none was read."""
    chosen = sorted(t for t in thread_ids if t in found)
    revisions = [found[t].rev for t in chosen]
    return {"thread_id": {"$in": chosen}, "rev": {"$in": revisions}} if chosen else None


def shorter_than(ttl: float | None) -> dict[str, Any]:
    """The settings of the threads whose own ttl is shorter than ``ttl`` (``None``: any)."""
    return {"ttl": {"$exists": True} if ttl is None else {"$lt": ttl}}
