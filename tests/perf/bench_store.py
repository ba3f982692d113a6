"""Store benchmark: mongo-ckpt's store vs langgraph-store-mongodb on the same backend.

Round trips (collection method calls, and wire commands where there is a wire) and
wall time for two batches, on each backend, for both stores in the same run:

- a mixed batch of 20 ops: 8 ``GetOp`` + 8 ``PutOp`` + 4 ``SearchOp`` (filter + prefix);
- 20 ``GetOp``s.

With ``--scale 1000,10000,50000`` it instead fills each store with that many items
(``users`` × 100 ``memories`` namespaces, in batches of 1,000 puts) and measures single
operations at that size: put (overwrite), get, search with a filter in one user's
namespace, vector search in one user's namespace and over every item (one namespace
prefix holding all of them; mongo-ckpt only: the official store needs Atlas
``$vectorSearch``),
list_namespaces (the first call after ingestion, which folds its batch documents and
settles the new namespaces' registry entries, and then the steady state; and of ``TEAMS``
namespaces that exist at every scale, one item each), and the 1,000-put ingestion batches.

With ``--put-shapes`` it measures what one 1,000-put ``bulk_write`` costs the wire
server (process CPU time) by write shape (inserts, plain upserts, update pipelines) and by
the indexes on the collection: where the ingestion time goes.

With ``--registry-writes`` it measures what the registry's writes add to one batch of 1,000
inserts into 10, 100 and 500 namespaces (the batches of the scaled benchmark at 1k, 10k and
50k items), on a collection with the store's indexes whose entries already exist: an entry
statement per namespace (before store layout 4, or a batch into few namespaces), against
one batch document naming them.

``--put-shapes`` and ``--ingest-indexes`` also measure the store's layout 4, whose registry
had two indexes of its own (``registry_levels``, ``registry_until``).

With ``--ingest-indexes 10000,50000`` it fills each store to that size as ``--scale`` does
and reports the median CPU time of its 1,000-put batches, for mongo-ckpt also with the
registry's own indexes of layout 4 added, and with ``prefix_recency`` dropped: what each
costs the ingestion.

With ``--vector-memory 1000,10000,50000`` it times one exact vector search over one
namespace of each size and measures the client's peak memory (``tracemalloc``) against a
SecantusDB server in its own process.

The in-process wire server sweeps TTL indexes every 60 seconds here, as mongod does (the
tests sweep every second).

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_store.py [--backend mock|wire|both] [--repeat 20] [--write]
    python tests/perf/bench_store.py --scale 1000,10000 [--backend wire] [--write]
    python tests/perf/bench_store.py --put-shapes [--repeat 5] [--write]
    python tests/perf/bench_store.py --registry-writes [--repeat 5] [--write]
    python tests/perf/bench_store.py --ingest-indexes 10000,50000 [--write]

``--write`` puts the table into docs/store.md between its benchmark markers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
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
from pymongo import IndexModel, MongoClient, UpdateOne, monitoring  # noqa: E402

from mongo_ckpt.calls import CLIENT  # noqa: E402
from mongo_ckpt.store import MongoDBStore, documents, registry  # noqa: E402
from tests import backends as test_backends  # noqa: E402
from tests.backends import CountingCollection, stop_wire, wire_uri  # noqa: E402
from tests.perf.report import write_section  # noqa: E402
from tests.perf.servers import server_process  # noqa: E402
from tests.store_support import DIMS, FakeEmbeddings  # noqa: E402

DOC = REPO / "docs" / "store.md"
PER_USER = 100  # memories per user namespace in the scaled benchmark
INGEST_BATCH = 1000
OFFICIAL = f"langgraph-store-mongodb {version('langgraph-store-mongodb')}"
USERS = 4
TEAMS = 10  # namespaces under ("teams",) at every scale: a listing of a fixed number of them
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


def _count(store: MongoDBStore, calls: Counter) -> None:
    """Count the calls on the store's collections and its client-level bulk writes."""
    for name in ("store", "registry", CLIENT):
        store.collections[name] = CountingCollection(store.collections[name], name, calls)


def make_store(name: str, backend: Backend, db: str) -> tuple[Any, Counter]:
    """A store on ``backend`` whose collection calls are counted."""
    calls: Counter = Counter()
    if name != OFFICIAL:
        ours = MongoDBStore(backend.client, db)
        ours.setup()
        _count(ours, calls)
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


