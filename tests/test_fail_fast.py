"""A MONGODB_URI that does not answer stops the test run and the demo quickly, with one message."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLOSED = "mongodb://127.0.0.1:1"  # nothing listens on port 1
# Well under PyMongo's 30 s default server selection timeout, which a regression would wait
# for; the rest of the budget is interpreter start-up and imports on a busy machine.
LIMIT_S = 25


def _run(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "MONGODB_URI": CLOSED}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    return done, time.monotonic() - started


def test_test_run_stops_at_once_on_an_unreachable_server(tmp_path: Path) -> None:
    done, elapsed = _run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'bt'}",
        "tests/test_client_checks.py",
    )
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert elapsed <= LIMIT_S, f"took {elapsed:.1f}s"
    assert f"MONGODB_URI='{CLOSED}' did not answer a ping within 2 s" in output
    assert "unset MONGODB_URI" in output
    assert "passed" not in output and "Traceback" not in output


def test_demo_answers_with_one_paragraph_on_an_unreachable_server() -> None:
    done, elapsed = _run("-m", "mongo_ckpt", "demo")
    assert done.returncode == 2
    assert elapsed <= LIMIT_S, f"took {elapsed:.1f}s"
    assert "Traceback" not in done.stderr
    message = done.stderr.strip()
    assert "\n" not in message  # one paragraph
    assert message.startswith(f"mongo-ckpt demo: could not reach MongoDB at {CLOSED} within 3 s")
    assert "docker compose -f docker/compose.yml up -d --wait" in message
    assert "unset MONGODB_URI" in message
