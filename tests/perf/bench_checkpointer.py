"""Checkpointer benchmark: mongo-ckpt vs langgraph-checkpoint-mongodb on the same backend.

For each backend, each state variant (plain ``add_messages`` and ``DeltaChannel``) and each
saver (mongo-ckpt with and without list deltas, mongo-ckpt with ``client_bulk_write=False``
where its saver takes that keyword, and the official saver), runs one long conversation
(``graph.invoke`` per turn, ~1 KB human message and ~1 KB AI reply). At each reported turn
count (``--turns 200 400``: one run of the largest, measured on the way) it reports stored
bytes, the largest document, documents read by ``graph.get_state`` and bytes sent to the
server in that turn; after the run, collection calls per saver operation (and wire commands,
where there is a wire), each mongo-ckpt row's put path (MongoDB 8.0's client-level
``bulkWrite``, or one command per collection), commands per turn and wall time per turn over
turns 30–50 and over the last 20 turns before each reported count. The backend's header says
whether the server supports client-level ``bulkWrite`` (``hello``'s ``maxWireVersion`` ≥ 25;
mongomock does not). ``--plot`` draws stored bytes against turns (matplotlib, in the
``bench`` extra).

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_checkpointer.py [--backend mock|wire|mongodb|both]
        [--turns 200 400] [--write [docs/benchmarks.md]] [--plot [docs/bench-stored-bytes.png]]
"""

import argparse
import datetime
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import bson  # noqa: E402
import mongomock  # noqa: E402
from pymongo import MongoClient, monitoring  # noqa: E402
from pymongo.errors import OperationFailure  # noqa: E402

from tests.backends import MONGODB_URI, stop_wire, wire_uri  # noqa: E402
from tests.perf.conversation import (  # noqa: E402
    MONGO_CKPT,
    MONGO_CKPT_TWO_COMMANDS,
    OFFICIAL,
    PLAIN,
    SAVERS,
    SNAPSHOT_FREQUENCY,
    VARIANTS,
    Footprint,
    chat_graph,
    footprint,
    make_saver,
    run_turn,
    saver_collections,
    takes_client_bulk_write,
    total_bytes,
    wrap_collections,
)
from tests.perf.report import write_section  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "bench-stored-bytes.png"
SAMPLE_EVERY = 25
MARKER = "bench_checkpointer"
THREAD = "conversation"
WARMUP_TURNS = 3
PROGRESS_EVERY = 25
EARLY = (30, 50)  # a window of turns, numbered from 0, end excluded
LATE = 20  # turns before each reported count
CLIENT_BULK_WRITE_WIRE_VERSION = 25  # MongoDB 8.0: the client-level bulkWrite command
# Saver methods metered while the graph runs; nested calls count towards the outermost.
RUN_OPS = ("put", "put_writes", "get_tuple", "get_delta_channel_history")
OP_COLUMNS = (
    "put",
    "put_writes",
    "get_tuple",
    "get_delta_channel_history",
    "list(limit=10)",
    "get_state",
    "get_state, one back",
    "delete_thread",
)


@dataclass
class Frame:
    calls: int = 0
    commands: int = 0
    docs_read: int = 0


