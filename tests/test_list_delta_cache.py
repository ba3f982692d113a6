"""The list-delta chains one saver instance remembers (``memory.CheckpointMemory``):
compact digests, a byte budget, least recently used threads evicted first, and deltas
still formed for the threads it holds."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from mongo_ckpt.listdelta import DIGEST_SIZE, LINK_BYTES, Plan, plan
from mongo_ckpt.memory import THREAD_BYTES, CheckpointMemory

SERDE = JsonPlusSerializer()
MESSAGES = 2000
THREADS = 160
PER_THREAD = THREAD_BYTES + MESSAGES * DIGEST_SIZE + 2 * LINK_BYTES  # after two versions


def memory(cache_bytes: int | None = None) -> CheckpointMemory:
    """A saver instance's memory."""
    return CheckpointMemory() if cache_bytes is None else CheckpointMemory(cache_bytes=cache_bytes)


def put(deltas: CheckpointMemory, thread: str, step: int, size: int) -> Plan:
    """Plan and record checkpoint ``step`` of ``thread``: a list of ``size`` strings, the
    previous step's list with elements appended."""
    value = [f"{thread} message {i} " + "x" * 40 for i in range(size)]
    version = f"{step + 1:08}"
    parent = f"c{step - 1}" if step else None
    key = (thread, "", f"c{step}")
    usable, enabled = deltas.usable(key, parent), deltas.deltas_wanted
    made = plan(usable, enabled, {"m": value}, {"m": version}, {"m": version}, SERDE, None)
    deltas.wrote(key, made)
    return made


def grow(deltas: CheckpointMemory, thread: str, steps: int = 2) -> list[Plan]:
    """``steps`` versions of ``thread``, the last with ``MESSAGES`` elements."""
    return [put(deltas, thread, step, MESSAGES - steps + 1 + step) for step in range(steps)]


def test_a_long_thread_costs_one_compact_digest_per_element() -> None:
    deltas = memory()
    plans = grow(deltas, "t", steps=4)
    assert [bool(p.deltas) for p in plans] == [False, True, True, True]
    links = len(plans[-1].links["m"].links)  # the 4th version: from the 1st, 3rd and itself
    assert links == 3
    assert deltas.cached_bytes == THREAD_BYTES + MESSAGES * DIGEST_SIZE + links * LINK_BYTES


def test_many_long_threads_stay_within_the_byte_budget() -> None:
    budget = 2**20
    deltas = memory(budget)
    per_thread = PER_THREAD
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(THREADS):
            grow(deltas, f"t{n}")
            assert deltas.cached_bytes <= budget
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert budget - per_thread < deltas.cached_bytes <= budget
    # The accounting covers what the cache really holds (Python's own sizes included).
    assert held <= budget * 1.25, held
    kept = budget // per_thread
    # The most recent threads still form deltas; the least recently used were evicted.
    assert put(deltas, f"t{THREADS - 1}", 2, MESSAGES + 1).deltas
    assert not put(deltas, "t0", 2, MESSAGES + 1).deltas
    assert not put(deltas, f"t{THREADS - 1 - kept}", 2, MESSAGES + 1).deltas


def test_a_read_thread_is_used_recently() -> None:
    deltas = memory(3 * PER_THREAD + PER_THREAD // 2)
    for n in range(3):
        grow(deltas, f"t{n}")
    assert put(deltas, "t0", 2, MESSAGES + 1).deltas  # t0 becomes the most recent
    grow(deltas, "t3")  # evicts t1, the least recently used
    assert not put(deltas, "t1", 2, MESSAGES + 1).deltas
    assert put(deltas, "t0", 3, MESSAGES + 2).deltas


def test_a_chain_larger_than_the_budget_is_not_kept() -> None:
    deltas = memory(1000)
    plans: list[Any] = grow(deltas, "t")
    assert deltas.cached_bytes == 0
    assert not any(p.deltas for p in plans)