# -- scaled: single operations on a store of 1k / 10k / 50k items -------------------


def user_ns(u: int) -> tuple[str, ...]:
    return ("users", f"u{u}", "memories")


def scaled_store(name: str, backend: Backend, db: str) -> tuple[Any, Counter]:
    calls: Counter = Counter()
    if name != OFFICIAL:
        index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}
        ours = MongoDBStore(backend.client, db, index=index, exact_search=True)  # type: ignore[arg-type]
        ours.setup()
        _count(ours, calls)
        return ours, calls
    return make_store(name, backend, db)


@dataclass
class ScaleRow:
    backend: str
    items: int
    operation: str
    store: str
    calls: float
    commands: float | None
    ms: float
    cpu_ms: float


def peak_kib(action: Callable[[], Any]) -> float:
    """The peak of Python's allocations while ``action`` runs, in KiB."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1] / 1024
    finally:
        tracemalloc.stop()


def vector_memory(sizes: list[int], limits: list[int]) -> str:
    """Time and client-side peak memory of one exact vector search over one namespace of
    each size, for each ``limit``: the table of ``--vector-memory``."""
    lines = [
        "| items in the namespace | limit | median ms (3 runs) | peak KiB (client) |",
        "|---:|---:|---:|---:|",
    ]
    with server_process() as uri:
        client: MongoClient = MongoClient(uri)
        for items in sizes:
            client.drop_database("bench_vectors")
            index = {"dims": DIMS, "embed": FakeEmbeddings(), "fields": ["text"]}
            store = MongoDBStore(client, "bench_vectors", index=index, exact_search=True)  # type: ignore[arg-type]
            for start in range(0, items, INGEST_BATCH):
                stop = min(start + INGEST_BATCH, items)
                store.batch([PutOp(("docs",), f"d{i}", value(i)) for i in range(start, stop)])
            for limit in limits:

                def search(store: Any = store, limit: int = limit) -> Any:
                    return store.search(("docs",), query="memory number 7", limit=limit)

                times = []
                for _ in range(3):
                    started = time.perf_counter()
                    search()
                    times.append((time.perf_counter() - started) * 1000)
                peak = peak_kib(search)
                lines.append(
                    f"| {items:,} | {limit} | {statistics.median(times):.0f} | {peak:,.0f} |"
                )
                print(lines[-1], flush=True)
        client.drop_database("bench_vectors")
        client.close()
    return "\n".join(lines)


def measure(
    backend: Backend, calls: Counter, action: Callable[[int], Any], repeat: int
) -> tuple[float, float | None, float, float]:
    """Collection calls and wire commands per run (mean over the runs), median ms and
    median process CPU ms (the client and, on wire, the in-process server: steadier than
    wall time on a shared machine)."""
    samples: list[float] = []
    cpu: list[float] = []
    calls.clear()
    before = backend.commands.count if backend.commands else 0
    for i in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        action(i)
        samples.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    commands = (backend.commands.count - before) / repeat if backend.commands else None
    return (
        sum(calls.values()) / repeat,
        commands,
        statistics.median(samples),
        statistics.median(cpu),
    )


def bench_scaled(backend: Backend, store_name: str, items: int, repeat: int) -> list[ScaleRow]:
    db = "bench_scale_" + "".join(c if c.isalnum() else "_" for c in store_name)
    backend.client.drop_database(db)
    store, calls = scaled_store(store_name, backend, db)
    users = max(1, items // PER_USER)
    puts = [PutOp(user_ns(i % users), f"m{i // users}", value(i)) for i in range(items)]
    batches = [puts[i : i + INGEST_BATCH] for i in range(0, items, INGEST_BATCH)]
    rows: list[ScaleRow] = []

    def row(operation: str, result: tuple[float, float | None, float]) -> None:
        rows.append(ScaleRow(backend.name, items, operation, store_name, *result))

    row(
        f"ingest: {INGEST_BATCH:,} puts in one batch",
        measure(backend, calls, lambda i: store.batch(batches[i]), len(batches)),
    )
    row(
        "put (overwrite)",
        measure(backend, calls, lambda i: store.put(user_ns(i % users), "m0", value(i)), repeat),
    )
    row(
        "get",
        measure(
            backend, calls, lambda i: store.get(user_ns(i % users), f"m{i % PER_USER}"), repeat
        ),
    )
    row(
        "search, filter, 1 user",
        measure(
            backend,
            calls,
            lambda i: store.search(user_ns(i % users)[:2], filter={"kind": "fact"}, limit=10),
            repeat,
        ),
    )
    if store_name != OFFICIAL:
        row(
            "vector search, 1 user",
            measure(
                backend,
                calls,
                lambda i: store.search(
                    user_ns(i % users)[:2], query=f"memory number {i}", limit=10
                ),
                repeat,
            ),
        )
    if store_name != OFFICIAL:

        def search_all(i: int) -> Any:
            return store.search(("users",), query=f"memory number {i}", limit=10)

        row(f"vector search, all {items:,} items", measure(backend, calls, search_all, 2))

    def listing(i: int) -> Any:
        return store.list_namespaces(prefix=("users",), max_depth=2, limit=100)

    if store_name != OFFICIAL:
        row("list_namespaces, first after ingestion", measure(backend, calls, listing, 1))
    store.batch([PutOp(("teams", f"t{t}"), "k", value(t)) for t in range(TEAMS)])
    store.list_namespaces(prefix=("teams",))  # settles the new entries (not timed)

    def teams(i: int) -> Any:
        return store.list_namespaces(prefix=("teams",), max_depth=2, limit=100)

    row("list_namespaces (depth 2, 100)", measure(backend, calls, listing, repeat))
    row(f"list_namespaces, {TEAMS} fixed namespaces", measure(backend, calls, teams, repeat))
    backend.client.drop_database(db)
    return rows


def scale_table(rows: list[ScaleRow]) -> str:
    lines = [
        "| backend | items | operation | store | calls/op | wire commands/op | median ms "
        "| median CPU ms |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        commands = "—" if r.commands is None else f"{r.commands:g}"
        lines.append(
            f"| {r.backend} | {r.items:,} | {r.operation} | {r.store} | {r.calls:g} "
            f"| {commands} | {r.ms:.2f} | {r.cpu_ms:.2f} |"
        )
    return "\n".join(lines)


# -- put shapes: what 1,000 upserts cost the wire server, by update shape and indexes -----


def official_put(i: int, now: Any) -> UpdateOne:
    """langgraph-store-mongodb's put (``MongoDBStore.batch`` without an index)."""
    ns = user_ns(i % 10)
    return UpdateOne(
        {"namespace_str": "/".join(ns), "key": f"m{i}"},
        {
            "$set": {"namespace_str": "/".join(ns), "value": value(i), "updated_at": now},
            "$setOnInsert": {"namespace": list(ns), "created_at": now},
        },
        upsert=True,
    )


