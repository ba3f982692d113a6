"""Latency benchmark: mongo-ckpt and the official packages at a network's round-trip time.

On loopback a round trip costs almost nothing, so every other benchmark hides what a
command saved is worth. Here the wire server is reached through a loopback proxy that
holds every chunk half the round trip each way (``tests/perf/servers.py``): about 1 ms,
inside a cloud region, and 20 ms, across regions (the measured ``ping`` is shown). The
server runs in a process of its own, so the benchmark's process holds only the clients
(and the graphs), as an application does.
At each round-trip time, in one run:

- **checkpointer**: ms per ``graph.invoke`` turn (median and p90 over ``--turns`` turns of
  one conversation, the first five left out), ``add_messages`` and ``DeltaChannel``, for
  mongo-ckpt's ``MongoDBSaver`` and langgraph-checkpoint-mongodb's;
- **store**: ms per ``put`` (an overwrite), ``get``, ``search`` with a filter and
  ``list_namespaces``, for mongo-ckpt's ``MongoDBStore`` and langgraph-store-mongodb's;
- **cache**: ms per ``get`` and ``set`` of 20 keys, mongo-ckpt's ``MongoDBCache``;
- **concurrency**: turns per second of ``N`` = 1, 8 and 32 conversations in threads, each
  its own thread id (``--turns`` turns each), both savers, ``add_messages``.

With ``--commands`` it reports instead where a turn's time goes on the server, without the
proxy: per saver, over the first 12 turns of a conversation, the server process's CPU per
turn (from ``/proc``) and each kind of command's count and time per turn (a command
listener's durations).

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_latency.py [--rtt 1 20] [--turns 60] [--repeat 20] [--write]
        [--plot [docs/bench-latency.png]]
    python tests/perf/bench_latency.py --commands

``--write`` puts the tables into docs/benchmarks.md between its ``bench_latency`` markers;
``--plot`` draws the median turn and the throughput against the round trip (matplotlib,
in the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from langgraph.store.base import PutOp  # noqa: E402
from langgraph.store.mongodb import MongoDBStore as OfficialStore  # noqa: E402
from pymongo import MongoClient, monitoring  # noqa: E402

from mongo_ckpt.cache import MongoDBCache  # noqa: E402
from mongo_ckpt.store import MongoDBStore  # noqa: E402
from tests.perf.conversation import (  # noqa: E402
    DELTA,
    MONGO_CKPT,
    OFFICIAL,
    PLAIN,
    chat_graph,
    make_saver,
    run_turn,
)
from tests.perf.report import write_section  # noqa: E402
from tests.perf.servers import delayed, server_process  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "bench-latency.png"
OFFICIAL_STORE = "langgraph-store-mongodb"
WARM = 5  # turns left out of a conversation's figures
CONVERSATIONS = (1, 8, 32)


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def summary(times: list[float]) -> str:
    """``median / p90`` in ms."""
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{statistics.median(ordered):.1f} / {p90:.1f}"


def fresh_db(client: MongoClient[Any]) -> str:
    return f"lat_{uuid.uuid4().hex[:8]}"


def turn_times(graph: Any, turns: int) -> list[float]:
    """ms of each turn of one conversation."""
    times = []
    for turn in range(turns):
        start = time.perf_counter()
        run_turn(graph, "t", turn)
        times.append((time.perf_counter() - start) * 1000)
    return times


def store_operations(store: Any) -> dict[str, Callable[[], Any]]:
    ns = ("users", "u1", "facts")
    return {
        "put (overwrite)": lambda: store.put(ns, "k1", {"n": 1, "kind": "fact"}),
        "get": lambda: store.get(ns, "k1"),
        "search, filter": lambda: store.search(ns, filter={"kind": "fact"}, limit=5),
        "list_namespaces": lambda: store.list_namespaces(prefix=("users",), limit=20),
    }


def throughput(graph: Any, count: int, turns: int) -> float:
    """Turns per second of ``count`` conversations of ``turns`` turns in threads."""

    def converse(thread_id: str) -> None:
        for turn in range(turns):
            run_turn(graph, thread_id, turn)

    threads = [threading.Thread(target=converse, args=(f"t{i}",)) for i in range(count)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count * turns / (time.perf_counter() - start)


Figures = dict[tuple[str, str], float]  # (what, saver): a median ms or a rate


def checkpointer_rows(client: MongoClient[Any], turns: int, found: Figures) -> list[list[str]]:
    rows = []
    for variant in (PLAIN, DELTA):
        for name in (MONGO_CKPT, OFFICIAL):
            db = fresh_db(client)
            times = turn_times(chat_graph(make_saver(name, client, db), variant), turns)
            rows.append([f"turn, {variant}", name, summary(times[WARM:])])
            found[(f"turn, {variant}", name)] = statistics.median(times[WARM:])
            client.drop_database(db)
    return rows


def store_rows(client: MongoClient[Any], repeat: int) -> list[list[str]]:
    rows = []
    for name in (MONGO_CKPT, OFFICIAL_STORE):
        db = fresh_db(client)
        store: Any = (
            MongoDBStore(client, db) if name == MONGO_CKPT else OfficialStore(client[db]["store"])
        )
        store.batch([PutOp(("users", f"u{u}", "facts"), f"k{i}", {"n": i, "kind": "fact"})
                     for u in range(10) for i in range(10)])
        for label, action in store_operations(store).items():
            action()
            rows.append([f"store {label}", name, summary([timed(action) for _ in range(repeat)])])
        client.drop_database(db)
    return rows


def cache_rows(client: MongoClient[Any], repeat: int) -> list[list[str]]:
    db = fresh_db(client)
    cache: MongoDBCache[Any] = MongoDBCache(client, db)
    pairs = {(("bench", "node"), f"key{i}"): ({"value": i}, 600) for i in range(20)}
    cache.set(pairs)
    keys = list(pairs)
    rows = [
        ["cache get, 20 keys", MONGO_CKPT, summary([timed(lambda: cache.get(keys))
                                                    for _ in range(repeat)])],
        ["cache set, 20 keys", MONGO_CKPT, summary([timed(lambda: cache.set(pairs))
                                                    for _ in range(repeat)])],
    ]
    client.drop_database(db)
    return rows


def concurrency_rows(client: MongoClient[Any], turns: int, found: Figures) -> list[list[str]]:
    rows = []
    for name in (MONGO_CKPT, OFFICIAL):
        for count in CONVERSATIONS:
            db = fresh_db(client)
            rate = throughput(chat_graph(make_saver(name, client, db), PLAIN), count, turns)
            rows.append([f"{count} conversations", name, f"{rate:.1f} turns/s"])
            found[(f"{count} conversations", name)] = rate
            client.drop_database(db)
    return rows


class Durations(monitoring.CommandListener):
    """Each command's duration, by (command, collection)."""

    def __init__(self) -> None:
        self.started_as: dict[int, tuple[str, str]] = {}
        self.ms: dict[tuple[str, str], list[float]] = defaultdict(list)

    def started(self, event: Any) -> None:
        target = event.command.get(event.command_name)
        collection = target if isinstance(target, str) else ""
        self.started_as[event.request_id] = (event.command_name, collection)

    def succeeded(self, event: Any) -> None:
        kind = self.started_as.pop(event.request_id, (event.command_name, ""))
        self.ms[kind].append(event.duration_micros / 1000)

    def failed(self, event: Any) -> None:
        self.started_as.pop(event.request_id, None)


