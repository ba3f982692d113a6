"""The langgraph-checkpoint-conformance suite, on every backend, async and sync savers."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from tests.backends import Target, aclose


async def _check(name: str, make_saver: Any) -> None:
    async def factory() -> Any:
        yield make_saver(f"conf_{uuid.uuid4().hex[:10]}")

    report = await validate(checkpointer_test(name)(factory))
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert {cap for cap, r in report.results.items() if r.passed} == {
        c.value for c in ALL_CAPABILITIES
    }


async def test_conformance(target: Target) -> None:
    client = target.client()
    saver_class = target.saver_class
    try:
        await _check(saver_class.__name__, lambda db: saver_class(client, db))
    finally:
        await aclose(client)
