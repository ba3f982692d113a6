"""Whether a saver sends a ``put`` as one command: MongoDB 8.0's client-level ``bulkWrite``.

Where the server (``maxWireVersion`` 25 or later) and the client library (a
``bulk_write`` method on the client: PyMongo 4.9+, Motor 3.7+; not mongomock) both have
it, a put's values, checkpoint and parent probe go in one ordered command; elsewhere in
one ordered bulk write per collection. A saver decides at its first setup; the server's
answer is kept for the client's life, so one ``hello`` serves every saver on a client.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from pymongo.errors import InvalidOperation, OperationFailure
from pymongo.write_concern import WriteConcern

from mongo_ckpt.calls import CLIENT, Operation, command
from mongo_ckpt.errors import MongoCkptError

WIRE_VERSION = 25  # MongoDB 8.0, the first with the client-level bulkWrite command
_SERVER_HAS: dict[int, bool] = {}  # by id() of a live client: whether its server has it
# What a server without the command answers, having run none of it: CommandNotFound (before
# 7.0), and an unknown field of the command (7.0, which has it only behind a feature flag).
NO_SUCH_COMMAND = frozenset({59, 40415})
logger = logging.getLogger("mongo_ckpt")


class ClientBulkWriteUnavailable(MongoCkptError, RuntimeError):
    """``client_bulk_write=True`` on a server or client library without the client-level
    ``bulkWrite``."""


class ClientCalls:
    """What operations call on the client itself (the ``calls.CLIENT`` key): ``bulk_write``
    across collections, with the saver's write concern, and ``command`` on ``admin``."""

    def __init__(self, client: Any, write_concern: WriteConcern | None) -> None:
        self.client = client
        self._write_concern = write_concern

    @property
    def write_concern(self) -> Any:
        """What the client-level writes wait for (the saver's, else the client's own)."""
        return self._write_concern or getattr(self.client, "write_concern", None)

    def bulk_write(self, models: Sequence[Any], **options: Any) -> Any:
        if self._write_concern is not None:
            options["write_concern"] = self._write_concern
        return self.client.bulk_write(models, **options)

    def command(self, spec: Mapping[str, Any]) -> Any:
        return self.client.admin.command(spec)


class PutPath:
    """How one saver sends a ``put``: as one client-level bulk write to ``namespaces`` (each
    collection's ``"db.collection"``, by logical name), or, while that is ``None``, as one
    bulk write per collection."""

    def __init__(self, client: Any, wanted: bool | None) -> None:
        self.client = client
        self.wanted = wanted
        self.namespaces: Mapping[str, str] | None = None
        self.decided = False

    def decide(self, db_name: str, collections: Mapping[str, str]) -> Operation[None]:
        """Once (at the owner's first setup): whether writes go as one client-level bulk
        write, to ``collections`` (by logical name) of database ``db_name``: with ``wanted``
        ``None`` when the server and the client library have it (one ``hello`` per client),
        ``False`` never, ``True`` always (raises ``ClientBulkWriteUnavailable`` when they do
        not)."""
        if self.decided or self.wanted is False:
            self.decided = True
            return
        client = self.client
        library = has_bulk_write(client)
        supported = library and _SERVER_HAS.get(id(client))
        if library and supported is None:
            try:
                reply = yield from command(CLIENT, {"hello": 1})
            except OperationFailure:  # a server older than 4.4.2 has no hello (nor bulkWrite)
                reply = {}
            supported = reply.get("maxWireVersion", 0) >= WIRE_VERSION
            _SERVER_HAS[id(client)] = supported
            weakref.finalize(client, _SERVER_HAS.pop, id(client), None)
        if self.wanted and not supported:
            lacking = (
                "the server is older than MongoDB 8.0"
                if library
                else (
                    f"{type(client).__module__.split('.')[0]}.{type(client).__name__} has no "
                    "MongoClient.bulk_write"
                )
            )
            raise ClientBulkWriteUnavailable(
                "client_bulk_write=True needs MongoDB 8.0+ and a client library with "
                f"MongoClient.bulk_write (PyMongo 4.9+, Motor 3.7+), but {lacking}: pass "
                "client_bulk_write=None to use it where available, or False never to"
            )
        if supported:
            self.namespaces = {
                logical: f"{db_name}.{name}" for logical, name in collections.items()
            }
        self.decided = True

    def refused(self, error: OperationFailure | InvalidOperation) -> None:
        """A put's client bulk write failed as a whole with ``error``, because the primary
        is of a release without the command (a rolling upgrade failed over to an older
        one): the client library's own refusal to send it to a server older than 8.0
        (``InvalidOperation``; a closed client is ``ClientClosedError`` by then), or the
        server's answer that it has no such command (``NO_SUCH_COMMAND``). From now on this
        saver's puts go per collection, and savers set up later on the client decide so;
        with ``client_bulk_write=True`` this raises ``ClientBulkWriteUnavailable`` instead.
        Any other failure is raised again."""
        if not refusal(error):
            raise error
        if isinstance(error, OperationFailure):
            why = f"code {error.code}: {(error.details or {}).get('errmsg', error)}"
        else:
            why = str(error)
        if self.wanted:
            raise ClientBulkWriteUnavailable(
                f"client_bulk_write=True, but the bulkWrite command was refused ({why}): "
                "pass client_bulk_write=None to fall back to one bulk write per collection "
                "where the server lacks it; the put may be sent again"
            ) from error
        logger.warning(
            "the bulkWrite command was refused (%s): puts go as one bulk write per "
            "collection from now on",
            why,
        )
        self.namespaces = None
        _SERVER_HAS[id(self.client)] = False


def refusal(error: OperationFailure | InvalidOperation) -> bool:
    """Whether a client bulk write failed with ``error`` before any of it ran: refused by
    the client library (``InvalidOperation``) or by a server without the command."""
    return not isinstance(error, OperationFailure) or error.code in NO_SUCH_COMMAND


def has_bulk_write(client: Any) -> bool:
    """Whether the client library has the client-level ``bulk_write`` (looked up on the
    class: PyMongo and mongomock clients answer any attribute with a database)."""
    return callable(getattr(type(client), "bulk_write", None))
