"""The requests a put sends and its parent probes among them (no tests here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pymongo import UpdateOne

from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import CHECKPOINTS
from mongo_ckpt.maintenance import DOOMED
from tests.backends import record_first_arguments
from tests.saver_support import Api


def record_requests(api: Api) -> list[Any]:
    """The request lists of every ``bulk_write`` the saver sends on ``checkpoints`` or on
    the client, as they are sent."""
    return record_first_arguments(api.saver.collections, (CHECKPOINTS, CLIENT), "bulk_write")


def _updates(sent: list[Any]) -> Iterator[UpdateOne]:
    return (r for requests in sent for r in requests if isinstance(r, UpdateOne))


def probes(sent: list[Any]) -> list[dict[str, Any]]:
    """The filters of the parent probes among the requests ``sent``."""
    return [r._filter for r in _updates(sent) if DOOMED in r._filter and r._upsert]