def item(
    ns: tuple[str, ...], key: str, i: int, embeddings: FakeEmbeddings, now: Any
) -> dict[str, Any]:
    """The fields mongo-ckpt's put of ``value(i)`` stores (one indexed field, no TTL)."""
    vector = embeddings.embed_query(value(i)["text"])
    return documents.item_fields(ns, key, value(i), None, [("text", vector)], False, None, now)


def our_puts(shape: str) -> Callable[[Any], list[Any]]:
    """mongo-ckpt's 1,000 puts of the scaled benchmark (one indexed field, 32 dims), in one
    ``shape``: ``insert`` (a batch of new items), ``plain`` (upserts after the batch's
    revive statements) or ``pipeline`` (an update pipeline each)."""
    embeddings = FakeEmbeddings()

    def puts(now: Any) -> list[Any]:
        items = [(user_ns(i % 10), f"m{i}") for i in range(INGEST_BATCH)]
        revives = documents.revive_requests(items, now) if shape == "plain" else []
        fields = [item(ns, key, i, embeddings, now) for i, (ns, key) in enumerate(items)]
        if shape == "insert":
            return [documents.insert_request(f, now) for f in fields]
        return revives + [documents.put_request(f, now, shape == "plain") for f in fields]

    return puts


def cpu_ms(collection: Any, requests: list[Any]) -> float:
    """Process CPU milliseconds of one ordered ``bulk_write`` of ``requests``."""
    started = time.process_time()
    collection.bulk_write(requests, ordered=True)
    return (time.process_time() - started) * 1000