def server_cpu(uri: str) -> float:
    """CPU seconds the SecantusDB process serving ``uri`` has used (Linux ``/proc``)."""
    port = uri.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    pid = subprocess.run(
        ["pgrep", "-f", "-n", f"secantus --port {port}"], capture_output=True, text=True
    ).stdout.split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def command_costs(server: str, turns: int = 12) -> str:
    """Per saver: server CPU per turn, and each kind of command's count and ms per turn."""
    rows = []
    for name in (MONGO_CKPT, OFFICIAL):
        durations = Durations()
        client: MongoClient[Any] = MongoClient(server, event_listeners=[durations])
        db = fresh_db(client)
        graph = chat_graph(make_saver(name, client, db), PLAIN)
        durations.ms.clear()
        before, cpu = server_cpu(server), time.process_time()
        for turn in range(turns):
            run_turn(graph, "t", turn)
        served = (server_cpu(server) - before) * 1000 / turns
        rows.append([name, "server CPU", "", f"{served:.1f}"])
        rows.append([name, "client CPU", "", f"{(time.process_time() - cpu) * 1000 / turns:.1f}"])
        for (command, collection), ms in sorted(durations.ms.items(), key=lambda kv: -sum(kv[1])):
            label = f"`{command}` {collection}".strip()
            rows.append([name, label, f"{len(ms) / turns:.1f}", f"{sum(ms) / turns:.1f}"])
        client.drop_database(db)
        client.close()
    header = ["saver", f"first {turns} turns", "per turn", "ms per turn"]
    return table(rows, header)


