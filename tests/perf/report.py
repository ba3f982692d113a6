"""How the benchmark scripts put their tables into the docs."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, marker: str, section: str) -> None:
    """Replace what lies between ``<!-- marker:begin -->`` and ``<!-- marker:end -->`` in
    ``path`` with ``section`` (the markers appended at the end when missing)."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin not in text:
        text = f"{text.rstrip()}\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    path.write_text(f"{head}{begin}\n{section}\n{end}{rest.split(end, 1)[1]}")
