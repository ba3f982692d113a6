"""mypy: the package passes ``--strict`` with its own config, and a user's script written
against the documented API passes ``--strict`` too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _installed_layout(tmp_path: Path) -> Path:
    """The package laid out as the wheel installs it: ``store/`` as ``mongo_ckpt/store``
    (mypy follows neither setuptools' editable-install finder nor the package-dir mapping)."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "mongo_ckpt", site / "mongo_ckpt")
    shutil.copytree(ROOT / "store", site / "mongo_ckpt" / "store")
    return site


def _mypy(site: Path, config: Path, tmp_path: Path, *targets: str) -> str:
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config),
         "--cache-dir", str(tmp_path / "cache"), *targets],
        cwd=site, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_package_passes_mypy_with_its_config(tmp_path: Path) -> None:
    """``[tool.mypy]`` of pyproject.toml (strict) on ``mongo_ckpt`` and ``mongo_ckpt.store``."""
    site = _installed_layout(tmp_path)
    out = _mypy(site, ROOT / "pyproject.toml", tmp_path, "-p", "mongo_ckpt")
    checked = len(list(site.rglob("*.py")))
    assert f"Success: no issues found in {checked} source files" in out


def test_user_script_passes_mypy_strict(tmp_path: Path) -> None:
    site = _installed_layout(tmp_path)
    shutil.copy(ROOT / "tests" / "typing_user_script.py", site / "user_script.py")
    config = tmp_path / "mypy.ini"
    # The user's script is checked strictly; our own modules only supply its types.
    config.write_text("[mypy]\nstrict = True\n\n[mypy-mongo_ckpt.*]\nignore_errors = True\n")
    out = _mypy(site, config, tmp_path, "--strict", "user_script.py")
    assert "Success: no issues found in 1 source file" in out
