"""Write fencing: a thread's owner lease, kept with its settings in the threads collection.

A writer takes a thread's lease (``lease_thread``, or the ``thread_lease`` context manager) and
gets an owner token; every ``put`` and ``put_writes`` whose ``configurable`` holds that
token as ``thread_owner`` checks it in its first statement (``check``), before anything
else is written: when another owner took the lease meanwhile (a paused pod's run
superseded), the check collides with the thread's settings document on the unique
``thread_key`` index and the write stops there, as ``ThreadLeaseLost``. Writers that pass
no ``thread_owner`` are not fenced.

Fields: ``owner`` (the token), ``leased_at`` (the server's time of the lease's last
renewal: taking it, and every fenced write) and ``lease_seconds``. Another owner may take
the lease once ``leased_at + lease_seconds`` is past by the server's clock, or at once with
``take_over=True``. Releasing sets ``lease_seconds`` to 0 and keeps the owner, so a writer
the lease was taken from stays fenced after the new owner is done.
"""

from __future__ import annotations

import numbers
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from langchain_core.runnables import RunnableConfig
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from mongo_ckpt.calls import Operation, bulk_write, find_one, update_one
from mongo_ckpt.clock import aware, server_now
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import coerce_id
from mongo_ckpt.layout import THREADS
from mongo_ckpt.maintenance import DUPLICATE_KEY

CONFIG_KEY = "thread_owner"  # in ``configurable``: the owner token a run's writes check
LEASE_SECONDS = 60.0
MAX_LEASE_SECONDS = 365 * 24 * 3600
_ATTEMPTS = 5  # compare-and-set rounds of ``take`` against other takers before giving up


class ThreadLeaseHeld(MongoCkptError, RuntimeError):
    """Another owner holds the thread's lease, and it has not expired."""

    def __init__(self, thread_id: str, until: datetime | None) -> None:
        if until is None:
            message = (
                f"thread {thread_id!r} changed owner at each of {_ATTEMPTS} attempts to take "
                "its lease (other takers at the same time): try again"
            )
        else:
            message = (
                f"thread {thread_id!r} is leased to another owner until {until.isoformat()} "
                "(server time): wait for it to expire or be released, or take it over with "
                "take_over=True (that owner's later writes then fail with ThreadLeaseLost)"
            )
        super().__init__(message)
        self.thread_id, self.until = thread_id, until


class ThreadLeaseLost(MongoCkptError, RuntimeError):
    """A fenced write found the thread leased to another owner; it wrote nothing."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            f"thread {thread_id!r} is leased to another owner than this run's thread_owner: "
            "its lease was taken over (or never taken), and nothing was written; stop this "
            "run, or take the lease again with lease_thread(...) before going on"
        )
        self.thread_id = thread_id


def configured(config: RunnableConfig) -> str | None:
    """The owner token ``config``'s ``configurable`` names, if any (checked)."""
    owner = config.get("configurable", {}).get(CONFIG_KEY)
    return None if owner is None else _token(owner, f"configurable[{CONFIG_KEY!r}]")


def check(thread_id: str, owner: str) -> UpdateOne:
    """A fenced write's first statement: renews the lease if ``owner`` holds it (or takes
    it if nobody ever did); else its upsert collides on ``thread_key`` (``lost``)."""
    return UpdateOne(
        {"thread_id": thread_id, "owner": {"$in": [owner, None]}},
        {
            "$set": {"owner": owner},
            "$currentDate": {"leased_at": True},
            "$setOnInsert": {"rev": ObjectId(), "lease_seconds": LEASE_SECONDS},
        },
        upsert=True,
    )


def lost(error: Mapping[str, Any] | None) -> bool:
    """Whether the write error ``error`` (of a ``check``) says another owner holds it."""
    return error is not None and error.get("code") == DUPLICATE_KEY


def checked(thread_id: str, owner: str) -> Operation[None]:
    """``check`` as a command of its own (where the write cannot carry it):
    ``ThreadLeaseLost`` if another owner holds the lease."""
    try:
        yield from bulk_write(THREADS, [check(thread_id, owner)], ordered=True)
    except BulkWriteError as error:
        if lost((error.details.get("writeErrors") or [None])[0]):
            raise ThreadLeaseLost(thread_id) from None
        raise


def _expiry(doc: Mapping[str, Any]) -> datetime | None:
    if doc.get("owner") is None or doc.get("leased_at") is None:
        return None
    seconds = doc.get("lease_seconds", LEASE_SECONDS)
    return aware(doc["leased_at"]) + timedelta(seconds=seconds)


def _token(owner: Any, where: str) -> str:
    if not isinstance(owner, str) or not owner:
        raise ValueError(
            f"{where} is an owner token lease_thread returned (a non-empty string), "
            f"got {owner!r}"
        )
    return owner


def take(
    thread_id: Any, owner: str | None, seconds: Any, take_over: Any
) -> Operation[str]:
    """Take (or renew, with ``owner``) the thread's lease for ``seconds``: the owner token.

    ``ThreadLeaseHeld`` while another owner's lease runs, unless ``take_over``. The
    document is replaced only as read (compare and set: its owner, and when the lease
    of another owner expired, its last renewal), so of two takers one wins.
    """
    thread_id = coerce_id(thread_id, "thread_id")
    token = uuid.uuid4().hex if owner is None else _token(owner, "owner")
    number = isinstance(seconds, numbers.Real) and not isinstance(seconds, bool)
    if not number or not 0 < seconds <= MAX_LEASE_SECONDS:
        raise ValueError(
            f"seconds: a lease lasts a number of seconds above 0 and at most a year "
            f"({MAX_LEASE_SECONDS}), got {seconds!r}"
        )
    if not isinstance(take_over, bool):
        raise ValueError(f"take_over is True or False, got {take_over!r}")
    for _ in range(_ATTEMPTS):
        doc = (yield from find_one(THREADS, {"thread_id": thread_id})) or {}
        until = _expiry(doc)
        other = doc.get("owner") not in (None, token) and not take_over
        as_read = {"thread_id": thread_id, "owner": doc.get("owner")}
        if other and until is not None:
            if until > (yield from server_now()):
                raise ThreadLeaseHeld(thread_id, until)
            as_read["leased_at"] = doc["leased_at"]  # expired: unless renewed meanwhile
        update = {
            "$set": {"owner": token, "lease_seconds": float(seconds), "rev": ObjectId()},
            "$currentDate": {"leased_at": True},
        }
        try:
            result = yield from update_one(THREADS, as_read, update, upsert=not doc)
        except DuplicateKeyError:
            continue  # another taker inserted the document first: read it again
        if result.matched_count or result.upserted_id is not None:
            return token
    raise ThreadLeaseHeld(thread_id, None)


def release(thread_id: Any, owner: Any) -> Operation[bool]:
    """End ``owner``'s lease (the owner stays named, so its later writes stay fenced);
    whether it held it."""
    held = {"thread_id": coerce_id(thread_id, "thread_id"), "owner": _token(owner, "owner")}
    result = yield from update_one(THREADS, held, {"$set": {"lease_seconds": 0.0}}, upsert=False)
    return bool(result.matched_count)
