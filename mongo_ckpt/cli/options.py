"""Options every data command shares, and the saver they open from them."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pymongo import MongoClient
from pymongo.errors import ConfigurationError, ConnectionFailure, PyMongoError

from mongo_ckpt import health, inspection
from mongo_ckpt.calls import Operation
from mongo_ckpt.cli.locate import databases_with_data, holds_data, no_data_message
from mongo_ckpt.cli.output import NothingMatched
from mongo_ckpt.connection import DEFAULT_DB_NAME, _client_kwargs
from mongo_ckpt.drivers import run
from mongo_ckpt.inspection import DATABASE, measures_sizes
from mongo_ckpt.keyring import (
    KEYS_VARIABLE,
    BoundValueError,
    MissingKeyError,
    keyring_from_env,
)
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, THREADS, WRITES, CollectionNameClash, Layout
from mongo_ckpt.redaction import reason, redacted
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.schema import LADDERS, saver_key

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
OPTIONS = {
    CHECKPOINTS: "--checkpoints",
    BLOBS: "--blobs",
    WRITES: "--writes",
    THREADS: "--threads",
}
# What MongoDB refuses in a database name (on every platform) and in a collection name.
DATABASE_FORBIDDEN = '/\\. "$\x00'
DATABASE_MAX_BYTES = 63
COLLECTION_FORBIDDEN = "$\x00"
COLLECTION_HELP = {
    CHECKPOINTS: "Checkpoints collection.",
    BLOBS: "Channel values collection.",
    WRITES: "Pending writes.",
    THREADS: "Settings of single threads (their own ttl).",
}


def database_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A click callback: ``value`` if MongoDB accepts it as a database name."""
    bad = sorted({c for c in value if c in DATABASE_FORBIDDEN})
    if not value or bad or len(value.encode()) > DATABASE_MAX_BYTES:
        raise click.BadParameter(
            f"{value!r} is not a MongoDB database name: 1 to {DATABASE_MAX_BYTES} bytes, "
            f"none of {DATABASE_FORBIDDEN!r}" + (f" (found {''.join(bad)!r})" if bad else "")
        )
    return value


def collection_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A click callback: ``value`` if MongoDB accepts it as a collection name."""
    if not value or any(c in COLLECTION_FORBIDDEN for c in value) or value.startswith("system."):
        raise click.BadParameter(
            f"{value!r} is not a MongoDB collection name: not empty, no '$' or NUL, not "
            "starting with 'system.'"
        )
    return value


def optional_collection_name(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """``collection_name`` for an option that may be left out."""
    return None if value is None else collection_name(ctx, param, value)


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A click callback: refuses ``nan`` and ``inf``, which a ``FloatRange`` lets through."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r} is not a finite number")
    return value


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
    """Add ``--uri``, ``--db``, the four collection names and ``--json`` to ``command``;
    it receives them as one ``target: Target`` argument."""
    defaults = Layout().by_logical()
    options = [
        click.option(
            "--uri",
            envvar="MONGODB_URI",
            show_envvar=True,
            help="MongoDB connection string (default: $MONGODB_URI).",
        ),
        click.option(
            "--db",
            default=DEFAULT_DB_NAME,
            show_default=True,
            callback=database_name,
            help="Database.",
        ),
        *(
            click.option(
                option,
                default=defaults[logical],
                show_default=True,
                callback=collection_name,
                help=COLLECTION_HELP[logical],
            )
            for logical, option in OPTIONS.items()
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
        threads: str,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        try:
            layout = Layout(checkpoints, blobs, writes, threads)
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
    ``target.uri``, closed on exit. A MongoDB error in the body becomes a message
    (``ClickException``) naming the server without its credentials."""
    state = click.get_current_context().find_object(CliState)
    if state is not None and state.client is not None:
        with _explained(None):
            yield state.client
        return
    uri = target.uri or os.environ.get("MONGODB_URI")
    if not uri:
        raise click.UsageError("no MongoDB to connect to: pass --uri or set MONGODB_URI")
    try:
        # The saver's own client options: timeoutMS 10 s unless the URI sets it.
        client: Any = MongoClient(uri, **_client_kwargs(uri, None, None))
    except (ConfigurationError, TypeError, ValueError) as exc:
        raise click.BadParameter(redacted(str(exc), uri), param_hint="--uri") from None
    try:
        with _explained(uri):
            yield client
    finally:
        client.close()


KEYRING_DATA = (
    "the data was encrypted with a KeyRing (mongo_ckpt.keyring_serializer), whose values "
    "name their key: set MONGO_CKPT_KEYS to its keys (id:<base64 key> pairs, separated by "
    "commas)"
)


