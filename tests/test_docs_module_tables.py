"""docs/architecture.md's module tables name every module of the library: the saver's
(``mongo_ckpt/``, the command line's in its row), the store's (``store/``) and the node
cache's (``mongo_ckpt/cache/``), each in its own table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tables() -> dict[str, str]:
    """The text of each module table of the ``## Modules`` section, by package."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Modules") : text.index("\n## ", text.index("## Modules") + 1)]
    saver, rest = section.split("The store, `store/`", 1)
    store, cache = rest.split("The node cache, `mongo_ckpt/cache/`", 1)
    return {"mongo_ckpt": saver, "store": store, "mongo_ckpt/cache": cache}


def _named(table: str) -> set[str]:
    return set(re.findall(r"`([\w/]+\.py)`", table))


def test_every_module_is_in_its_table() -> None:
    tables = _tables()
    missing = []
    for package, table in tables.items():
        named = _named(table)
        for path in sorted((ROOT / package).glob("*.py")):
            if path.name != "__init__.py" and path.name not in named:
                missing.append(f"{package}/{path.name}")
    cli_row = next(line for line in tables["mongo_ckpt"].splitlines() if "`cli/`" in line)
    for path in sorted((ROOT / "mongo_ckpt" / "cli").glob("*.py")):
        if path.name not in cli_row:
            missing.append(f"mongo_ckpt/cli/{path.name}")
    assert not missing, f"modules docs/architecture.md does not describe: {missing}"
