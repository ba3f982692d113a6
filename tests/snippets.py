"""The Python blocks of README.md and docs/, run as a reader would run them.

Each ```python block is a program of its own (imports included), run in a fresh namespace
with top-level ``await`` allowed (as in a notebook or ``python -m asyncio``), against the
server at the URI given: every ``"mongodb://..."`` literal in a block is replaced by it,
and ``MONGODB_URI`` is set to it. ``python -m tests.snippets URI FILE`` runs every block
in this process and writes the failures to FILE as JSON (``{"file:line": error}``).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
URI = re.compile(r"""(["'])mongodb://[^"']*\1""")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def snippets(root: Path = REPO) -> list[Snippet]:
    """Every ```python block of README.md and docs/*.md, in file order."""
    found = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2  # the block's first line of code
            found.append(Snippet(path, line, match.group(1)))
    return found


def run(snippet: Snippet, uri: str) -> str | None:
    """Run ``snippet`` against ``uri``; ``None``, or the error it ended in."""
    code = URI.sub(repr(uri), snippet.code)
    try:
        compiled = compile(
            code, snippet.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        namespace: dict[str, object] = {"__name__": "__snippet__"}
        result = eval(compiled, namespace)  # noqa: S307 (the docs' own code)
        if inspect.iscoroutine(result):
            asyncio.run(result)
    except BaseException:  # reported, whatever it is
        return traceback.format_exc(limit=-3)
    return None


def main() -> None:
    uri, out = sys.argv[1], Path(sys.argv[2])
    failures = {}
    ran = snippets()
    for snippet in ran:
        error = run(snippet, uri)
        if error is not None:
            failures[snippet.name] = error
    out.write_text(json.dumps({"ran": len(ran), "failures": failures}))


if __name__ == "__main__":
    main()
