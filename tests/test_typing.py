"""``mypy --strict`` accepts a user's script written against the documented API."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_user_script_passes_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    # mypy cannot follow setuptools' editable-install finder, nor the package-dir mapping
    # of mongo_ckpt.store to store/: lay the package out as the wheel does.
    site = tmp_path / "site"
    shutil.copytree(ROOT / "mongo_ckpt", site / "mongo_ckpt")
    shutil.copytree(ROOT / "store", site / "mongo_ckpt" / "store")
    shutil.copy(ROOT / "tests" / "typing_user_script.py", site / "user_script.py")
    config = tmp_path / "mypy.ini"
    # The user's script is checked strictly; our own modules only supply its types.
    config.write_text("[mypy]\nstrict = True\n\n[mypy-mongo_ckpt.*]\nignore_errors = True\n")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config),
         "--cache-dir", str(tmp_path / "cache"), "user_script.py"],
        cwd=site, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout
