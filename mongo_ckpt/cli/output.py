"""How commands print: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.filesize import decimal
from rich.table import Table

from mongo_ckpt.snapshots import jsonable

WIDTH_WHEN_PIPED = 150
HEADING_WIDTH = 60


def console() -> Console:
    """A console on the current stdout; wide enough for ids when output is not a terminal."""
    terminal = sys.stdout.isatty()
    width = None if terminal else max(shutil.get_terminal_size((0, 0)).columns, WIDTH_WHEN_PIPED)
    return Console(file=sys.stdout, width=width, highlight=False, soft_wrap=not terminal)


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON (datetimes as ISO 8601, other objects by ``jsonable``)."""
    click.echo(json.dumps(_json_safe(data), indent=2, sort_keys=False))


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return jsonable(value)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A rich table; numbers right-aligned."""
    out = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    for index, name in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[index], (int, float)) for r in rows)
        out.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        out.add_row(*(cell(v) for v in row))
    return out


def cell(value: Any) -> str:
    """A table cell: ``-`` for nothing, dates to the second, lists comma-separated."""
    if value is None or value == []:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, (list, tuple)):
        return ", ".join(repr(v) if v == "" else str(v) for v in value)
    return str(value)


def heading(out: Console, text: str) -> None:
    """A section heading: ``── text ────``."""
    out.print(f"── {text} " + "─" * max(3, HEADING_WIDTH - len(text)), markup=False)


def size(value: int) -> str:
    """Bytes for people: ``1.2 kB``."""
    return decimal(value)
