"""No size wall: values and writes far over MongoDB's 16 MiB document limit round-trip
intact (the wire backend's driver enforces that limit; mock does not)."""

from __future__ import annotations

import random

import bson
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.saver_support import Api

MB = 1024 * 1024
MAX_DOCUMENT = 16 * MB
# Random bytes: nothing along the way can compress them under the limit.
BIG = random.Random(20).randbytes(20 * MB)


async def test_big_value_and_write(api: Api) -> None:
    checkpoint = generate_checkpoint(
        channel_values={"big": BIG, "small": "s"}, channel_versions={"big": "1", "small": "1"}
    )
    stored = await api.put(
        generate_config("t"), checkpoint, generate_metadata(), {"big": "1", "small": "1"}
    )
    await api.put_writes(stored, [("big", BIG[::-1]), ("small", "w")], "task")

    for logical in (CHECKPOINTS, BLOBS, WRITES):
        for doc in await api.docs(logical):
            assert len(bson.encode(doc)) < MAX_DOCUMENT
    await assert_intact(api, "t")

    await api.copy_thread("t", "copy")
    await api.delete_thread("t")  # the copy does not share documents with the source
    assert await api.count(BLOBS, {"thread_id": "t"}) == 0
    assert await api.count(WRITES, {"thread_id": "t"}) == 0
    await assert_intact(api, "copy")


async def assert_intact(api: Api, thread_id: str) -> None:
    found = await api.get_tuple(generate_config(thread_id))
    assert found.checkpoint["channel_values"] == {"big": BIG, "small": "s"}
    assert found.pending_writes == [("task", "big", BIG[::-1]), ("task", "small", "w")]


async def test_special_write_shrinks(api: Api) -> None:
    """A special channel overwritten by a smaller value reads back the new value, although
    the earlier value had more parts than the new one."""
    checkpoint = generate_checkpoint()
    stored = await api.put(generate_config("t"), checkpoint, generate_metadata(), {})
    await api.put_writes(stored, [("__error__", BIG[: 9 * MB])], "task")  # two parts
    await api.put_writes(stored, [("__error__", "small error")], "task")
    found = await api.get_tuple(stored)
    assert found.pending_writes == [("task", "__error__", "small error")]