def put_shapes(repeat: int) -> str:
    """Process CPU time (the client and the in-process SecantusDB server: steadier than
    wall time on a shared machine) of one ordered ``bulk_write`` of 1,000 puts into a new
    collection, by write shape and by the secondary indexes on the collection."""
    items = documents.index_models()
    official = [IndexModel([("namespace_str", 1), ("key", 1)], unique=True)]
    cases: list[tuple[str, Callable[[Any], list[Any]], list[IndexModel]]] = [
        (OFFICIAL, lambda now: [official_put(i, now) for i in range(INGEST_BATCH)], official),
        ("mongo-ckpt, update pipelines (batches of 1–7 puts)", our_puts("pipeline"), items),
        ("mongo-ckpt, plain updates (after a refused insert)", our_puts("plain"), items),
        ("mongo-ckpt, inserts (batches of 8 puts or more)", our_puts("insert"), items),
        ("mongo-ckpt, inserts", our_puts("insert"), items[:1]),
    ]
    lines = ["| 1,000 puts | secondary indexes | median CPU ms |", "|---|---|---:|"]
    client: MongoClient = MongoClient(wire_uri(), directConnection=True)
    collection = client["bench_put_shapes"]["c"]
    try:
        for label, puts, indexes in cases:
            samples = []
            for _ in range(repeat):
                collection.drop()
                collection.create_indexes(indexes)
                samples.append(cpu_ms(collection, puts(documents.utc_now())))
            names = ", ".join(str(index.document["name"]) for index in indexes)
            median = statistics.median(samples)
            lines.append(f"| {label} | {len(indexes)}: {names} | {median:.0f} |")
            print(lines[-1], flush=True)
    finally:
        client.drop_database("bench_put_shapes")
        client.close()
    return "\n".join(lines)


def registry_writes(repeat: int) -> str:
    """Process CPU time of one ordered ``bulk_write`` of 1,000 inserts into ``n``
    namespaces, alone and with the registry's writes, on a collection with the store's
    indexes where the ``n`` entries already exist (the steady state of an ingestion)."""
    embeddings = FakeEmbeddings()
    lines = [
        "| namespaces in the batch | writes after the 1,000 inserts | median CPU ms |",
        "|---:|---|---:|",
    ]
    client: MongoClient = MongoClient(wire_uri(), directConnection=True)
    collection = client["bench_registry_writes"]["c"]

    def inserts(spaces: list[tuple[str, ...]], round_: int, now: Any) -> list[Any]:
        fields = [
            item(spaces[i % len(spaces)], f"m{round_}-{i}", i, embeddings, now)
            for i in range(INGEST_BATCH)
        ]
        return [documents.insert_request(f, now) for f in fields]

    def entries(spaces: list[tuple[str, ...]], round_: int) -> list[Any]:
        return [registry.put_request(ns, [documents.FOREVER]) for ns in spaces]

    def one_document(spaces: list[tuple[str, ...]], round_: int) -> list[Any]:
        return [*registry.batch_requests({ns: [documents.FOREVER] for ns in spaces})]

    writes: list[tuple[str, Callable[[list[tuple[str, ...]], int], list[Any]]]] = [
        ("none", lambda spaces, round_: []),
        ("an entry statement per namespace", entries),
        ("one batch document", one_document),
    ]
    try:
        for count in (10, 100, 500):
            spaces = [user_ns(u) for u in range(count)]
            for label, after in writes:
                collection.drop()
                collection.create_indexes(documents.index_models())
                collection.bulk_write(entries(spaces, 0))
                samples = []
                for round_ in range(repeat):
                    now = documents.utc_now()
                    requests = [*inserts(spaces, round_, now), *after(spaces, round_)]
                    samples.append(cpu_ms(collection, requests))
                lines.append(f"| {count} | {label} | {statistics.median(samples):.0f} |")
                print(lines[-1], flush=True)
    finally:
        client.drop_database("bench_registry_writes")
        client.close()
    return "\n".join(lines)


