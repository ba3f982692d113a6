"""The langgraph-checkpoint-conformance suite, on every backend, async and sync savers."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver


async def _check(name: str, make_saver: Any) -> None:
    async def factory() -> Any:
        yield make_saver(f"conf_{uuid.uuid4().hex[:10]}")

    report = await validate(checkpointer_test(name)(factory))
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert {cap for cap, r in report.results.items() if r.passed} == {
        c.value for c in ALL_CAPABILITIES
    }


async def test_conformance_async(aclient: Any) -> None:
    await _check("AsyncMongoDBSaver", lambda db: AsyncMongoDBSaver(aclient, db))


async def test_conformance_sync(client: Any) -> None:
    await _check("MongoDBSaver", lambda db: MongoDBSaver(client, db))
