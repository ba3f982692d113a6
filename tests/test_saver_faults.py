"""Fault injection over every write path of the savers, sync and async (PyMongo async and
Motor on ``wire``, mongomock-motor on ``mock``): each call of put, put_writes,
copy_thread, prune and delete_for_runs fails in turn (before it is sent, after the server
applied it, and for bulk writes cut after k requests), and is retried, writes also with
another value. After each failure every checkpoint is fully readable or not visible and
no value is stitched; after the retry the operation is complete and nothing is left
behind (see ``tests.fault_harness``). ``put`` runs on both of its paths (one client-level
bulk write where the backend has it, one bulk write per collection)."""

from __future__ import annotations

import pytest

from mongo_ckpt import payload
from tests.fault_harness import CHUNK, OPERATIONS, check_every_fault
from tests.saver_support import Api

CASES = [
    pytest.param(name, path, id=f"{name}-{label}" if name == "put" else name)
    for name in OPERATIONS
    for path, label in ((None, "put-detected"), (False, "put-per-collection"))
    if name == "put" or path is None
]


@pytest.mark.mock_by_default
@pytest.mark.parametrize(("name", "client_bulk_write"), CASES)
async def test_every_cut_point_leaves_whole_or_invisible_checkpoints(
    api: Api, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)
    cases = await check_every_fault(api.saver, name)
    print(f"{type(api.saver).__name__} {name}: {cases} cases")
