"""Options every data command shares, and the saver they open from them."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pymongo import MongoClient
from pymongo.errors import ConnectionFailure

from mongo_ckpt.calls import Operation
from mongo_ckpt.connection import DEFAULT_DB_NAME, _client_kwargs
from mongo_ckpt.drivers import run
from mongo_ckpt.inspection import DATABASE, measures_sizes
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES, CollectionNameClash, Layout
from mongo_ckpt.saver import MongoDBSaver

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
OPTIONS = {CHECKPOINTS: "--checkpoints", BLOBS: "--blobs", WRITES: "--writes"}


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

    @functools.wraps(command)  # keeps the options decorated below this one
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
        try:
            layout = Layout(checkpoints, blobs, writes)
        except CollectionNameClash as exc:
            raise click.UsageError(exc.describe(OPTIONS)) from None
        target = Target(uri or None, db, layout, as_json)
        return command(*args, target=target, **kwargs)

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
    # The saver's own client options: timeoutMS 10 s unless the URI sets it.
    client: Any = MongoClient(uri, **_client_kwargs(uri, None, None))
    try:
        yield client
    finally:
        client.close()


def serde_from_env() -> SerializerProtocol:
    """LangGraph's serializer; ``EncryptedSerializer`` (AES) when ``LANGGRAPH_AES_KEY`` is set."""
    if not os.environ.get("LANGGRAPH_AES_KEY"):
        return JsonPlusSerializer()
    try:
        return EncryptedSerializer.from_pycryptodome_aes()
    except (ImportError, ValueError) as exc:
        raise click.UsageError(f"LANGGRAPH_AES_KEY is set but cannot be used: {exc}") from exc


@dataclass
class Session:
    """A saver on the target, the collections operations run on, and how sizes are measured."""

    saver: MongoDBSaver
    collections: dict[str, Any]
    server_sizes: bool = False

    def run(self, operation: Operation[T]) -> T:
        """Run a read ``operation`` (without the saver's index creation on first use)."""
        try:
            return run(self.collections, operation)
        except NotImplementedError as exc:
            if "+" in str(exc) and "serialization type" in str(exc):
                raise click.ClickException(
                    f"{exc}: the data is encrypted; set LANGGRAPH_AES_KEY to the key it was "
                    "written with"
                ) from exc
            raise


def saver_on(client: Any, target: Target) -> MongoDBSaver:
    """A saver on ``client`` for ``target``'s database and collections, with
    ``serde_from_env()``."""
    return MongoDBSaver(
        client,
        target.db,
        checkpoint_collection_name=target.layout.checkpoints,
        writes_collection_name=target.layout.writes,
        blobs_collection_name=target.layout.blobs,
        serde=serde_from_env(),
    )


@contextmanager
def open_session(target: Target) -> Iterator[Session]:
    """A ``Session`` on ``target`` (see ``open_client``)."""
    with open_client(target) as client:
        saver = saver_on(client, target)
        session = Session(saver, {**saver.collections, DATABASE: saver.db})
        try:
            session.server_sizes = session.run(measures_sizes())
            yield session
        except ConnectionFailure as exc:
            raise click.ClickException(
                f"cannot reach MongoDB at {target.uri or '$MONGODB_URI'}: {exc}"
            ) from exc