def ping(client: MongoClient[Any]) -> float:
    client.admin.command("ping")
    return statistics.median(timed(lambda: client.admin.command("ping")) for _ in range(20))


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def run(server: str, rtt_ms: float, turns: int, repeat: int, found: Figures) -> str:
    with delayed(server, rtt_ms) as uri:
        client: MongoClient[Any] = MongoClient(uri)
        try:
            measured = ping(client)
            latency = [
                *checkpointer_rows(client, turns, found),
                *store_rows(client, repeat),
                *cache_rows(client, repeat),
            ]
            rate = concurrency_rows(client, max(2, turns // 3), found)
        finally:
            client.close()
    head = f"**{rtt_ms:g} ms round trip** (measured `ping`: {measured:.2f} ms)"
    return "\n\n".join([
        head,
        table(latency, ["operation", "implementation", "ms (median / p90)"]),
        table(rate, ["load", "saver", "throughput"]),
    ])


def plot(figures: dict[float, Figures], path: Path) -> None:
    """Median ms per turn, and turns per second against concurrent conversations, at each
    round trip: one line per saver (and state variant)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (turn_ax, rate_ax) = plt.subplots(1, 2, figsize=(11, 4.5))
    rtts = sorted(figures)
    for variant in (PLAIN, DELTA):
        for name in (MONGO_CKPT, OFFICIAL):
            style = "-" if name == MONGO_CKPT else "--"
            medians = [figures[rtt][(f"turn, {variant}", name)] for rtt in rtts]
            turn_ax.plot(rtts, medians, style, marker="o", label=f"{name}, {variant}")
    turn_ax.set(xlabel="round trip (ms)", ylabel="ms per turn (median)", yscale="log")
    turn_ax.set_title("One conversation: a turn's time")
    for rtt in rtts:
        for name in (MONGO_CKPT, OFFICIAL):
            style = "-" if name == MONGO_CKPT else "--"
            rates = [figures[rtt][(f"{n} conversations", name)] for n in CONVERSATIONS]
            rate_ax.plot(CONVERSATIONS, rates, style, marker="o", label=f"{name}, {rtt:g} ms")
    rate_ax.set(xlabel="concurrent conversations", ylabel="turns per second", xscale="log")
    rate_ax.set_xticks(CONVERSATIONS, [str(n) for n in CONVERSATIONS])
    rate_ax.set_title("Throughput, add_messages")
    for ax in (turn_ax, rate_ax):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt", type=float, nargs="+", default=[1, 20])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--commands", action="store_true", help="where a turn's time goes")
    parser.add_argument("--plot", nargs="?", const=PLOT, type=Path, help="draw the figures")
    args = parser.parse_args()
    if args.commands:
        with server_process() as server:
            print(command_costs(server))
        return
    figures: dict[float, Figures] = {rtt: {} for rtt in args.rtt}
    with server_process() as server:
        text = "\n\n".join(
            run(server, rtt, args.turns, args.repeat, figures[rtt]) for rtt in args.rtt
        )
    print(text)
    if args.write:
        write_section(DOC, "bench_latency", text)
    if args.plot:
        plot(figures, args.plot)


if __name__ == "__main__":
    main()
