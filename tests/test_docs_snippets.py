"""Every Python block of README.md and docs/ runs, as written, against the wire server
(``tests/snippets.py``): in a process of its own, since blocks set process-wide state (a
tracer provider) as a reader's program would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.backends import sync_client, uri_for
from tests.snippets import REPO, Snippet, run, snippets

AES_KEY = "0123456789abcdef0123456789abcdef"  # what docs/security.md's reader sets


def test_every_python_block_of_the_docs_runs(tmp_path: Path) -> None:
    uri = uri_for("wire")
    client = sync_client("wire")
    before = set(client.list_database_names())
    env = {**os.environ, "MONGODB_URI": uri, "LANGGRAPH_AES_KEY": AES_KEY}
    out = tmp_path / "snippets.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.snippets", uri, str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    for name in set(client.list_database_names()) - before:
        client.drop_database(name)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    failures = report["failures"]
    assert not failures, "\n".join(f"{name}:\n{error}" for name, error in failures.items())
    assert report["ran"] == len(snippets()) > 10


def test_a_failing_block_is_reported_with_its_place(tmp_path: Path) -> None:
    snippet = Snippet(REPO / "docs" / "x.md", 3, 'import pymongo\nraise ValueError("no")\n')
    error = run(snippet, "mongodb://unused")
    assert error is not None and "ValueError: no" in error and "docs/x.md:3" in error
    awaited = Snippet(REPO / "docs" / "x.md", 9, "import asyncio\nawait asyncio.sleep(0)\n")
    assert run(awaited, "mongodb://unused") is None
