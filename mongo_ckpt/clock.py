"""The server's clock: the one clock that decides deletions.

Client clocks may be minutes off (a container without NTP, a laptop that slept), and
a saver's ``created_at``, its retention cutoffs and its tombstone leases decide what
is deleted. So every timestamp that decides a deletion is the server's: written with
``$currentDate`` or read once per call with ``server_now``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from mongo_ckpt.calls import Operation, upserted
from mongo_ckpt.schema import SCHEMA

CLOCK_ID = "clock"  # the schema-collection document whose ``now`` the server sets


def server_now() -> Operation[datetime]:
    """The server's current time (UTC, aware), in one round trip.

    ``$currentDate`` on a small document of the schema collection: every backend
    implements it (``$$NOW`` is missing from some), and the value is the server's.
    """
    query, update = {"_id": CLOCK_ID}, {"$currentDate": {"now": True}}
    doc = yield from upserted(SCHEMA, query, update)
    return aware(doc["now"])


def aware(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (drivers return naive UTC by default)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)
