"""What tracing costs: wall time per conversation turn, untraced vs traced.

Runs the benchmark conversation (``graph.invoke`` per turn, ~1 KB in, ~1 KB out) on
``MongoDBSaver`` twice per backend: without a tracer provider (nothing wrapped) and traced
to an OpenTelemetry SDK provider whose spans go to an in-memory exporter (the cost of the
spans, the counting and the BSON sizing, without any export I/O). Turns alternate between
the two savers so that drift on a busy machine hits both alike.

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_telemetry.py [--backend mock|wire|both] [--turns 200]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from mongo_ckpt import MongoDBSaver  # noqa: E402
from mongo_ckpt.telemetry import Tracing  # noqa: E402
from tests.backends import stop_wire, sync_client  # noqa: E402
from tests.perf.conversation import chat_graph, run_turn  # noqa: E402

WARMUP_TURNS = 3


def bench(backend: str, turns: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = sync_client(backend)
    db_name = "bench_telemetry"
    client.drop_database(db_name)
    savers = {
        "untraced": MongoDBSaver(client, db_name, tracing=Tracing()),
        "traced": MongoDBSaver(client, db_name, tracing=Tracing(provider)),
    }
    assert savers["untraced"]._tracer is None and savers["traced"]._tracer is not None
    graphs = {name: chat_graph(saver) for name, saver in savers.items()}
    times: dict[str, list[float]] = {name: [] for name in savers}
    for turn in range(WARMUP_TURNS + turns):
        for name, graph in graphs.items():
            start = time.perf_counter()
            run_turn(graph, name, turn)
            if turn >= WARMUP_TURNS:
                times[name].append(time.perf_counter() - start)
        exporter.clear()
    client.drop_database(db_name)
    client.close()
    base, traced = (statistics.median(times[n]) * 1000 for n in ("untraced", "traced"))
    print(
        f"{backend:5} {turns} turns: untraced {base:.2f} ms/turn, traced {traced:.2f} ms/turn "
        f"(median; {traced - base:+.2f} ms, {(traced / base - 1) * 100:+.1f}%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("mock", "wire", "both"), default="both")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    backends = ("mock", "wire") if args.backend == "both" else (args.backend,)
    try:
        for backend in backends:
            bench(backend, args.turns)
    finally:
        stop_wire()


if __name__ == "__main__":
    main()
