"""Run the official packages' own test suites against mongo-ckpt.

Usage, from the repository root::

    python tests/compat/run_official_suites.py [--keep] [--include-atlas] [--record]
        [-- PYTEST_ARGS...]

What it does, all inside a fresh temporary directory (nothing of the official packages is
copied into this repository):

1. ``pip download --no-deps --no-binary NAME`` the sdists of
   ``langgraph-checkpoint-mongodb==0.5.1`` and ``langgraph-store-mongodb==0.4.0`` and
   extracts them;
2. copies only their ``tests/`` directories and rewrites the imports of the official
   classes to ours (``langgraph.checkpoint.mongodb`` -> ``mongo_ckpt``,
   ``langgraph.store.mongodb`` -> ``mongo_ckpt.store``);
3. starts the in-process wire backend (SecantusDB, ``tests.backends.wire_uri``) and points
   ``MONGODB_URI`` at it (``DB_NAME`` is left to its default);
4. runs pytest on each suite and prints a per-test summary and per-package counts;
   ``--record`` also writes each test's outcome to ``RESULTS`` (``last_run.json`` here),
   which docs/migrating.md's figures are checked against (tests/test_docs_figures.py),
   ``--results FILE`` to FILE (the exhaustive tier runs the suites fresh and compares).

The store's ``integration_tests`` need an Atlas vector search index and an embedding
service (OpenAI, Azure or a local Ollama); they are left out unless ``--include-atlas``.

This file lives under ``tests/compat/``, which the default pytest run does not collect.
Results and the classification of every failure: docs/migrating.md, "The official test
suites".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("last_run.json")
PACKAGES = {
    "checkpoint": ("langgraph-checkpoint-mongodb", "0.5.1"),
    "store": ("langgraph-store-mongodb", "0.4.0"),
}
# Directories (relative to the sdist's tests/) that need Atlas vector search + embeddings.
ATLAS_ONLY = {"store": ["integration_tests"]}

# Official import -> ours. Only the public names the suites import; a name we do not have
# stays in the rewritten import and shows up as a collection error.
IMPORT_REWRITES = [
    (re.compile(r"\bfrom langgraph\.checkpoint\.mongodb\.aio import\b"), "from mongo_ckpt import"),
    (re.compile(r"\bfrom langgraph\.checkpoint\.mongodb import\b"), "from mongo_ckpt import"),
    (re.compile(r"\bfrom langgraph\.store\.mongodb import\b"), "from mongo_ckpt.store import"),
]


def download(tmp: Path, name: str, version: str) -> Path:
    dest = tmp / "sdists"
    dest.mkdir(exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--no-binary", name, f"{name}=={version}", "-d", str(dest)],
        check=True,
    )
    stem = f"{name.replace('-', '_')}-{version}"
    archive = next(p for p in dest.iterdir() if p.name.startswith(stem))
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "extracted", filter="data")
    return tmp / "extracted" / stem


def copy_tests(src: Path, dest: Path) -> list[str]:
    """Copy ``src/tests`` to ``dest/tests`` and rewrite imports; return the rewritten files."""
    shutil.copytree(src / "tests", dest / "tests")
    changed = []
    for path in sorted((dest / "tests").rglob("*.py")):
        text = original = path.read_text()
        for pattern, replacement in IMPORT_REWRITES:
            text = pattern.sub(replacement, text)
        if text != original:
            path.write_text(text)
            changed.append(str(path.relative_to(dest)))
    # The checkpoint's integration conftest only defines embedding fixtures (unused by its
    # tests) and imports langchain_ollama / langchain_openai: drop it when they are missing.
    conftest = dest / "tests" / "integration_tests" / "conftest.py"
    if conftest.exists() and "langchain_ollama" in conftest.read_text() and not all(
            importlib.util.find_spec(m) for m in ("langchain_ollama", "langchain_openai")):
        conftest.unlink()
        print(f"removed {conftest.relative_to(dest)} (embedding fixtures; packages missing)")
    (dest / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    requires: needs a library\n    compile: placeholder\n"
    )
    return changed


def run_suite(label: str, suite: Path, env: dict[str, str], extra: list[str],
              include_atlas: bool) -> dict[str, list[tuple[str, str]]]:
    report = suite / "report.xml"
    cmd = [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider",
           "-q", "-rfE", f"--junitxml={report}", "--rootdir", str(suite)]
    if not include_atlas:
        for sub in ATLAS_ONLY.get(label, []):
            cmd += ["--ignore", f"tests/{sub}"]
    cmd += extra
    print(f"\n=== {label}: {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, cwd=suite, env=env)
    results: dict[str, list[tuple[str, str]]] = {
        "passed": [], "failed": [], "error": [], "skipped": []}
    if not report.exists():
        return results
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "").splitlines()[0][:160] if child.get(
                    "message") else ""
                break
        results[outcome].append((test_id, message))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--include-atlas", action="store_true",
                        help="also run the store's Atlas/embedding integration tests")
    parser.add_argument("--only", choices=sorted(PACKAGES), help="run one package's suite")
    parser.add_argument("--record", action="store_true",
                        help=f"write every test's outcome to {RESULTS.relative_to(REPO)}")
    parser.add_argument("--results", type=Path, default=None,
                        help="write every test's outcome to this file instead (implies --record)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from tests.backends import stop_wire, wire_uri

    tmp = Path(tempfile.mkdtemp(prefix="mongo-ckpt-official-"))
    summary = {}
    try:
        uri = wire_uri()
        env = dict(os.environ)
        env["MONGODB_URI"] = uri
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        print(f"wire backend: {uri}\nwork dir: {tmp}")
        for label, (name, version) in PACKAGES.items():
            if args.only and label != args.only:
                continue
            suite = tmp / label
            suite.mkdir()
            changed = copy_tests(download(tmp, name, version), suite)
            print(f"{name}=={version}: imports rewritten in {len(changed)} files")
            summary[label] = run_suite(label, suite, env, args.pytest_args, args.include_atlas)
    finally:
        stop_wire()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print("\n=== per-test results")
    for label, results in summary.items():
        for outcome in ("failed", "error", "skipped", "passed"):
            for test_id, message in results[outcome]:
                tail = f"  -- {message}" if message and outcome != "passed" else ""
                print(f"{label:10} {outcome.upper():7} {test_id}{tail}")
    print("\n=== summary")
    bad = 0
    for label, results in summary.items():
        counts = {k: len(v) for k, v in results.items()}
        bad += counts["failed"] + counts["error"]
        print(f"{PACKAGES[label][0]}=={PACKAGES[label][1]}: " + ", ".join(
            f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped")))
    if args.record or args.results:
        (args.results or RESULTS).write_text(json.dumps(recorded(summary), indent=2) + "\n")
    return 1 if bad else 0


def recorded(summary: dict[str, dict[str, list[tuple[str, str]]]]) -> dict[str, Any]:
    """The test ids per outcome, per ``name==version``, as ``--record`` writes them."""
    return {
        "==".join(PACKAGES[label]): {k: sorted(t for t, _ in v) for k, v in results.items()}
        for label, results in summary.items()
    }


if __name__ == "__main__":
    sys.exit(main())
