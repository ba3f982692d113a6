"""The store is imported as ``mongo_ckpt.store``; a user's own ``store`` package never hides it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_users_store_package_does_not_hide_ours(tmp_path: Path) -> None:
    own = tmp_path / "store"
    own.mkdir()
    (own / "__init__.py").write_text("OWNER = 'the application'\n")
    script = (
        "import store\n"
        "from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore\n"
        "assert store.OWNER == 'the application', store\n"
        "assert MongoDBStore.__module__.startswith('mongo_ckpt.store'), MongoDBStore.__module__\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_distribution_owns_only_the_mongo_ckpt_name() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "mongo_ckpt" or p.startswith("mongo_ckpt.") for p in config["packages"])
    assert config["package-dir"] == {"mongo_ckpt.store": "store"}
