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
    "bench_migration.py": ["--backend", "mock", "--threads", "2", "--turns", "2", "--batch", "1"],
    "bench_put_cpu.py": ["--turns", "4", "--window", "2", "--top", "1"],
    "bench_store.py": ["--backend", "mock", "--repeat", "1"],
    "bench_telemetry.py": ["--backend", "mock", "--turns", "2"],
}


def test_every_script_has_a_smallest_run() -> None:
    assert sorted(p.name for p in (ROOT / "tests" / "perf").glob("bench_*.py")) == sorted(
        SMALLEST
    )


@pytest.mark.parametrize("script", SMALLEST)
def test_the_script_runs(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(Path("tests") / "perf" / script), *SMALLEST[script]],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "MONGODB_URI"},
             "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip()  # its report
