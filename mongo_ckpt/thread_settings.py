"""Settings of single threads: their own ``ttl``, in the saver's threads collection.

A thread has a document there only while it has a setting: ``{"thread_id": ..., "ttl":
seconds}``, or ``{"thread_id": ..., "never": true}`` for a thread that never expires;
without one the saver's ``ttl`` applies. ``set_thread_ttl`` (and ``mongo-ckpt ttl``) sets
it, and so does a ``put`` whose ``configurable`` holds ``thread_ttl``; the retention sweep
reads it (``maintenance.sweep_expired``) and deletes it with its thread, and
``copy_thread`` copies it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from mongo_ckpt.calls import Operation, delete_many, find, update_one
from mongo_ckpt.layout import THREADS

CONFIG_KEY = "thread_ttl"  # in ``configurable``: the thread's own ttl, set by its puts
NEVER, DEFAULT = "never", "default"
# Largest ``ttl``: 100 years (longer would overflow the dates an expiry is computed with).
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
_FIELDS = {"_id": 0, "thread_id": 1, "ttl": 1, "never": 1}


def check_ttl(ttl: Any) -> float | str:
    """``ttl`` as stored (seconds as a float, ``"never"`` or ``"default"``); ``ValueError``
    naming what a thread's ttl may be for anything else."""
    if ttl in (NEVER, DEFAULT) and isinstance(ttl, str):
        return str(ttl)
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and 0 < ttl <= MAX_TTL_SECONDS:
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
        yield from delete_many(THREADS, key)
        return
    stored, dropped = ({"never": True}, "ttl") if ttl == NEVER else ({"ttl": ttl}, "never")
    yield from update_one(THREADS, key, {"$set": stored, "$unset": {dropped: ""}}, upsert=True)


def copy(source: str, target: str) -> Operation[None]:
    """Give thread ``target`` the settings of ``source`` (``copy_thread``)."""
    docs = yield from find(THREADS, {"thread_id": source}, projection=_FIELDS)
    if docs:
        yield from set_ttl(target, NEVER if docs[0].get("never") else float(docs[0]["ttl"]))


def own_ttls(query: Mapping[str, Any]) -> Operation[dict[str, float]]:
    """The own ttl, in seconds (``math.inf`` for one that never expires), of each thread
    whose settings match ``query`` and set one."""
    docs = yield from find(THREADS, query, projection=_FIELDS)
    return {d["thread_id"]: math.inf if d.get("never") else float(d["ttl"]) for d in docs}


def of(thread_ids: Iterable[str]) -> dict[str, Any]:
    """The settings of ``thread_ids``."""
    return {"thread_id": {"$in": sorted(thread_ids)}}


def shorter_than(ttl: float | None) -> dict[str, Any]:
    """The settings of the threads whose own ttl is shorter than ``ttl`` (``None``: any)."""
    return {"ttl": {"$exists": True} if ttl is None else {"$lt": ttl}}
