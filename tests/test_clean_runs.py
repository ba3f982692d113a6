"""Test runs leave nothing behind: the wire server's data lives in pytest's temp tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from tests import backends


def test_wire_data_is_under_the_basetemp(tmp_path_factory: Any) -> None:
    basetemp = Path(tmp_path_factory.getbasetemp()).resolve()
    with MongoClient(backends.wire_uri(), directConnection=True) as client:
        client["t_clean"]["c"].insert_one({"x": 1})
        client.drop_database("t_clean")
    storage = Path(backends.wire_storage() or "")
    assert storage.is_dir()
    assert basetemp in storage.resolve().parents


# In a process of its own: stopping the suite's shared server under its other clients
# (background sweeps included) would fail the tests that follow, not this one.
STOP_AND_CHECK = """
import sys
from pathlib import Path
from pymongo import MongoClient
from tests import backends
backends.wire_storage_root = sys.argv[1]
with MongoClient(backends.wire_uri(), directConnection=True) as client:
    client["t_clean"]["c"].insert_one({"x": 1})
storage = Path(backends.wire_storage())
assert storage.is_dir() and Path(sys.argv[1]) in storage.parents, storage
backends.stop_wire()
assert not storage.exists(), "the data is left behind"
assert backends.wire_storage() is None
print("removed", storage.name)
"""


def test_wire_data_is_removed_when_the_server_stops(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOP_AND_CHECK, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("removed mongo-ckpt-wire-")
    assert list(tmp_path.iterdir()) == []


def test_the_default_basetemp_is_inside_the_clone(pytestconfig: Any) -> None:
    root = Path(__file__).resolve().parents[1]
    assert '--basetemp=build/pytest-tmp' in pytestconfig.getini("addopts")
    if pytestconfig.option.basetemp == "build/pytest-tmp":  # not overridden on the command line
        assert root in (Path.cwd() / "build" / "pytest-tmp").resolve().parents
