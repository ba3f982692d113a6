"""The figures and outputs the docs show come from the code: docs/migrating.md's results
of the official suites (tests/compat/last_run.json, written by ``run_official_suites.py
--record``) and the ``mongo-ckpt`` outputs of docs/operations.md, run again here on the
wire server."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage

import mongo_ckpt
from mongo_ckpt import MongoDBSaver
from mongo_ckpt.cli import CliState, cli
from tests.backends import sync_client
from tests.cli_support import write_threads
from tests.graphs import chat_builder, thread

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
ID = re.compile(r"1f[0-9a-f]{6}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Before the n-th `doctor` block of operations.md: what its text says was done to the data.
BROKEN = 1  # the join index of checkpoint_blobs dropped, a TTL index added on checkpoints
TTL_DROPPED = 2


def test_migrating_md_has_the_official_suites_last_results() -> None:
    results = json.loads((ROOT / "tests" / "compat" / "last_run.json").read_text())
    doc = (ROOT / "docs" / "migrating.md").read_text()
    section = doc[doc.index("## The official test suites"):]
    for package, outcomes in results.items():
        counts = " | ".join(
            str(len(outcomes[k])) for k in ("passed", "failed", "error", "skipped")
        )
        name, version = package.split("==")
        row = re.search(rf"^\| `{re.escape(package)}`[^|]* \| (.*) \|$", section, re.M)
        assert row, f"no row for {package}"
        assert row.group(1) == counts, (package, counts)
        for test_id in outcomes["failed"] + outcomes["error"]:
            module, _, test = test_id.rpartition("::")
            named = test in section or f"{module.rsplit('.', 1)[-1]}.py" in section
            assert named, f"{test_id} ({name}) failed but docs/migrating.md does not say why"


@pytest.mark.exhaustive
def test_the_official_suites_run_fresh_as_recorded(tmp_path: Path) -> None:
    """The official packages' suites, run fresh against this tree (their sdists downloaded,
    imports switched: tests/compat/run_official_suites.py), end as last_run.json records,
    test by test: so docs/migrating.md's table, checked against that file above, is a
    fresh run's."""
    fresh = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "tests/compat/run_official_suites.py", "--results", str(fresh)],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert fresh.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    recorded = json.loads((ROOT / "tests" / "compat" / "last_run.json").read_text())
    assert json.loads(fresh.read_text()) == recorded


# -- operations.md ------------------------------------------------------------------


def _console_blocks() -> list[tuple[str, list[str]]]:
    """``(command, output lines)`` of each ```console block of operations.md."""
    text = OPERATIONS.read_text()
    blocks = re.findall(r"^```console\n\$ mongo-ckpt (.*?)\n(.*?)^```", text, re.M | re.S)
    return [(command, output.rstrip("\n").splitlines()) for command, output in blocks]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[Any, ...]]]:
    yield from run_blocks(tmp_path_factory.mktemp("plot") / "sizes.png")


def run_blocks(plot: Path) -> Iterator[list[tuple[Any, ...]]]:
    """Each block's command run in order on data like the page's (``write_threads`` and
    chat threads with a ``user``): ``(command, documented lines, printed lines)``; a
    ``--plot`` draws to ``plot``."""
    client = sync_client("wire")
    db = f"t_docs_{uuid.uuid4().hex[:8]}"
    saver = MongoDBSaver(client, db)
    write_threads(saver)
    chat = chat_builder().compile(checkpointer=saver)
    for n, user in enumerate(("ada", "bob", "eve", "ada")):
        for turn in range(n + 1):
            chat.invoke({"messages": [HumanMessage(f"turn {turn}")]},
                        thread(f"support-{n:03}", user=user))
    blocks = _console_blocks()
    documented_ids = next(
        ID.findall("\n".join(out)) for command, out in blocks if command == "history chat-ada"
    )
    real_ids = [c.config["configurable"]["checkpoint_id"]
                for c in saver.list({"configurable": {"thread_id": "chat-ada"}})]
    results, doctors = [], 0
    try:
        for command, documented in blocks:
            args = shlex.split(command)
            if args[0] == "doctor":
                _damage(client[db], doctors)
                doctors += 1
            args = [real_ids[documented_ids.index(a)] if ID.fullmatch(a) else a for a in args]
            args = [str(plot) if a.endswith(".png") else a for a in args]
            result = CliRunner().invoke(
                cli, [*args, "--db", db], obj=CliState(client=client), env={"COLUMNS": "150"}
            )
            printed = result.output.replace(db, "checkpointing_db").replace(
                str(plot), next(a for a in shlex.split(command) if a.endswith(".png"))
                if "--plot" in command else str(plot)
            )
            results.append((command, documented, printed.rstrip("\n").splitlines()))
        yield results
    finally:
        client.drop_database(db)
        client.close()


