"""DeltaChannel turn time: mongo-ckpt vs langgraph-checkpoint-mongodb over a long conversation.

Runs the conversation of ``tests/perf/conversation.py`` (``graph.invoke`` per turn, ~1 KB
human message and ~1 KB reply, ``DeltaChannel(snapshot_frequency=100)``) through each saver
on the same backend, and reports the wall time per turn over windows of turns, e.g. early
(30–50) and late (380–400) in a 400-turn thread. Every turn loads the state first, which
rebuilds the DeltaChannel from its history. ``--unbounded`` adds mongo-ckpt with the walk
bounded only by LangGraph's 5001-step limit (as before the walk used the snapshot counters);
``--walk`` adds mongo-ckpt reading history by the ``$graphLookup`` walk alone (as before the
range read). ``--other-threads N`` first stores N copies of a 20-turn thread in the same
collections, so a read whose cost follows the collection shows it.

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_delta_turns.py [--backend wire|mock|mongodb] [--turns 400]
        [--windows 30-50,380-400] [--unbounded] [--walk] [--other-threads N]
        [--write [docs/benchmarks.md]]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import mongomock  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from pymongo import MongoClient  # noqa: E402

from mongo_ckpt import operations  # noqa: E402
from mongo_ckpt.memory import CheckpointMemory  # noqa: E402
from tests.backends import MONGODB_URI, stop_wire, wire_uri  # noqa: E402
from tests.perf.conversation import (  # noqa: E402
    DELTA,
    MONGO_CKPT,
    OFFICIAL,
    SNAPSHOT_FREQUENCY,
    chat_graph,
    count_saver_calls,
    make_saver,
    run_turn,
)
from tests.perf.report import write_section  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
MARKER = "bench_delta_turns"
THREAD = "conversation"
WARMUP_TURNS = 3
PROGRESS_EVERY = 50
UNBOUNDED = f"{MONGO_CKPT}, unbounded walk"
WALK = f"{MONGO_CKPT}, $graphLookup walk"
OTHER_TURNS = 20


@dataclass
class Result:
    saver: str
    turn_ms: list[float] = field(default_factory=list)
    history_calls: list[int] = field(default_factory=list)  # collection calls per history load

    def window(self, start: int, stop: int) -> list[float]:
        return self.turn_ms[start:stop]


def open_client(backend: str) -> tuple[Any, str]:
    if backend == "mock":
        return mongomock.MongoClient(), f"mongomock {version('mongomock')}"
    if backend == "wire":
        client = MongoClient(wire_uri(), directConnection=True)
        return client, f"SecantusDB {version('secantusdb')} in process, over the wire"
    if not MONGODB_URI:
        raise SystemExit("--backend mongodb needs MONGODB_URI")
    return MongoClient(MONGODB_URI), "MongoDB at MONGODB_URI"


def history_walk(saver: BaseCheckpointSaver) -> str:
    """How ``saver`` rebuilds DeltaChannel history."""
    own = type(saver).get_delta_channel_history
    if own is BaseCheckpointSaver.get_delta_channel_history:
        return "BaseCheckpointSaver's default: one get_tuple per ancestor up to the seed"
    return "its own override"


def fill(client: Any, db_name: str, graph: Any, threads: int) -> None:
    """Store ``threads`` copies of an ``OTHER_TURNS``-turn thread (raw documents, the
    thread id changed, in mongo-ckpt's join keys too) in every collection of ``db_name``."""
    for turn in range(OTHER_TURNS):
        run_turn(graph, "other", turn)
    db = client[db_name]
    for name in db.list_collection_names():
        docs = list(db[name].find({"thread_id": "other"}, {"_id": 0}))
        for n in range(1, threads if docs else 0):
            db[name].insert_many([_renamed(d, "other", f"other-{n}") for d in docs])


def _renamed(doc: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    renamed = {**doc, "thread_id": target}
    if isinstance(doc.get("join"), str):  # mongo-ckpt's join keys start with the thread id
        renamed["join"] = target + doc["join"].removeprefix(source)
    return renamed


def bench(client: Any, name: str, turns: int, other_threads: int) -> tuple[Result, str]:
    """One saver, one DeltaChannel conversation of ``turns`` turns, on a fresh database."""
    db_name = f"bench_delta_{name}".replace("-", "_").replace(",", "").replace(" ", "_")
    db_name = db_name.replace("$", "")
    client.drop_database(db_name)
    saver = make_saver(OFFICIAL if name == OFFICIAL else MONGO_CKPT, client, db_name)
    if name == UNBOUNDED:
        saver.memory = CheckpointMemory(checkpoints=0)  # remembers no counters (nor chains)
    graph = chat_graph(saver, DELTA)
    if other_threads:
        fill(client, db_name, graph, other_threads)
    for turn in range(WARMUP_TURNS):
        run_turn(graph, "warm-up", turn)
    saver.delete_thread("warm-up")

    calls = count_saver_calls(saver)
    history = saver.get_delta_channel_history
    result = Result(name)

    def counted_history(**kwargs: Any) -> Any:
        before = sum(calls.values())
        try:
            return history(**kwargs)
        finally:
            result.history_calls.append(sum(calls.values()) - before)

    saver.get_delta_channel_history = counted_history  # type: ignore[method-assign]
    range_limit = operations.range_limit
    if name in (WALK, UNBOUNDED):
        operations.range_limit = lambda depth, floor: None  # type: ignore[assignment]
    try:
        for turn in range(turns):
            start = time.perf_counter()
            run_turn(graph, THREAD, turn)
            result.turn_ms.append((time.perf_counter() - start) * 1000)
            if (turn + 1) % PROGRESS_EVERY == 0:
                last = result.turn_ms[-1]
                print(f"  turn {turn + 1}: {last:.0f} ms", file=sys.stderr, flush=True)
    finally:
        operations.range_limit = range_limit
    state = graph.get_state({"configurable": {"thread_id": THREAD}})
    if (rebuilt := len(state.values["messages"])) != 2 * turns:
        raise AssertionError(f"{name} rebuilt {rebuilt} messages, not {2 * turns}")
    client.drop_database(db_name)
    return result, history_walk(saver)


def parse_windows(text: str) -> list[tuple[int, int]]:
    windows = []
    for part in text.split(","):
        start, _, stop = part.partition("-")
        windows.append((int(start), int(stop)))
    return windows


def report(
    description: str,
    turns: int,
    windows: list[tuple[int, int]],
    results: list[Result],
    other_threads: int,
) -> str:
    header = ["saver"]
    for start, stop in windows:
        header += [f"turns {start}–{stop} mean", "median"]
    header += ["history load: collection calls, mean (max)", "total s"]
    rows = []
    for r in results:
        row = [r.saver]
        for start, stop in windows:
            ms = r.window(start, stop)
            row += [f"{statistics.fmean(ms):.0f}", f"{statistics.median(ms):.0f}"]
        mean_calls = statistics.fmean(r.history_calls) if r.history_calls else 0.0
        row += [f"{mean_calls:.1f} ({max(r.history_calls, default=0)})"]
        row += [f"{sum(r.turn_ms) / 1000:.1f}"]
        rows.append(row)
    others = f" ({other_threads} other {OTHER_TURNS}-turn threads stored)" if other_threads else ""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(
        [
            f"#### Backend: {description}, PyMongo {version('pymongo')}",
            "",
            f"{turns} turns on one thread{others};"
            f" `DeltaChannel(snapshot_frequency={SNAPSHOT_FREQUENCY})`;"
            " wall time per `graph.invoke` in ms (turns numbered from 0, end excluded).",
            "",
            *lines,
        ]
    )


def write_doc(path: Path, section: str) -> None:
    """Replace the generated section in ``path`` (append it if missing)."""
    write_section(path, MARKER, section)


def provenance() -> str:
    command = " ".join(["python tests/perf/bench_delta_turns.py", *sys.argv[1:]])
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    versions = ", ".join(
        f"{p} {version(p)}"
        for p in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-mongodb")
    )
    return (
        f"Generated by `{command}` on {datetime.date.today().isoformat()}: mongo-ckpt "
        f"{commit or 'unknown commit'}; Python {sys.version.split()[0]}, {versions}."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("wire", "mock", "mongodb"), default="wire")
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--windows", type=parse_windows, default=parse_windows("30-50,380-400"))
    parser.add_argument("--unbounded", action="store_true")
    parser.add_argument("--walk", action="store_true")
    parser.add_argument("--other-threads", type=int, default=0, metavar="N")
    parser.add_argument(
        "--write", nargs="?", const=DOC, type=Path, metavar="PATH",
        help=f"also write the table into PATH (default {DOC.relative_to(REPO)})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if any(stop > args.turns or start >= stop for start, stop in args.windows):
        parser.error(f"--windows must be ranges start-stop within 0-{args.turns}")
    extra = [*([WALK] if args.walk else []), *([UNBOUNDED] if args.unbounded else [])]
    names = [MONGO_CKPT, *extra, OFFICIAL]
    try:
        client, description = open_client(args.backend)
        results, walks = [], []
        for name in names:
            print(f"[{args.backend}] {name} ...", file=sys.stderr, flush=True)
            result, walk = bench(client, name, args.turns, args.other_threads)
            results.append(result)
            walks.append(f"- {name}: history by {walk}.")
        client.close()
    finally:
        stop_wire()
    notes = "\n".join(walks)
    section = "\n\n".join(
        [
            report(description, args.turns, args.windows, results, args.other_threads),
            notes,
            provenance(),
        ]
    )
    print(section, flush=True)
    if args.write:
        write_doc(args.write, section)
        print(f"wrote {args.write}", file=sys.stderr)


if __name__ == "__main__":
    main()
