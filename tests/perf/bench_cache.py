"""Node cache benchmark: mongo-ckpt's ``MongoDBCache`` vs LangGraph's ``SqliteCache`` and
``InMemoryCache``, in the same run.

Each cache holds 1,000 entries of a node with a ``CachePolicy`` (written by running the
graph on 1,000 inputs); then, ``--repeat`` times each:

- ``get`` of 20 of those keys (what a superstep of 20 cached tasks asks for);
- ``set`` of 20 pairs with a TTL;
- one run of the graph whose node's result is served from the cache.

Commands are round trips to MongoDB (wire commands counted by a PyMongo command listener on
``wire``, collection calls on ``mock``); for ``SqliteCache``, the SQL statements executed;
``InMemoryCache`` has none. Times are medians in milliseconds.

Run from the repository root (not collected by pytest; ``SqliteCache`` comes with the
``bench`` extra, ``langgraph-checkpoint-sqlite``)::

    python tests/perf/bench_cache.py [--backend mock|wire|both] [--repeat 50] [--write]

``--write`` puts the table into docs/cache.md between its benchmark markers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import mongomock  # noqa: E402
from langgraph.cache.memory import InMemoryCache  # noqa: E402
from langgraph.cache.sqlite import SqliteCache  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.types import CachePolicy  # noqa: E402
from pymongo import MongoClient, monitoring  # noqa: E402

from mongo_ckpt.cache import MongoDBCache  # noqa: E402
from mongo_ckpt.inprocess import patch_mongomock_bulk  # noqa: E402
from tests.backends import count_calls, stop_wire, total, wire_uri  # noqa: E402
from tests.perf.report import write_section  # noqa: E402

DOC = REPO / "docs" / "cache.md"
ENTRIES = 1000
BATCH = 20


class CommandCounter(monitoring.CommandListener):
    """Wire commands sent by the benchmark's client (each one is a round trip)."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class State(TypedDict, total=False):
    n: int
    out: str


def graph(cache: Any) -> Any:
    def work(state: State) -> State:
        return {"out": f"result {state['n']}"}

    builder = StateGraph(State)
    builder.add_node("work", work, cache_policy=CachePolicy(ttl=3600))
    builder.add_edge(START, "work")
    return builder.compile(cache=cache)


@dataclass
class Row:
    cache: str
    operation: str
    commands: float | None
    ms: float


def measure(repeat: int, run: Callable[[int], Any], count: Callable[[], int] | None) -> tuple[
    float | None, float
]:
    times, counts = [], []
    for i in range(repeat):
        before = count() if count else 0
        start = time.perf_counter()
        run(i)
        times.append((time.perf_counter() - start) * 1000)
        counts.append(count() - before if count else 0)
    return (statistics.median(counts) if count else None), statistics.median(times)


def bench(
    name: str, cache: Any, count: Callable[[], int] | None, repeat: int, entries: int
) -> list[Row]:
    compiled = graph(cache)
    for n in range(entries):  # the node's cached entries
        compiled.invoke({"n": n})
    keys = sorted(cache_keys(cache, compiled))
    assert len(keys) == entries, len(keys)

    def get(i: int) -> None:
        chosen = [keys[(i * BATCH + j) % entries] for j in range(BATCH)]
        assert len(cache.get(chosen)) == BATCH

    def set_(i: int) -> None:
        cache.set({(("bench", "set"), f"{i}-{j}"): ({"j": j}, 3600) for j in range(BATCH)})

    def cached_run(i: int) -> None:
        assert compiled.invoke({"n": i % entries})["out"] == f"result {i % entries}"

    rows = []
    for operation, run in ((f"get {BATCH} keys", get), (f"set {BATCH} pairs", set_),
                           ("graph run, node served from the cache", cached_run)):
        commands, ms = measure(repeat, run, count)
        rows.append(Row(name, operation, commands, ms))
    return rows


def cache_keys(cache: Any, compiled: Any) -> list[Any]:
    """The (namespace, key) of every entry the graph wrote, read back from the cache's own
    storage."""
    if isinstance(cache, MongoDBCache):
        return [(tuple(d["namespace"]), d["key"]) for d in cache.collection.find({})]
    if isinstance(cache, InMemoryCache):
        return [(ns, key) for ns, entries in cache._cache.items() for key in entries]
    rows = cache._conn.execute("SELECT ns, key FROM cache").fetchall()
    return [(tuple(ns.split(",")), key) for ns, key in rows]


def run_backend(backend: str, repeat: int, entries: int) -> list[Row]:
    rows: list[Row] = []
    if backend == "mock":
        patch_mongomock_bulk()
        cache: MongoDBCache[Any] = MongoDBCache(mongomock.MongoClient(), "bench_cache")
        cache.setup()
        counter = count_calls(cache.collections)
        rows += bench("MongoDBCache (mock)", cache, lambda: total(counter), repeat, entries)
    else:
        listener = CommandCounter()
        client: MongoClient[Any] = MongoClient(
            wire_uri(), directConnection=True, event_listeners=[listener]
        )
        client.drop_database("bench_cache")
        cache = MongoDBCache(client, "bench_cache")
        cache.setup()
        rows += bench("MongoDBCache (wire)", cache, lambda: listener.count, repeat, entries)
        client.drop_database("bench_cache")
        client.close()
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = SqliteCache(path=f"{tmp}/cache.db")
        statements: Counter[str] = Counter()
        sqlite._conn.set_trace_callback(lambda sql: statements.update(["sql"]))
        rows += bench("SqliteCache (file)", sqlite, lambda: statements["sql"], repeat, entries)
        sqlite._conn.close()
    rows += bench("InMemoryCache", InMemoryCache(), None, repeat, entries)
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| cache | operation | commands | ms (median) |", "|---|---|---:|---:|"]
    for row in rows:
        commands = "—" if row.commands is None else f"{row.commands:g}"
        lines.append(f"| {row.cache} | {row.operation} | {commands} | {row.ms:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["mock", "wire", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--entries", type=int, default=ENTRIES, help="cached entries (>= 20)")
    parser.add_argument("--write", action="store_true", help="update docs/cache.md")
    args = parser.parse_args()
    backends = ["mock", "wire"] if args.backend == "both" else [args.backend]
    sections = []
    try:
        for backend in backends:
            rows = run_backend(backend, args.repeat, args.entries)
            sections.append(f"**{backend}** ({args.entries} entries, {args.repeat} repeats)\n\n"
                            + table(rows))
    finally:
        stop_wire()
    text = "\n\n".join(sections)
    print(text)
    if args.write:
        write_section(DOC, "bench_cache", text)


if __name__ == "__main__":
    main()