def _damage(db: Any, doctors_before: int) -> None:
    if doctors_before == BROKEN:
        db["checkpoint_blobs"].drop_index("join")
        db["checkpoints"].create_index("created_at", expireAfterSeconds=86400)
    elif doctors_before == TTL_DROPPED:
        db["checkpoints"].drop_index("created_at_1")


def _shape(value: Any) -> Any:
    """The keys of ``value``'s objects, nested; a list as its first element's shape."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return None


def _masked(line: str) -> str:
    """A line without what differs from run to run: ids, dates, numbers, padding."""
    # Checkpoint ids and task ids alike: a task id may start with "1f" as checkpoint ids do.
    line = re.sub(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b|\b[0-9a-f]{32}\b", "ID", line)
    line = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?", "DATE", line)
    line = re.sub(r"\d+(\.\d+)?( (kB|MB|bytes))?", "N", line)
    return " ".join(line.split())


def test_operations_md_shows_what_the_commands_print(outputs: list[tuple[Any, ...]]) -> None:
    """``doctor`` blocks are compared whole; ``--json`` blocks by their keys; the others by
    their first and last lines, ids, dates and numbers aside."""
    differ = [
        f"$ mongo-ckpt {command}\n" + "\n".join(printed)
        for command, documented, printed in outputs
        if not matches(command, documented, printed)
    ]
    assert not differ, "\n\n".join(differ)


def matches(command: str, documented: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what the block of ``command`` documents (see the test)."""
    if command.split()[0] == "doctor":
        return [line.rstrip() for line in printed] == documented
    if "--json" in command.split():
        return bool(
            _shape(json.loads("\n".join(printed))) == _shape(json.loads("\n".join(documented)))
        )
    return [_masked(printed[0]), _masked(printed[-1])] == [
        _masked(documented[0]), _masked(documented[-1])
    ]


# -- the package ----------------------------------------------------------------------


def test_the_changelog_starts_at_the_installed_version() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    first = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert first and first.group(1) == version == mongo_ckpt.__version__
    done = subprocess.run([sys.executable, "-m", "mongo_ckpt", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"mongo-ckpt {version}"


def test_no_page_installs_from_a_package_index() -> None:
    """mongo-ckpt is installed from a clone or a wheel built from one (README, Install)."""
    pages = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "mongo_ckpt").rglob("*.py"))]
    claim = re.compile(r"pip install (-U )?'?mongo-ckpt|pypi\.org/project/mongo-ckpt")
    assert [p.name for p in pages if claim.search(p.read_text())] == []


def test_masking_ignores_which_ids_a_run_drew() -> None:
    documented = ("(task 87ee8b38-7b9c-b588-d199-c086c5a6f563): "
                  "id='460c3159e752541f86a8ed576756529d'")
    printed = ("(task 1f747280-5232-d187-55d1-6febd0b369b2): "
               "id='fc130481a9fa8abddb9244bbde6c2006'")
    assert _masked(documented) == _masked(printed)
    assert _masked(documented) != _masked("(task x): id='y'")
