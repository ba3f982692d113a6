"""The default run and the exhaustive tier (``--full``) together run every test exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A backend-parametrized file, one with tests marked exhaustive, and one whose long runs are
# a parameter of their own.
FILES = ["tests/test_saver_lifecycle.py", "tests/test_saver_model.py",
         "tests/test_store_registry.py"]


def _collected(tmp_path: Path, *options: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path}", *options, *FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_two_tiers_split_the_tests_between_them(tmp_path: Path) -> None:
    default = _collected(tmp_path / "default")
    full = _collected(tmp_path / "full", "--full")
    assert not default & full

    def long_runs(tests: set[str]) -> set[str]:
        return {test for test in tests if "_long" in test or "[every-" in test}

    def other_drivers(tests: set[str]) -> set[str]:
        return {test for test in tests if "wire-motor" in test or "wire-sync" in test}

    assert long_runs(full) and other_drivers(full)
    assert not long_runs(default) and not other_drivers(default)
    assert {t for t in default if "mock-sync" in t} and {t for t in default if "wire-async" in t}
