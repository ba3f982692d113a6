"""Helpers for tests of layout versions (this module holds no tests)."""

from __future__ import annotations

from typing import Any

from mongo_ckpt.schema import SCHEMA_COLLECTION


def recorded_meanwhile(
    monkeypatch: Any, owner: type, step: str, db: Any, key: str, version: int
) -> None:
    """Another process records ``version`` of ``key`` while ``owner``'s setup runs
    ``step`` (after it read no version and found the collections empty)."""
    original = getattr(owner, step)

    def racing(self: Any, *args: Any) -> Any:
        result = yield from original(self, *args)
        db[SCHEMA_COLLECTION].update_one(
            {"_id": key}, {"$max": {"version": version}}, upsert=True
        )
        return result

    monkeypatch.setattr(owner, step, racing)