@contextmanager
def _explained(uri: str | None) -> Iterator[None]:
    """MongoDB errors, and data the serializer cannot read, as messages without
    credentials (``uri``'s secrets are removed from them)."""
    where = redacted(uri, uri) if uri else "the given client"
    try:
        yield
    except ConnectionFailure as exc:
        message = redacted(f"cannot reach MongoDB at {where}: {reason(exc)}", uri)
        raise click.ClickException(message) from None
    except PyMongoError as exc:
        raise click.ClickException(
            redacted(f"MongoDB at {where} refused: {type(exc).__name__}: {exc}", uri)
        ) from None
    except BoundValueError as exc:
        raise click.ClickException(str(exc)) from None
    except NotImplementedError as exc:
        if re.search(r"\+aesb?:", str(exc)) and "serialization type" in str(exc):
            raise click.ClickException(f"{exc}: {KEYRING_DATA}") from None
        if "+aes" in str(exc) and "serialization type" in str(exc):
            raise click.ClickException(
                f"{exc}: the data is encrypted; set LANGGRAPH_AES_KEY to the key it was "
                "written with"
            ) from None
        raise
    except MissingKeyError as exc:
        raise click.ClickException(f"{exc} (MONGO_CKPT_KEYS)") from None
    except AssertionError as exc:  # LangGraph's single-key cipher, on a KeyRing's value
        if re.match(r"Unsupported cipher: aesb?:", str(exc)):
            raise click.ClickException(f"{exc}: {KEYRING_DATA}") from None
        raise
    except ValueError as exc:
        if str(exc) == "MAC check failed":  # pycryptodome: not the key the data was written with
            raise click.ClickException(
                "the data cannot be decrypted: LANGGRAPH_AES_KEY is not the key it was written with"
            ) from None
        raise


def serde_from_env() -> SerializerProtocol:
    """LangGraph's serializer; a ``KeyRing`` one when ``MONGO_CKPT_KEYS`` is set
    (``keyring.keyring_from_env``), else ``EncryptedSerializer`` (AES) when
    ``LANGGRAPH_AES_KEY`` is set."""
    try:
        ring = keyring_from_env(os.environ)
    except (ImportError, ValueError) as exc:
        raise click.UsageError(f"{KEYS_VARIABLE} is set but cannot be used: {exc}") from exc
    if ring is not None:
        return ring
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
        return run(self.collections, operation)


def saver_on(client: Any, target: Target) -> MongoDBSaver:
    """A saver on ``client`` for ``target``'s database and collections, with
    ``serde_from_env()``."""
    return MongoDBSaver(
        client,
        target.db,
        checkpoint_collection_name=target.layout.checkpoints,
        writes_collection_name=target.layout.writes,
        blobs_collection_name=target.layout.blobs,
        threads_collection_name=target.layout.threads,
        serde=serde_from_env(),
    )


def require_data(client: Any, target: Target, hint: str = "") -> None:
    """Raise ``NothingMatched``, naming the databases that hold mongo-ckpt data (and
    ``hint``), unless ``target.db`` holds the checkpointer's collections."""
    if not holds_data(client, target.db, target.layout):
        found = databases_with_data(client)
        raise NothingMatched(
            no_data_message(target.db, target.layout, found) + hint,
            target.db,
            target.json,
            {"databases_with_data": found},
        )


def schema_status(session: Session) -> health.Finding:
    """The saver's recorded layout version against the one this release reads."""
    saver = session.saver
    found = session.run(inspection.schema_version(saver_key(saver.layout.checkpoints)))
    stored_by = session.run(inspection.stored_by()) if found is None else None
    return health.schema_version(found, LADDERS["saver"], stored_by, saver.db.name)


@contextmanager
def open_session(
    target: Target, *, data_required: bool = True, hint: str = "", layout_checked: bool = True
) -> Iterator[Session]:
    """A ``Session`` on ``target`` (see ``open_client``); unless ``data_required`` is off,
    one on a database without the checkpointer's collections is ``NothingMatched``. Unless
    ``layout_checked`` is off (``doctor`` and ``stats`` report it), data in a layout the
    saver refuses is refused here too, before anything is read as values."""
    with open_client(target) as client:
        if data_required:
            require_data(client, target, hint)
        saver = saver_on(client, target)
        session = Session(saver, {**saver.collections, DATABASE: saver.db})
        if layout_checked:
            status = schema_status(session)
            if status.status == "fail":
                raise click.ClickException(f"schema {status.detail}: {status.fix}")
        session.server_sizes = session.run(measures_sizes())
        yield session