# mongo-ckpt's store with indexes added or dropped after setup: what each costs a batch
# of the scaled benchmark's puts (the listings and searches they serve are not run).
INDEX_VARIANTS: list[tuple[str, list[IndexModel], set[str]]] = [
    ("mongo-ckpt", [], set()),
    ("mongo-ckpt, without prefix_recency", [], {"prefix_recency"}),
]


def ingest_by_indexes(sizes: list[int]) -> str:
    """Median process CPU time of the scaled benchmark's 1,000-put batches while filling a
    store to each size, for langgraph-store-mongodb and for mongo-ckpt on other indexes."""
    lines = [
        "| items | store | secondary indexes | median CPU ms per 1,000 puts |",
        "|---:|---|---|---:|",
    ]
    db = "bench_ingest_indexes"
    with open_backend("wire") as backend:
        for items in sizes:
            for label, added, dropped in [(OFFICIAL, [], set()), *INDEX_VARIANTS]:
                backend.client.drop_database(db)
                store, _ = scaled_store(OFFICIAL if label == OFFICIAL else label, backend, db)
                collection = backend.client[db]["store"]
                if added:
                    collection.create_indexes(added)
                for name in dropped:
                    collection.drop_index(name)
                names = [i["name"] for i in collection.list_indexes() if i["name"] != "_id_"]
                users = max(1, items // PER_USER)
                puts = [
                    PutOp(user_ns(i % users), f"m{i // users}", value(i)) for i in range(items)
                ]
                samples = []
                for start in range(0, items, INGEST_BATCH):
                    started = time.process_time()
                    store.batch(puts[start : start + INGEST_BATCH])
                    samples.append((time.process_time() - started) * 1000)
                median = statistics.median(samples)
                lines.append(f"| {items:,} | {label} | {', '.join(names)} | {median:.0f} |")
                print(lines[-1], flush=True)
        backend.client.drop_database(db)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["mock", "wire", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="update docs/store.md")
    parser.add_argument("--scale", help="comma-separated item counts, e.g. 1000,10000,50000")
    parser.add_argument(
        "--put-shapes",
        action="store_true",
        help="CPU time of 1,000 upserts on the wire server by update shape and indexes",
    )
    parser.add_argument(
        "--registry-writes",
        action="store_true",
        help="CPU time the registry's writes add to 1,000 inserts on the wire server",
    )
    parser.add_argument(
        "--vector-memory",
        help="comma-separated namespace sizes: exact vector search time and client memory",
    )
    parser.add_argument(
        "--ingest-indexes",
        help="comma-separated item counts: ingestion CPU time on fewer of the store's indexes",
    )
    args = parser.parse_args()
    # The server's TTL monitor at mongod's default interval, not the tests' one second: each
    # of SecantusDB's sweeps decodes every document of a collection with a TTL index, which
    # would be counted against the store that has one (MongoDB walks the TTL index instead).
    test_backends.wire_ttl_sweep_seconds = 60.0
    sizes = [int(n) for n in (args.ingest_indexes or args.vector_memory or "0").split(",")]
    tables: list[tuple[Any, Callable[[], str], str]] = [
        (args.put_shapes, lambda: put_shapes(args.repeat), "bench_store_shapes"),
        (args.registry_writes, lambda: registry_writes(args.repeat), "bench_store_registry"),
        (args.ingest_indexes, lambda: ingest_by_indexes(sizes), "bench_store_indexes"),
        (args.vector_memory, lambda: vector_memory(sizes, [10, 100]), "bench_store_vectors"),
    ]
    for asked, make_table, marker in tables:
        if asked:
            try:
                text = make_table()
            finally:
                stop_wire()
            print(text)
            if args.write:
                write_section(DOC, marker, text)
            return
    backends = ["mock", "wire"] if args.backend == "both" else [args.backend]
    if args.scale:
        scaled: list[ScaleRow] = []
        try:
            for name in backends:
                with open_backend(name) as backend:
                    for items in (int(n) for n in args.scale.split(",")):
                        for store_name in ("mongo-ckpt", OFFICIAL):
                            scaled += bench_scaled(backend, store_name, items, args.repeat)
                            print(scale_table(scaled[-9:]), flush=True)
        finally:
            stop_wire()
        text = scale_table(scaled)
        print(text)
        if args.write:
            write_section(DOC, "bench_store_scale", text)
        return
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
        write_section(DOC, "bench_store", text)


if __name__ == "__main__":
    main()
