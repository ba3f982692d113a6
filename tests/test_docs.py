"""What the docs quote from the source is the source: the ``put`` snippet of
docs/architecture.md appears, line for line, in ``CheckpointOperations.put``."""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

from mongo_ckpt.operations import CheckpointOperations

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def test_the_architecture_put_snippet_is_quoted_from_put() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    snippet = next(b for b in _python_blocks(text) if "# 4. checkpoint and parent probe" in b)
    source = textwrap.dedent(inspect.getsource(CheckpointOperations.put)).splitlines()
    wanted = snippet.rstrip("\n").splitlines()
    indent = len(source[-1]) - len(source[-1].lstrip())  # the body's indent
    body = [line[indent:] for line in source]
    assert any(
        body[i : i + len(wanted)] == wanted for i in range(len(body) - len(wanted) + 1)
    ), "docs/architecture.md's put snippet is not a slice of CheckpointOperations.put"


def test_the_put_steps_are_stated_once_in_the_module_and_the_docs() -> None:
    import mongo_ckpt.operations as operations

    steps = ["plan", "build", "values", "checkpoint and parent probe", "take back"]
    doc = operations.__doc__ or ""
    assert [s for s in steps if f". {s}:" in doc] == steps
    source = inspect.getsource(CheckpointOperations.put)
    assert [s for s in steps if f"# {steps.index(s) + 1}. {s}" in source] == steps
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert all(f"**{s}**" in text for s in steps)
