"""Test runs leave nothing behind: the wire server's data lives in pytest's temp tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo import MongoClient

from tests import backends


def test_wire_data_is_under_the_basetemp_and_removed_when_the_server_stops(
    tmp_path_factory: Any,
) -> None:
    basetemp = Path(tmp_path_factory.getbasetemp()).resolve()
    with MongoClient(backends.wire_uri(), directConnection=True) as client:
        client["t_clean"]["c"].insert_one({"x": 1})
        client.drop_database("t_clean")
    storage = Path(backends.wire_storage() or "")
    assert storage.is_dir()
    assert basetemp in storage.resolve().parents
    backends.stop_wire()
    assert not storage.exists()
    assert backends.wire_storage() is None
    backends.wire_uri()  # later tests get a fresh server, also in the temp tree
    assert basetemp in Path(backends.wire_storage() or "").resolve().parents


def test_the_default_basetemp_is_inside_the_clone(pytestconfig: Any) -> None:
    root = Path(__file__).resolve().parents[1]
    assert '--basetemp=build/pytest-tmp' in pytestconfig.getini("addopts")
    if pytestconfig.option.basetemp == "build/pytest-tmp":  # not overridden on the command line
        assert root in (Path.cwd() / "build" / "pytest-tmp").resolve().parents
