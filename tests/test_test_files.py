"""Test files share helpers only through support modules: a test file that imports another
one couples them (a helper renamed in one breaks the other, and pytest runs both modules'
set-up to collect one)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_file_imports_another_test_file() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [node.module or ""] if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else []
            )
            found += [
                f"{path.relative_to(TESTS)}: {module}"
                for module in modules
                if module.split(".")[-1].startswith("test_") and module.startswith("tests")
            ]
    assert found == []
