"""mypy ``--strict`` (the ``[tool.mypy]`` config) accepts the package, an operation built
from the typed call constructors, and a user's script written against the documented API."""

from __future__ import annotations

import os
import shlex
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


# An operation written with the typed call constructors: each gives mypy its result type.
CALLS_SCRIPT = """
from mongo_ckpt.calls import Operation, aggregate, bulk_write, delete_many, find

def operation() -> Operation[int]:
    docs = yield from find("c", {}, projection={"a": 1})
    reveal_type(docs)
    rows = yield from aggregate("c", [{"$match": {}}])
    reveal_type(rows)
    written = yield from bulk_write("c", [], ordered=True)
    reveal_type(written)
    deleted = yield from delete_many("c", {})
    return len(docs) + len(rows) + deleted.deleted_count
"""
REVEALED = [
    'Revealed type is "list[dict[str, Any]]"',
    'Revealed type is "list[dict[str, Any]]"',
    'Revealed type is "pymongo.results.BulkWriteResult"',
]


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, int]:
    """One mypy run, with ``[tool.mypy]`` of pyproject.toml (strict), on ``mongo_ckpt``
    (``store/`` included), the typed-calls script and a user's script written against the
    documented API: ``(exit status, output, files checked)``."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    tmp_path = tmp_path_factory.mktemp("mypy")
    site = _installed_layout(tmp_path)
    (site / "calls_script.py").write_text(CALLS_SCRIPT)
    shutil.copy(ROOT / "tests" / "typing_user_script.py", site / "user_script.py")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"),
         "-p", "mongo_ckpt", "-m", "calls_script", "-m", "user_script"],
        cwd=site, capture_output=True, text=True, timeout=300,
    )
    return done.returncode, done.stdout + done.stderr, len(list(site.rglob("*.py")))


@pytest.fixture(scope="module")
def misuse_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """mypy's report on ``typing_misuse_script.py`` against the installed layout."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    tmp_path = tmp_path_factory.mktemp("mypy_misuse")
    site = _installed_layout(tmp_path)
    shutil.copy(ROOT / "tests" / "typing_misuse_script.py", site / "misuse_script.py")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), "-m", "misuse_script"],
        cwd=site, capture_output=True, text=True, timeout=300,
    )
    return done.stdout + done.stderr


def test_package_passes_mypy_strict(mypy_output: tuple[int, str, int]) -> None:
    status, out, checked = mypy_output
    assert status == 0, out
    assert f"Success: no issues found in {checked} source files" in out


def test_typed_calls_give_their_result_types(mypy_output: tuple[int, str, int]) -> None:
    _, out, _ = mypy_output
    revealed = [line.split(": note: ")[1] for line in out.splitlines() if "Revealed" in line]
    assert revealed == REVEALED, out


def test_user_script_passes_mypy_strict(mypy_output: tuple[int, str, int]) -> None:
    status, out, _ = mypy_output
    assert "user_script.py" not in out and status == 0, out


def test_wrong_clients_arguments_and_statements_are_mypy_errors(misuse_output: str) -> None:
    source = (ROOT / "tests" / "typing_misuse_script.py").read_text().splitlines()
    refused = {n for n, line in enumerate(source, 1) if line.endswith("# refused")}
    flagged = {
        int(line.split(":")[1]) for line in misuse_output.splitlines()
        if line.startswith("misuse_script.py:") and ": error: " in line
    }
    assert flagged == refused, misuse_output


def _setup_commands() -> list[str]:
    """The commands of the README's "Set-up on a fresh machine" block."""
    section = (ROOT / "README.md").read_text().split("## Set-up on a fresh machine", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.exhaustive
def test_the_readmes_setup_commands_work_and_type_check(tmp_path: Path) -> None:
    """The README's two set-up commands, as written, in a copy of the clone and a new
    virtual environment (the dependencies seen from this one; the copy keeps the install's
    links away from the tests running beside this one): the demo runs, the tests collect
    from the clone's root, and mypy --strict finds ``mongo_ckpt.store`` and its types."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    bin_dir = str(venv / "bin")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MONGODB_URI", None)
    clone = tmp_path / "clone"
    shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".git", "build", "__pycache__",
                                                                ".mypy_cache", ".ruff_cache"))
    demo, tests = _setup_commands()
    for command in (demo, tests):
        install, run = (part.strip() for part in command.split("&&"))
        subprocess.run(shlex.split(install), check=True, timeout=600, cwd=clone, env=env)
        argv = shlex.split(run)
        if argv[:3] == ["python", "-m", "pytest"]:  # the whole suite is this run's job
            argv = [*argv[:3], "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                    f"--basetemp={tmp_path / 'pytest'}", "tests/test_store_contract.py"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=clone,
                              env=env)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    script = tmp_path / "uses_the_store.py"
    script.write_text(
        "from mongo_ckpt.store import MongoDBStore\n"
        "def f(uri: str) -> None:\n"
        "    with MongoDBStore.from_conn_string(uri) as store:\n"
        "        reveal_type(store)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-executable",
         str(venv / "bin" / "python"), "--cache-dir", str(tmp_path / "cache"), str(script)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert 'Revealed type is "mongo_ckpt.store.sync.MongoDBStore"' in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout
