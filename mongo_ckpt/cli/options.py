"""Options every data command shares, and the saver they open from them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from mongo_ckpt.connection import DEFAULT_DB_NAME
from mongo_ckpt.layout import Layout

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class CliState:
    """Click's context object. ``client``: a MongoDB client (PyMongo or mongomock) that the
    commands use instead of connecting to ``--uri``; it is not closed by them."""

    client: Any = None


@dataclass(frozen=True)
class Target:
    """Where a command reads and writes: the server, database and collection names."""

    uri: str | None
    db: str
    layout: Layout
    json: bool


def target_options(command: F) -> F:
    """Add ``--uri``, ``--db``, the three collection names and ``--json`` to ``command``;
    it receives them as one ``target: Target`` argument."""
    defaults = Layout()
    options = [
        click.option(
            "--uri",
            envvar="MONGODB_URI",
            show_envvar=True,
            help="MongoDB connection string (default: $MONGODB_URI).",
        ),
        click.option("--db", default=DEFAULT_DB_NAME, show_default=True, help="Database."),
        click.option(
            "--checkpoints",
            "checkpoints",
            default=defaults.checkpoints,
            show_default=True,
            help="Checkpoints collection.",
        ),
        click.option(
            "--blobs", default=defaults.blobs, show_default=True, help="Channel values collection."
        ),
        click.option(
            "--writes", default=defaults.writes, show_default=True, help="Pending writes."
        ),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output."),
    ]

    def wrapped(
        *args: Any,
        uri: str | None,
        db: str,
        checkpoints: str,
        blobs: str,
        writes: str,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        target = Target(uri or None, db, Layout(checkpoints, blobs, writes), as_json)
        return command(*args, target=target, **kwargs)

    wrapped.__name__ = command.__name__
    wrapped.__doc__ = command.__doc__
    for option in reversed(options):
        wrapped = option(wrapped)
    return wrapped  # type: ignore[return-value]


@contextmanager
def open_client(target: Target) -> Iterator[Any]:
    """The injected client (``CliState.client``), else a new ``MongoClient`` on
    ``target.uri``, closed on exit."""
    state = click.get_current_context().find_object(CliState)
    if state is not None and state.client is not None:
        yield state.client
        return
    uri = target.uri or os.environ.get("MONGODB_URI")
    if not uri:
        raise click.UsageError("no MongoDB to connect to: pass --uri or set MONGODB_URI")
    from pymongo import MongoClient

    from mongo_ckpt.connection import DEFAULT_TIMEOUT_MS

    client: Any = MongoClient(uri, timeoutMS=DEFAULT_TIMEOUT_MS)
    try:
        yield client
    finally:
        client.close()
