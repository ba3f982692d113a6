"""A rolling upgrade never truncates a conversation (DESIGN.md §2, "Old readers are not fed
what they misread").

A previous release (layout version 3, 4 or 5, from this repository's history) runs as a
separate process beside the current one on one thread; each answers from the conversation
it reads. The current release writes what the recorded version reads until the upgrade step
records the current one; then it writes list deltas (after version 3), slim checkpoint
documents (after versions 3 and 4) and compressed values (after all three), and the
previous release refuses to start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mongo_ckpt import MongoDBSaver, schema
from mongo_ckpt.cli import CliState, cli
from mongo_ckpt.layout import Layout
from mongo_ckpt.schema import SAVER_SCHEMA_VERSION, read_version, saver_key
from tests.rolling_release import chat_graph, turn

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "rolling_release.py"
GIT = shutil.which("git")
BLOBS, CHECKPOINTS, WRITES = Layout().blobs, Layout().checkpoints, Layout().writes
DELTAS = {"base": {"$exists": True}}  # value documents stored as list deltas
# Checkpoint documents of layout version 5: the metadata once.
SLIM = {"metadata_typed": {"$exists": False}}
# Values stored compressed (layout version 6).
COMPRESSED = {"compression": {"$exists": True}}
# Long enough that a value holding a user's text is stored compressed where allowed.
PADDING = " ".join(f"word{n % 97}" for n in range(400))


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    assert GIT is not None
    return subprocess.run([GIT, "-C", str(ROOT), *args], capture_output=True)


def previous_release(version: int) -> str | None:
    """The newest commit of ``HEAD``'s history whose saver is at layout ``version`` (for
    version 3: one without list deltas, no ``mongo_ckpt/listdelta.py``); ``None`` without
    git or that commit."""
    for chunk in history():
        at = _having(chunk, f"^SAVER_SCHEMA_VERSION = {version}$", "mongo_ckpt/schema.py")
        with_deltas = _having(chunk, "^", "mongo_ckpt/listdelta.py") if version == 3 else set()
        for rev in chunk:
            if rev in at and rev not in with_deltas:
                return rev
    return None


def history() -> Iterator[list[str]]:
    """``HEAD``'s commits, newest first, 100 at a time; none without git."""
    if GIT is None:
        return
    listed = _git("rev-list", "--topo-order", "HEAD")
    revs = listed.stdout.decode().split() if listed.returncode == 0 else []
    for start in range(0, len(revs), 100):
        yield revs[start : start + 100]


def _having(revs: list[str], pattern: str, path: str) -> set[str]:
    """The commits of ``revs`` whose ``path`` has a line matching ``pattern``."""
    found = _git("grep", "-l", "-e", pattern, *revs, "--", path).stdout.decode()
    return {line.split(":", 1)[0] for line in found.splitlines()}


@pytest.fixture(scope="module", params=[3, 4, 5])
def release(request: Any, tmp_path_factory: Any) -> tuple[int, Path]:
    """A previous release's layout version and source, laid out as installed (``store/``
    as ``mongo_ckpt/store``)."""
    version = request.param
    rev = previous_release(version)
    if rev is None:
        pytest.skip(f"needs git and the repository's history (the layout-{version} release)")
    return version, release_tree(rev, tmp_path_factory.mktemp(f"release{version}"))


def release_tree(rev: str, root: Path) -> Path:
    """Commit ``rev``'s library in ``root``, laid out as installed (``store/`` as
    ``mongo_ckpt/store``)."""
    archive = _git("archive", rev, "mongo_ckpt", "store")
    assert archive.returncode == 0, archive.stderr
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    (root / "store").rename(root / "mongo_ckpt" / "store")
    print(f"previous release: commit {rev[:12]}")
    return root


