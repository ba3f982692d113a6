"""Every benchmark script of ``tests/perf/`` runs, at its smallest size, as its docs tell a
user to run it: a renamed internal breaks this test, not the next benchmark run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SMALLEST = {
    "bench_cache.py": ["--backend", "mock", "--repeat", "1", "--entries", "20"],
    "bench_checkpointer.py": ["--backend", "mock", "--turns", "2"],
    "bench_delta_turns.py": ["--backend", "mock", "--turns", "4", "--windows", "1-3"],
    "bench_latency.py": ["--rtt", "0", "--turns", "6", "--repeat", "1"],
    "bench_migration.py": ["--backend", "mock", "--threads", "2", "--turns", "2", "--batch", "1"],
    "bench_put_cpu.py": ["--turns", "4", "--window", "2", "--top", "1"],
    "bench_rekey.py": ["--backend", "mock", "--threads", "2", "--turns", "1"],
    "bench_store.py": ["--backend", "mock", "--repeat", "1"],
    "bench_telemetry.py": ["--backend", "mock", "--turns", "2"],
}


def test_every_script_has_a_smallest_run() -> None:
    assert sorted(p.name for p in (ROOT / "tests" / "perf").glob("bench_*.py")) == sorted(
        SMALLEST
    )


# Modes a script has besides its main run, each run at its smallest too.
MODES = [
    ("bench_latency.py", ["--commands"]),
    ("bench_latency.py", [*SMALLEST["bench_latency.py"], "--plot", "{tmp}/latency.png"]),
]


@pytest.mark.parametrize(
    ("script", "args"),
    [*SMALLEST.items(), *MODES],
    ids=[*SMALLEST, *(f"{script} {' '.join(args)}" for script, args in MODES)],
)
def test_the_script_runs(script: str, args: list[str], tmp_path: Path) -> None:
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    done = subprocess.run(
        [sys.executable, str(Path("tests") / "perf" / script), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "MONGODB_URI"},
             "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip()  # its report
    if "--plot" in args:
        assert Path(args[args.index("--plot") + 1]).stat().st_size > 10_000


def test_the_delaying_proxy_holds_every_round_trip() -> None:
    """``tests/perf/servers.delayed`` adds at least its round-trip time to each command (a
    lower bound: a sleep never ends early), and forwards the replies whole."""
    import time

    from pymongo import MongoClient

    from tests.backends import uri_for
    from tests.perf.servers import delayed

    with delayed(uri_for("wire"), 20) as uri:
        client: MongoClient[dict[str, object]] = MongoClient(uri)
        try:
            client.admin.command("ping")
            start = time.perf_counter()
            reply = client.admin.command("ping")
            assert time.perf_counter() - start >= 0.020
            assert reply["ok"] == 1
        finally:
            client.close()
