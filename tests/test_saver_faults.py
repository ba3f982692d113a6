"""Fault injection over every write path of the sync saver: each call of put,
put_writes, copy_thread, prune and delete_for_runs fails in turn (before it is sent,
after the server applied it, and for bulk writes cut after every k requests), and is
retried, writes also with another value. After each failure every checkpoint is fully
readable or not visible and no value is stitched; after the retry the operation is
complete and nothing is left behind (see ``tests.fault_harness``)."""

from __future__ import annotations

import pytest

from mongo_ckpt import MongoDBSaver, payload
from tests.fault_harness import CHUNK, OPERATIONS, check_every_fault


@pytest.mark.parametrize("name", OPERATIONS)
async def test_every_cut_point_leaves_whole_or_invisible_checkpoints(
    saver: MongoDBSaver, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    cases = await check_every_fault(saver, name)
    print(f"sync {name}: {cases} cases")