class OldRelease:
    """A running process of the previous release (``tests/rolling_release.py``, or another
    ``script`` answering each line with one JSON line)."""

    def __init__(
        self, tree: Path, uri: str, db_name: str, direct: bool, script: Path = SCRIPT
    ) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.process = subprocess.Popen(
            [sys.executable, str(script), uri, db_name, "1" if direct else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.started = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(30)
            assert self.process.stderr is not None
            raise AssertionError(f"the previous release failed: {self.process.stderr.read()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def turn(self, text: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return self._answer()

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def test_previous_release_and_this_one_share_a_thread_then_upgrade(
    release: tuple[int, Path], database: tuple[str, Any, str, bool], monkeypatch: Any
) -> None:
    version, tree = release
    uri, client, db_name, direct = database
    old = OldRelease(tree, uri, db_name, direct)
    try:
        assert old.started["ready"] == version, old.started
        assert old.started["module"].startswith(str(tree))
        # The new release starts on the database the old one set up: it keeps its version.
        saver = MongoDBSaver(client, db_name)
        saver.setup()
        assert read_version(client[db_name], saver_key("checkpoints")) == version
        graph = chat_graph(saver)
        held = 0
        sides = ["old", "new", "new", "old", "new", "old", "new", "old"]
        for number, side in enumerate(sides, 1):
            text = f"turn {number}: {PADDING}"
            answer = old.turn(text) if side == "old" else turn(graph, text)
            print(
                f"turn {number} ({side} release): read {answer['read']} messages, "
                f"answered {answer['reply']!r}, stored {answer['stored']}"
            )
            assert answer == {"read": held, "reply": f"seen {held + 1}", "stored": held + 2}
            held += 2
        if version == 3:
            assert client[db_name][BLOBS].count_documents(DELTAS) == 0
        if version < 5:
            assert client[db_name][CHECKPOINTS].count_documents(SLIM) == 0
        for collection in (BLOBS, WRITES):
            assert client[db_name][collection].count_documents(COMPRESSED) == 0, collection
    finally:
        old.stop()

    # Every process runs the new release: the upgrade step records the current version.
    result = CliRunner().invoke(cli, ["upgrade", "--db", db_name], obj=CliState(client=client))
    assert result.exit_code == 0, result.output
    print(f"mongo-ckpt upgrade: {result.output.strip()}")
    assert SAVER_SCHEMA_VERSION == 6
    assert result.output.strip() == f"{db_name}: layout version {version} -> version 6"
    # The running saver reads the version again within a minute, without a restart.
    real = time.monotonic
    monkeypatch.setattr(schema, "monotonic", lambda: real() + 61)
    for number in (len(sides) + 1, len(sides) + 2):
        answer = turn(graph, f"turn {number}: {PADDING}")
        print(f"turn {number} (new release, upgraded): read {answer['read']} messages, "
              f"stored {answer['stored']}")
        assert answer == {"read": held, "reply": f"seen {held + 1}", "stored": held + 2}
        held += 2
    deltas = client[db_name][BLOBS].count_documents(DELTAS)
    slim = client[db_name][CHECKPOINTS].count_documents(SLIM)
    compressed = {c: client[db_name][c].count_documents(COMPRESSED) for c in (BLOBS, WRITES)}
    print(
        f"stored after the upgrade: {deltas} list deltas, {slim} slim checkpoint documents, "
        f"compressed values: {compressed}"
    )
    # Two turns, three checkpoints each (and all of them before, from a layout-5 release).
    assert deltas > 0 and slim == (6 if version < 5 else 3 * held // 2)
    # Each turn's user text, as a pending write and inside the list delta's new tail.
    assert compressed[BLOBS] >= 2 and compressed[WRITES] >= 2, compressed
    reopened = chat_graph(MongoDBSaver(client, db_name))
    assert len(reopened.get_state({"configurable": {"thread_id": "t"}}).values["messages"]) == held

    late = OldRelease(tree, uri, db_name, direct)
    late.stop()
    print(f"previous release started after the upgrade: {late.started['refused']}: "
          f"{late.started['message']}")
    assert late.started["refused"] == "SchemaTooNewError"
    assert "layout version 6" in late.started["message"]
