"""The fault-injection harness of ``test_saver_faults`` on ``AsyncMongoDBSaver``: PyMongo
async and Motor on ``wire``, mongomock-motor on ``mock``. Each call of put, put_writes,
copy_thread, prune and delete_for_runs fails in turn and is retried; every checkpoint stays
whole or invisible, and the retry completes with nothing left behind."""

from __future__ import annotations

import pytest

from mongo_ckpt import AsyncMongoDBSaver, payload
from tests.fault_harness import CHUNK, OPERATIONS, check_every_fault


@pytest.mark.parametrize("name", OPERATIONS)
async def test_every_cut_point_leaves_whole_or_invisible_checkpoints(
    asaver: AsyncMongoDBSaver, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    cases = await check_every_fault(asaver, name)
    print(f"async {name}: {cases} cases")
