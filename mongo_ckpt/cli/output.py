"""How commands print: rich tables for people, JSON for programs.

Stored strings (ids, namespaces, metadata, message text) reach the terminal only through
``console()``: it parses no markup or emoji codes, and shows control characters (C0, C1,
DEL) and bidirectional overrides as escapes (``\\x1b``, ``\\u202e``), so no stored string can
style, move or reorder what is printed. ``--json`` output is JSON-escaped already.

Every ``--json`` output is one object that starts with the same three keys, ``command``,
``db`` and ``status`` (the exit status's name, ``STATUS_NAMES``), then the command's own.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import IO, Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.snapshots import jsonable

# Exit statuses of every command (docs/operations.md#exit-codes). NOTHING_MATCHED: the
# command ran, but what it was asked about is not there (no such thread, no mongo-ckpt data
# in the database) or, for ``migrate``, threads were skipped.
DONE, ERROR, USAGE, NOTHING_MATCHED = 0, 1, 2, 3
STATUS_NAMES = {DONE: "done", ERROR: "error", USAGE: "usage", NOTHING_MATCHED: "nothing matched"}
T = TypeVar("T")
WIDTH_WHEN_PIPED = 150
HEADING_WIDTH = 60
size = decimal  # bytes for people: ``1.2 kB``


# Control characters, DEL, C1, and the Unicode marks that reorder or break lines.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LAYOUT = "\n\t"


def visible(text: str, *, layout: bool = False) -> str:
    """``text`` with each control or bidi character as an escape; ``layout``: keep
    newlines and tabs (message text), else escape them too (an id, a table cell)."""

    def escaped(match: re.Match[str]) -> str:
        char = match.group()
        if layout and char in _LAYOUT:
            return char
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _UNSAFE.sub(escaped, text)


class SafeConsole(Console):
    """A console that renders every string as literal, visible text (see the module
    docstring): no markup, no emoji codes, no terminal control."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False)
        return super().render_str(visible(text, layout=True), **kwargs)


def console() -> Console:
    """A console on the current stdout; wide enough for ids when output is not a terminal."""
    terminal = sys.stdout.isatty()
    width = None if terminal else max(shutil.get_terminal_size((0, 0)).columns, WIDTH_WHEN_PIPED)
    return SafeConsole(
        file=sys.stdout,
        width=width,
        highlight=False,
        soft_wrap=not terminal,
        markup=False,
        emoji=False,
    )


def json_report(db: str, data: Mapping[str, Any], status: int = DONE) -> dict[str, Any]:
    """The object every ``--json`` output is: ``command``, ``db``, ``status``, then ``data``."""
    command = click.get_current_context().info_name
    return {"command": command, "db": db, "status": STATUS_NAMES[status], **data}


def emit_json(db: str, data: Mapping[str, Any], status: int = DONE) -> None:
    """Print ``json_report(db, data, status)`` as indented JSON (datetimes as ISO 8601,
    other objects by ``jsonable``)."""
    click.echo(json.dumps(_json_safe(json_report(db, data, status)), indent=2))


class NothingMatched(MongoCkptError, click.ClickException, LookupError):
    """The command found nothing to act on: exit status ``NOTHING_MATCHED``, ``message`` on
    stderr, or with ``--json`` the report (``details`` and ``message``) on stdout."""

    exit_code = NOTHING_MATCHED

    def __init__(
        self, message: str, db: str, as_json: bool, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.report = json_report(db, {**(details or {}), "message": message}, NOTHING_MATCHED)
        self.as_json = as_json

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(_json_safe(self.report), indent=2), file=file)
        else:
            click.echo(visible(self.message, layout=True), file=file, err=file is None)


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
        return ", ".join(repr(v) if v == "" else visible(str(v)) for v in value)
    return visible(str(value))


def heading(out: Console, text: str) -> None:
    """A section heading: ``── text ────``."""
    text = visible(text)
    out.print(f"── {text} " + "─" * max(3, HEADING_WIDTH - len(text)))


def timed(
    label: str,
    work: Callable[..., T],
    *,
    shown: bool,
    unit: str,
    counted: Callable[[Any], dict[str, Any]],
    **fields: Any,
) -> tuple[T, float]:
    """``work(progress=...)``'s result and seconds. When ``shown``, ``progress`` moves a
    progress bar on stderr (``label``, done of total ``unit``) by what ``counted`` reads
    from the counts it gets (``Progress.update``'s arguments; ``fields``: their first
    values); else it is ``None``."""
    started = time.perf_counter()
    if not shown:
        result = work(progress=None)
    else:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True)) as bar:
            task = bar.add_task(label, total=None, **fields)
            result = work(progress=lambda counts: bar.update(task, **counted(counts)))
    return result, round(time.perf_counter() - started, 2)
