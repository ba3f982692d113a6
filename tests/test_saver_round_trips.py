"""Round-trip budget per operation, counted on the saver's collections (one method call
is one round trip), and ``list`` streaming page by page."""

from __future__ import annotations

from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from tests.backends import count_calls, total
from tests.saver_support import BOTH_PUT_PATHS, Api, put_chain, put_write_calls, values_at

ONE_AGGREGATE = {(CHECKPOINTS, "aggregate"): 1}


@BOTH_PUT_PATHS
async def test_put_and_put_writes(api: Api) -> None:
    configs = await put_chain(api, "t", 2)
    counter = count_calls(api.saver.collections)
    checkpoint = generate_checkpoint(
        channel_values={"a": 1, "b": 2, "c": 3}, channel_versions={"a": "1", "b": "1", "c": "1"}
    )
    new_versions = {"a": "1", "b": "1", "c": "1"}
    stored = await api.put(configs[-1], checkpoint, generate_metadata(), new_versions)
    # One command where the saver uses the client-level bulk write, else two.
    assert dict(counter) == put_write_calls(api.saver), counter

    counter.clear()
    await api.put(stored, generate_checkpoint(), generate_metadata(), {})
    assert dict(counter) == put_write_calls(api.saver, values=False), counter

    counter.clear()
    await api.put_writes(stored, [("a", 1), ("b", 2), ("__error__", "e")], "task")
    assert dict(counter) == {(WRITES, "bulk_write"): 1}


async def test_get_tuple(api: Api) -> None:
    configs = await put_chain(api, "t", 5, writes=True)
    counter = count_calls(api.saver.collections)
    latest = await api.get_tuple(generate_config("t"))
    assert dict(counter) == ONE_AGGREGATE, counter
    assert latest.checkpoint["channel_values"] == values_at(4, "t")
    assert latest.pending_writes == [("task-4", "w", "w4")]

    counter.clear()
    by_id = await api.get_tuple(configs[1])
    assert dict(counter) == ONE_AGGREGATE, counter
    assert by_id.checkpoint["channel_values"] == values_at(1, "t")

    counter.clear()
    assert await api.get_tuple(generate_config("missing")) is None
    assert dict(counter) == ONE_AGGREGATE, counter


async def test_list(api: Api) -> None:
    await put_chain(api, "t", 50, writes=True)
    counter = count_calls(api.saver.collections)
    page = await api.list(generate_config("t"), limit=10)
    assert total(counter) <= 3, counter
    assert [t.metadata["step"] for t in page] == list(range(49, 39, -1))
    assert all(
        t.pending_writes == [(f"task-{s}", "w", f"w{s}")] for s, t in zip(range(49, 39, -1), page)
    )

    counter.clear()
    everything = await api.list(generate_config("t"))
    assert len(everything) == 50
    assert [t.checkpoint["channel_values"] for t in everything] == [
        values_at(step, "t") for step in range(49, -1, -1)
    ]
    # A handful of queries for the whole history, not one (or more) per checkpoint.
    assert total(counter) <= 7, counter


async def test_delete_thread(api: Api) -> None:
    await put_chain(api, "t", 5, writes=True)
    await put_chain(api, "t", 3, ns="child", writes=True)
    counter = count_calls(api.saver.collections)
    await api.delete_thread("t")
    # By exact keys, as other maintenance (a put landing meanwhile keeps what it names):
    # the server's clock, tombstones, the look, marks on writes and values, the lease
    # re-check (clock and renewal), the checkpoints' delete, then the unneeded documents
    # (writes and values read, checkpoints read again, writes and values deleted), and the
    # thread's settings.
    assert total(counter) == 14, counter
    assert await api.counts() == {CHECKPOINTS: 0, BLOBS: 0, WRITES: 0}


async def test_list_streams(api: Api) -> None:
    await put_chain(api, "t", 60)
    counter = count_calls(api.saver.collections)
    stream = api.stream(generate_config("t"))
    first = await anext(stream)
    assert first.metadata["step"] == 59
    # Only the first page is loaded: its checkpoints, their values and their writes.
    assert dict(counter) == {(CHECKPOINTS, "find"): 1, (BLOBS, "find"): 1, (WRITES, "find"): 1}
    rest = [item async for item in stream]
    assert [t.metadata["step"] for t in rest] == list(range(58, -1, -1))
    assert counter[(BLOBS, "find")] > 1
    assert counter[(CHECKPOINTS, "find")] == 1
