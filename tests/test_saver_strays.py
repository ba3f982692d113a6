"""Writes cut and never retried leave documents no checkpoint reads: value versions of a
``put`` whose checkpoint never landed, and parts of a value whose head never landed.
``prune`` removes them once they are older than ``STRAY_AGE`` (a younger one may belong to
a write still on its way, so it stays, and that write can still complete)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from pymongo.errors import AutoReconnect

from mongo_ckpt import maintenance, payload
from mongo_ckpt.layout import BLOBS, WRITES
from tests.faults import Fault, Faults
from tests.saver_support import BOTH_PUT_PATHS, Api, assert_no_orphans

pytestmark = BOTH_PUT_PATHS

CHUNK = 64
A = random.Random(1).randbytes(3 * CHUNK)
B = random.Random(2).randbytes(3 * CHUNK)


async def _cut(api: Api, fault: Fault, action: Any) -> None:
    faults = Faults(api.saver.collections)
    faults.arm(fault)
    try:
        await action()
    except AutoReconnect:
        pass
    finally:
        faults.restore()
    assert faults.fired


async def leave_strays(api: Api) -> tuple[dict, Any]:
    """A thread with one whole checkpoint, plus: the values of a put cut before its
    checkpoint landed, and the first part of a write whose head never landed. Returns the
    whole checkpoint's config and the cut put (to retry)."""
    checkpoint = generate_checkpoint(channel_values={"a": A}, channel_versions={"a": "1"})
    first = await api.put(generate_config("t"), checkpoint, generate_metadata(), {"a": "1"})
    cut = generate_checkpoint(channel_values={"a": B}, channel_versions={"a": "2"})

    async def put_cut() -> dict:
        return await api.put(first, cut, generate_metadata(), {"a": "2"})

    # Values written, checkpoint not: the checkpoint's own bulk write fails before it is
    # sent, or the one client-level bulk write is cut after the value's 3 parts.
    values_only = Fault(0, "cut", 3) if api.saver.uses_client_bulk_write else Fault(1, "before")
    await _cut(api, values_only, put_cut)
    await _cut(api, Fault(0, "cut", 1), lambda: api.put_writes(first, [("w", B)], "task"))
    assert await api.count(BLOBS, {"version": "2"}) == 3
    assert await api.count(WRITES, {"task_id": "task"}) == 1
    return first, put_cut


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)


async def check_young_strays_stay(target: Any) -> None:
    api = Api(target)
    first, put_cut = await leave_strays(api)
    await api.prune(["t"], strategy="keep_latest")
    assert await api.count(BLOBS, {"version": "2"}) == 3  # maybe a put on its way
    assert await api.count(WRITES, {"task_id": "task"}) == 1
    retried = await put_cut()  # ... and it can still complete
    found = await api.get_tuple(retried)
    assert found.checkpoint["channel_values"] == {"a": B}


async def check_old_strays_go(target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api(target)
    first, _ = await leave_strays(api)
    monkeypatch.setattr(maintenance, "STRAY_AGE", timedelta(seconds=-5))  # all count as old
    await api.prune(["t"], strategy="keep_latest")
    await assert_no_orphans(api)
    assert await api.count(BLOBS, {"version": "2"}) == 0
    assert await api.count(WRITES) == 0
    found = await api.get_tuple(first)
    assert found.checkpoint["channel_values"] == {"a": A}
    assert found.pending_writes == []


@pytest.mark.usefixtures("small_chunks")
async def test_young_strays_stay(api: Api) -> None:
    await check_young_strays_stay(api.saver)


@pytest.mark.usefixtures("small_chunks")
async def test_old_strays_go(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await check_old_strays_go(api.saver, monkeypatch)
