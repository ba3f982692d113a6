"""The integration workflow and docker/compose.yml are valid and do what the README says."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "integration.yml"
COMPOSE = ROOT / "docker" / "compose.yml"


def _tool(name: str) -> str | None:
    """``name`` from this interpreter's bin directory (the venv the extras went to), or PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("path", "schema"),
    [(WORKFLOW, "vendor.github-workflows"), (COMPOSE, "vendor.compose-spec")],
    ids=["workflow", "compose"],
)
def test_files_match_their_schemas(path: Path, schema: str) -> None:
    tool = _tool("check-jsonschema")
    if tool is None:
        pytest.skip("check-jsonschema is not installed (it comes with the test extra)")
    done = _run(tool, "--builtin-schema", schema, str(path))  # schemas vendored: offline
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_accepts_the_workflow() -> None:
    tool = _tool("actionlint")
    if tool is None:
        pytest.skip("actionlint is not installed (pip install -e '.[lint]', needs GitHub access)")
    done = _run(tool, "-shellcheck=", "-pyflakes=", str(WORKFLOW))
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_runs_the_suite_on_mongodb_8_and_atlas_on_push() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert "push" in workflow[True]  # YAML 1.1 reads the key `on` as True
    (job,) = workflow["jobs"].values()
    uris = {entry["uri"] for entry in job["strategy"]["matrix"]["include"]}
    assert uris == {
        "mongodb://localhost:27017/?directConnection=true",
        "mongodb://localhost:27018/?directConnection=true",
    }
    assert {entry["profile"] for entry in job["strategy"]["matrix"]["include"]} == {
        "", "--profile atlas"
    }
    runs = [step.get("run", "") for step in job["steps"]]
    assert any(r.startswith("docker compose -f docker/compose.yml") and "up -d --wait" in r
               for r in runs)
    test_step = next(step for step in job["steps"] if step.get("run") == "python -m pytest -q")
    assert test_step["env"]["MONGODB_URI"] == "${{ matrix.uri }}"


def test_compose_serves_mongodb_8_as_a_replica_set_and_atlas_on_a_profile() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    mongodb, atlas = compose["services"]["mongodb"], compose["services"]["atlas"]
    assert mongodb["image"].startswith("mongo:8")
    assert "--replSet" in mongodb["command"]
    assert "27017:27017" in mongodb["ports"]
    assert "healthcheck" in mongodb
    assert atlas["profiles"] == ["atlas"]
    assert atlas["image"].startswith("mongodb/mongodb-atlas-local:8")
    assert "27018:27017" in atlas["ports"]
