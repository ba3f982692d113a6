"""Store benchmark: mongo-ckpt's store vs langgraph-store-mongodb on the same backend.

Round trips (collection method calls, and wire commands where there is a wire) and
wall time for two batches, on each backend, for both stores in the same run:

- a mixed batch of 20 ops: 8 ``GetOp`` + 8 ``PutOp`` + 4 ``SearchOp`` (filter + prefix);
- 20 ``GetOp``s.

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_store.py [--backend mock|wire|both] [--repeat 20] [--write]

``--write`` puts the table into docs/store.md between its benchmark markers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import mongomock  # noqa: E402
from langgraph.store.base import GetOp, Op, PutOp, SearchOp  # noqa: E402
from langgraph.store.mongodb import MongoDBStore as OfficialStore  # noqa: E402
from mongo_ckpt.store import MongoDBStore  # noqa: E402
from pymongo import MongoClient, monitoring  # noqa: E402

from tests.backends import CountingCollection, stop_wire, wire_uri  # noqa: E402

DOC = REPO / "docs" / "store.md"
BEGIN, END = "<!-- bench_store:begin -->", "<!-- bench_store:end -->"
OFFICIAL = f"langgraph-store-mongodb {version('langgraph-store-mongodb')}"
USERS = 4
ITEMS = 16


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


class MockCollection:
    """mongomock's collection, taking ``create_index(keys=...)`` as the official store calls it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_index(self, keys: Any = None, **kwargs: Any) -> Any:
        if isinstance(keys, list):  # PyMongo takes bare field names, mongomock wants pairs
            keys = [(k, 1) if isinstance(k, str) else k for k in keys]
        return self._inner.create_index(keys, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@dataclass
class Backend:
    name: str
    client: Any
    commands: CommandCounter | None


@contextmanager
def open_backend(name: str) -> Iterator[Backend]:
    if name == "mock":
        yield Backend(name, mongomock.MongoClient(), None)
        return
    counter = CommandCounter()
    client: MongoClient = MongoClient(wire_uri(), directConnection=True, event_listeners=[counter])
    try:
        yield Backend(name, client, counter)
    finally:
        client.close()


def value(i: int) -> dict[str, Any]:
    return {"text": f"memory number {i}", "kind": "fact" if i % 2 else "preference", "n": i}


def namespace(i: int) -> tuple[str, ...]:
    return ("users", f"u{i % USERS}", "memories")


def mixed_batch(round_: int) -> list[Op]:
    ops: list[Op] = []
    for i in range(8):
        ops.append(GetOp(namespace(i), f"m{i}"))
        ops.append(PutOp(namespace(i), f"new{round_}-{i}", value(100 + i)))
    ops += [SearchOp(namespace(u), filter={"kind": "fact"}) for u in range(USERS)]
    return ops


def gets_batch(round_: int) -> list[Op]:
    return [GetOp(namespace(i), f"m{i % ITEMS}") for i in range(20)]


SCENARIOS: dict[str, Callable[[int], list[Op]]] = {
    "20 mixed ops (8 get, 8 put, 4 search)": mixed_batch,
    "20 gets": gets_batch,
}


def make_store(name: str, backend: Backend, db: str) -> tuple[Any, Counter]:
    """A store on ``backend`` whose collection calls are counted."""
    calls: Counter = Counter()
    if name != OFFICIAL:
        ours = MongoDBStore(backend.client, db)
        ours.setup()
        ours.collections["store"] = CountingCollection(ours.collections["store"], "store", calls)
        return ours, calls
    collection = backend.client[db]["store"]
    if backend.name == "mock":
        collection = MockCollection(collection)
    official = OfficialStore(collection)
    official.collection = CountingCollection(official.collection, "store", calls)
    return official, calls


@dataclass
class Row:
    backend: str
    scenario: str
    store: str
    calls: int
    commands: int | None
    ms: float


def bench(backend: Backend, store_name: str, repeat: int) -> list[Row]:
    db = "bench_store_" + "".join(c if c.isalnum() else "_" for c in store_name)
    backend.client.drop_database(db)
    store, calls = make_store(store_name, backend, db)
    store.batch([PutOp(namespace(i), f"m{i}", value(i)) for i in range(ITEMS)])
    rows = []
    for scenario, make_ops in SCENARIOS.items():
        samples, counts, commands = [], set(), set()
        for round_ in range(repeat):
            ops = make_ops(round_)
            calls.clear()
            before = backend.commands.count if backend.commands else 0
            start = time.perf_counter()
            results = store.batch(ops)
            samples.append((time.perf_counter() - start) * 1000)
            assert len(results) == len(ops)
            counts.add(sum(calls.values()))
            if backend.commands:
                commands.add(backend.commands.count - before)
        assert len(counts) == 1 and len(commands) <= 1, "round trips must be deterministic"
        rows.append(
            Row(
                backend.name,
                scenario,
                store_name,
                counts.pop(),
                commands.pop() if commands else None,
                statistics.median(samples),
            )
        )
    backend.client.drop_database(db)
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| backend | batch | store | collection calls | wire commands | median ms |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        commands = "—" if r.commands is None else str(r.commands)
        lines.append(
            f"| {r.backend} | {r.scenario} | {r.store} | {r.calls} | {commands} | {r.ms:.2f} |"
        )
    return "\n".join(lines)


def write(text: str) -> None:
    doc = DOC.read_text()
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["mock", "wire", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="update docs/store.md")
    args = parser.parse_args()
    backends = ["mock", "wire"] if args.backend == "both" else [args.backend]
    rows: list[Row] = []
    try:
        for name in backends:
            with open_backend(name) as backend:
                for store_name in ("mongo-ckpt", OFFICIAL):
                    rows += bench(backend, store_name, args.repeat)
    finally:
        stop_wire()
    text = table(rows)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