class Meter:
    """Collection calls and wire commands per saver operation.

    Attribution is per thread: LangGraph runs ``put``/``put_writes`` in a background
    thread while the main thread goes on, so a global counter would mix operations.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self.samples: dict[str, list[Frame]] = defaultdict(list)
        self.total = Frame()
        self.bytes_sent = 0
        self.put_commands: Counter[str] = Counter()  # command name: times sent by a put

    def _frame(self) -> Frame | None:
        return getattr(self._local, "frame", None)

    def on_call(self) -> None:
        with self._lock:
            self.total.calls += 1
        if frame := self._frame():
            frame.calls += 1

    def on_command(self, size: int, name: str) -> None:
        with self._lock:
            self.total.commands += 1
            self.bytes_sent += size
        if frame := self._frame():
            frame.commands += 1
            if self._local.op == "put":
                self.put_commands[name] += 1

    def on_reply(self, docs: int) -> None:
        if frame := self._frame():
            frame.docs_read += docs

    def measure(self, op: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as one sample of ``op`` (inside another sample it adds to that one)."""
        if self._frame() is not None:
            return fn()
        frame = Frame()
        self._local.frame, self._local.op = frame, op
        try:
            return fn()
        finally:
            self._local.frame = self._local.op = None
            self.samples[op].append(frame)

    def attach(self, saver: Any) -> None:
        """Meter ``saver``'s collections and the operations in ``RUN_OPS``."""
        wrap_collections(saver, lambda _name, coll: MeteredCollection(coll, self))
        for op in RUN_OPS:
            method = getattr(saver, op)
            setattr(saver, op, self._metered(op, method))

    def _metered(self, op: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def metered(*args: Any, **kwargs: Any) -> Any:
            return self.measure(op, lambda: method(*args, **kwargs))

        return metered


class MeteredCollection:
    """Delegates to a collection; each method call is one collection call for the meter."""

    def __init__(self, inner: Any, meter: Meter) -> None:
        self._inner, self._meter = inner, meter

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._meter.on_call()
            return value(*args, **kwargs)

        return call


class CommandCounter(monitoring.CommandListener):
    """Feeds every command the driver sends to the current meter."""

    meter: Meter | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.meter is not None:
            self.meter.on_command(len(bson.encode(event.command)), event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") or {}
        if self.meter is not None and cursor:
            self.meter.on_reply(len(cursor.get("firstBatch", cursor.get("nextBatch", []))))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@dataclass
class Snapshot:
    """The thread after ``turns`` turns."""

    turns: int
    stored: int
    largest: int
    get_state: Frame
    sent_in_turn: int


@dataclass
class Result:
    variant: str
    saver: str
    turns: int
    footprint: dict[str, Footprint]
    coll_stats: dict[str, int | None]
    samples: dict[str, list[Frame]]
    total: Frame
    put_path: str = "–"
    turn_ms: list[float] = field(default_factory=list)
    turn_commands: list[int] = field(default_factory=list)  # wire commands, or calls on mock
    snapshots: list[Snapshot] = field(default_factory=list)
    series: list[tuple[int, int]] = field(default_factory=list)  # (turns, stored bytes)


@dataclass
class Backend:
    name: str
    client: Any
    description: str
    commands: CommandCounter | None  # None: in process, no wire commands to count
    client_bulk_write: str  # whether the server has client-level bulkWrite, and why


def open_backend(name: str) -> Backend:
    if name == "mock":
        return Backend(
            name,
            mongomock.MongoClient(),
            f"mongomock {version('mongomock')}",
            None,
            "no (mongomock has neither `hello` nor client-level `bulk_write`)",
        )
    listener = CommandCounter()
    if name == "wire":
        client = MongoClient(wire_uri(), directConnection=True, event_listeners=[listener])
        description = f"SecantusDB {version('secantusdb')} in process, over the wire"
    else:
        if not MONGODB_URI:
            raise SystemExit("--backend mongodb needs MONGODB_URI")
        client = MongoClient(MONGODB_URI, event_listeners=[listener])
        description = "MongoDB at MONGODB_URI"
    wire_version = client.admin.command("hello").get("maxWireVersion", 0)
    supported = wire_version >= CLIENT_BULK_WRITE_WIRE_VERSION
    capability = (
        f"{'yes' if supported else 'no'} (`hello` `maxWireVersion` {wire_version}, "
        f"{'≥' if supported else '<'} {CLIENT_BULK_WRITE_WIRE_VERSION})"
    )
    description = f"{description}, PyMongo {version('pymongo')}"
    return Backend(name, client, description, listener, capability)


def saver_names() -> list[str]:
    """The savers of one run: the forced two-command put only where the saver takes it."""
    names = list(SAVERS)
    if takes_client_bulk_write():
        names.insert(names.index(MONGO_CKPT) + 1, MONGO_CKPT_TWO_COMMANDS)
    return names


def put_path(backend: Backend, saver_name: str, meter: Meter) -> str:
    """How the saver's puts reached the server: the commands seen on a wire, else the only
    path mongomock has; and whether the saver chose it or was told to."""
    if saver_name == OFFICIAL:
        return "–"
    if backend.commands is None:
        path = "one call per collection"
    elif meter.put_commands["bulkWrite"]:
        path = "client bulkWrite"
    else:
        path = "one command per collection"
    if saver_name == MONGO_CKPT_TWO_COMMANDS:
        return f"{path} (forced)"
    if not takes_client_bulk_write():
        return f"{path} (saver without client_bulk_write)"
    return f"{path} (detected)"


def coll_stats_size(collection: Any) -> int | None:
    """``collStats`` size, where the backend implements it."""
    try:
        return int(collection.database.command({"collStats": collection.name})["size"])
    except (NotImplementedError, OperationFailure):  # mongomock has no collStats
        return None


def stored_bytes(collection: Any) -> tuple[int, int]:
    """Total and largest ``len(bson.encode(doc))``, summed by the server where it can."""
    sizes = {"$bsonSize": "$$ROOT"}
    try:
        row = next(
            collection.aggregate(
                [{"$group": {"_id": None, "b": {"$sum": sizes}, "m": {"$max": sizes}}}]
            ),
            {"b": 0, "m": 0},
        )
        return int(row["b"]), int(row["m"])
    except OperationFailure:  # mongomock has no $bsonSize
        f = footprint(collection)
        return f.bytes, f.largest


def bench(backend: Backend, variant: str, saver_name: str, report_at: list[int]) -> Result:
    """One saver, one conversation of ``max(report_at)`` turns, on a fresh database."""
    turns = max(report_at)
    client = backend.client
    db_name = re.sub(r"\W+", "_", f"bench_{variant}_{saver_name}")
    client.drop_database(db_name)
    saver = make_saver(saver_name, client, db_name)
    collections = saver_collections(saver)
    graph = chat_graph(saver, variant)
    for turn in range(WARMUP_TURNS):
        run_turn(graph, "warm-up", turn)
    saver.delete_thread("warm-up")

    meter = Meter()
    meter.attach(saver)
    result = Result(variant, saver_name, turns, {}, {}, meter.samples, Frame())
    config = {"configurable": {"thread_id": THREAD}}
    wire = backend.commands is not None
    for turn in range(1, turns + 1):
        sent_before = meter.bytes_sent
        before = meter.total.commands if wire else meter.total.calls
        with metering(backend, meter):
            start = time.perf_counter()
            run_turn(graph, THREAD, turn - 1)
            result.turn_ms.append((time.perf_counter() - start) * 1000)
        result.turn_commands.append((meter.total.commands if wire else meter.total.calls) - before)
        if turn % PROGRESS_EVERY == 0:
            print(f"  turn {turn}: {result.turn_ms[-1]:.0f} ms", file=sys.stderr, flush=True)
        if turn % SAMPLE_EVERY and turn not in report_at:
            continue
        sizes = [stored_bytes(coll) for coll in collections.values()]
        result.series.append((turn, sum(b for b, _ in sizes)))
        if turn in report_at:
            # A meter of its own: the state load is not part of the turn's counts.
            loads, calls = Meter(), meter.total.calls
            with metering(backend, loads):
                loads.measure("get_state", lambda: graph.get_state(config))
            meter.total.calls = calls
            result.snapshots.append(
                Snapshot(
                    turn,
                    result.series[-1][1],
                    max(m for _, m in sizes),
                    loads.samples["get_state"][0],
                    meter.bytes_sent - sent_before,
                )
            )
    result.total = Frame(meter.total.calls, meter.total.commands)
    result.put_path = put_path(backend, saver_name, meter)

    result.footprint = {name: footprint(coll) for name, coll in collections.items()}
    result.coll_stats = {name: coll_stats_size(coll) for name, coll in collections.items()}
    with metering(backend, meter):
        state = meter.measure("get_state", lambda: graph.get_state(config))
        # The checkpoint before the latest: at a multiple of the snapshot frequency the latest
        # one holds a DeltaChannel snapshot, and this one is the deepest to rebuild.
        meter.measure("get_state, one back", lambda: graph.get_state(state.parent_config))
        meter.measure("list(limit=10)", lambda: list(saver.list(config, limit=10)))
        meter.measure("delete_thread", lambda: saver.delete_thread(THREAD))
    if (rebuilt := len(state.values["messages"])) != 2 * turns:
        raise AssertionError(f"{saver_name} rebuilt {rebuilt} messages, not {2 * turns}")
    client.drop_database(db_name)
    return result


@contextmanager
def metering(backend: Backend, meter: Meter) -> Iterator[None]:
    if backend.commands is not None:
        backend.commands.meter = meter
    try:
        yield
    finally:
        if backend.commands is not None:
            backend.commands.meter = None


# -- report ------------------------------------------------------------------------------


def _size(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    return f"{n / 1024:.1f} KiB"


def _ratio(part: int, whole: int) -> str:
    r = part / whole
    return f"{r:.2f}×" if r >= 0.1 else f"1/{1 / r:.0f}"


def _spread(values: list[int]) -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    if low == high:
        return str(low)
    return f"{statistics.fmean(values):.1f} ({low}–{high})"


def _ops_cell(result: Result, op: str, wire: bool) -> str:
    frames = result.samples.get(op, [])
    calls = _spread([f.calls for f in frames])
    return f"{calls} / {_spread([f.commands for f in frames])}" if wire and frames else calls


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def report(backend: Backend, results: list[Result]) -> str:
    turns = results[0].turns
    wire = backend.commands is not None
    names = sorted({name for r in results for name in r.footprint}, key=_COLLECTION_ORDER.index)
    baseline = next(
        total_bytes(r.footprint) for r in results if (r.variant, r.saver) == (PLAIN, OFFICIAL)
    )
    storage = []
    for r in results:
        largest = max(r.footprint.items(), key=lambda item: item[1].largest)
        cells = [
            f"{_size(r.footprint[n].bytes)} ({r.footprint[n].docs})" if n in r.footprint else "–"
            for n in names
        ]
        stats = [s for s in r.coll_stats.values() if s is not None]
        storage.append(
            [
                r.variant,
                r.saver,
                *cells,
                _size(total_bytes(r.footprint)),
                f"{_size(largest[1].largest)} ({largest[0]})",
                _size(sum(stats)) if stats else "n/a",
                _ratio(total_bytes(r.footprint), baseline),
            ]
        )
    calls_header = "collection calls / wire commands" if wire else "collection calls"
    counted = "wire commands" if wire else "collection calls"
    ops = [
        [
            r.variant,
            r.saver,
            *(_ops_cell(r, op, wire) for op in OP_COLUMNS),
            f"{r.total.calls / turns:.1f}" + (f" / {r.total.commands / turns:.1f}" if wire else ""),
        ]
        for r in results
    ]
    return "\n\n".join(
        [
            f"#### Backend `{backend.name}`: {backend.description}",
            f"{turns} turns on one thread; "
            f"`DeltaChannel(snapshot_frequency={SNAPSHOT_FREQUENCY})`. "
            "Server supports MongoDB 8.0's client-level `bulkWrite`: "
            f"{backend.client_bulk_write}.",
            "**Growth and traffic** (at each reported turn count: stored bytes, largest document, "
            "documents read and commands sent by `graph.get_state`, bytes of the commands sent "
            "in that turn; ratios against `langgraph-checkpoint-mongodb` with `add_messages`):",
            growth_table(results, wire),
            f"**Stored bytes after {turns} turns** (sum of `len(bson.encode(doc))`; documents "
            "in brackets):",
            _table(
                [
                    "state",
                    "saver",
                    *names,
                    "total",
                    "largest document",
                    "collStats size",
                    "vs official, add_messages",
                ],
                storage,
            ),
            f"**Round trips per operation** ({calls_header}; mean (min–max) when they vary):",
            _table(["state", "saver", *OP_COLUMNS, "per turn"], ops),
            f"**Commands and wall time per turn** ({counted} per turn, mean over the "
            "conversation; wall time of `graph.invoke` in ms, default "
            f"durability, mean over turns {EARLY[0]}–{EARLY[1]} and over the last {LATE} turns "
            f"before each reported count, turns numbered from 0):",
            timing_table(results, wire),
        ]
    )


def timing_table(results: list[Result], wire: bool) -> str:
    counts = [snap.turns for snap in results[0].snapshots]
    header = ["state", "saver", "put path", "commands per turn" if wire else "calls per turn"]
    header += [f"turns {EARLY[0]}–{EARLY[1]}", *(f"last {LATE} of {n}" for n in counts)]
    rows = []
    for r in results:
        windows = [EARLY, *((n - LATE, n) for n in counts)]
        rows.append(
            [
                r.variant,
                r.saver,
                r.put_path,
                f"{statistics.fmean(r.turn_commands):.1f}",
                *(
                    f"{statistics.fmean(r.turn_ms[start:end]):.1f}"
                    if start >= 0 and end <= len(r.turn_ms)
                    else "–"
                    for start, end in windows
                ),
                f"{sum(r.turn_ms) / 1000:.1f}",
            ]
        )
    return _table([*header, "total s"], rows)


def growth_table(results: list[Result], wire: bool) -> str:
    official = next(r for r in results if (r.variant, r.saver) == (PLAIN, OFFICIAL))
    base = {snap.turns: snap for snap in official.snapshots}
    rows = []
    for r in results:
        for snap in r.snapshots:
            load = snap.get_state
            rows.append(
                [
                    r.variant,
                    r.saver,
                    str(snap.turns),
                    f"{_size(snap.stored)} ({_ratio(snap.stored, base[snap.turns].stored)})",
                    _size(snap.largest),
                    f"{load.docs_read} / {load.commands}" if wire else "n/a",
                    (
                        f"{_size(snap.sent_in_turn)} "
                        f"({_ratio(snap.sent_in_turn, base[snap.turns].sent_in_turn)})"
                    )
                    if wire
                    else "n/a",
                ]
            )
        first, last = r.snapshots[0], r.snapshots[-1]
        if last.turns != first.turns:
            rows[-1][3] += f"; ×{last.stored / first.stored:.2f} from {first.turns} turns"
    return _table(
        [
            "state",
            "saver",
            "turns",
            "stored (vs official)",
            "largest document",
            "get_state: docs read / commands",
            "sent in that turn (vs official)",
        ],
        rows,
    )


def plot(results: list[Result], backend: str, path: Path) -> None:
    """Stored bytes against turns, one line per state variant and saver."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        turns, stored = zip(*r.series)
        style = "-" if r.variant == PLAIN else "--"
        ax.plot(turns, [b / (1 << 20) for b in stored], style, label=f"{r.saver}, {r.variant}")
    ax.set_xlabel("turns (one thread)")
    ax.set_ylabel("stored MiB (sum of BSON document sizes)")
    ax.set_xscale("log")
    ax.set_yscale("log")  # log-log: slope 1 is linear growth, slope 2 quadratic
    ax.set_title(f"Stored bytes of one thread against its turns (backend {backend}, log-log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_COLLECTION_ORDER = ["checkpoints", "blobs", "writes"]


def write_doc(path: Path, backend: str, section: str) -> None:
    """Replace the generated section of ``backend`` in ``path`` (append it if missing)."""
    write_section(path, f"{MARKER}:{backend}", section)


def provenance() -> str:
    """The command line, date, code version and library versions of this run."""
    command = " ".join(["python tests/perf/bench_checkpointer.py", *sys.argv[1:]])
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "mongo_ckpt"], capture_output=True)
    code = f"mongo-ckpt {commit.stdout.strip() or 'unknown commit'}"
    if dirty.stdout.strip():
        code += " with uncommitted changes"
    versions = ", ".join(
        f"{p} {version(p)}"
        for p in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-mongodb", "pymongo")
    )
    return (
        f"Generated by `{command}` on {datetime.date.today().isoformat()}: {code}; "
        f"Python {sys.version.split()[0]}, {versions}."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("mock", "wire", "mongodb", "both"), default="both")
    parser.add_argument(
        "--turns",
        type=int,
        nargs="+",
        default=[200, 400],
        help="turn counts to report (one run of the largest)",
    )
    parser.add_argument(
        "--write",
        nargs="?",
        const=DOC,
        type=Path,
        metavar="PATH",
        help=f"also write the tables into PATH (default {DOC.relative_to(REPO)})",
    )
    parser.add_argument(
        "--plot",
        nargs="?",
        const=PLOT,
        type=Path,
        metavar="PNG",
        help=f"draw stored bytes against turns (default {PLOT.relative_to(REPO)};"
        " with two backends, the backend's name is added)",
    )
    args = parser.parse_args(argv)
    try:
        for name in ("mock", "wire") if args.backend == "both" else (args.backend,):
            backend = open_backend(name)
            results = []
            for variant in VARIANTS:
                for saver_name in saver_names():
                    print(f"[{name}] {variant} / {saver_name} ...", file=sys.stderr, flush=True)
                    results.append(bench(backend, variant, saver_name, sorted(args.turns)))
            backend.client.close()
            if args.plot:
                path = args.plot
                if args.backend == "both":
                    path = path.with_name(f"{path.stem}-{name}{path.suffix}")
                plot(results, name, path)
                print(f"wrote {path}", file=sys.stderr)
            section = f"{report(backend, results)}\n\n{provenance()}"
            print(section + "\n", flush=True)
            if args.write:
                write_doc(args.write, name, section)
                print(f"wrote {args.write}", file=sys.stderr)
    finally:
        stop_wire()


if __name__ == "__main__":
    main()
