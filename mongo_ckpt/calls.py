"""Storage logic as plain generators of collection calls, run by a sync or async driver.

Every saver and store operation is written once, as a generator that yields
``Call`` (one collection method call; the driver sends back its result, or
throws its error into the generator), ``NextBatch`` (the next documents of a
streamed cursor) and ``Emit`` (an item for the caller of an iterating
operation). ``mongo_ckpt.drivers`` runs these generators on PyMongo, Motor or
mongomock, blocking or awaiting; whatever steps an operation by hand (a driver, a
span, a stoppable background run, an operation run inside another) does it with
``Relay``, so a step's error always reaches the operation at its ``yield``.

Operations do not build ``Call`` themselves: they use the typed constructors
below, named after the PyMongo methods, so a call reads like PyMongo and its
result has a type::

    docs = yield from find(CHECKPOINTS, query, projection={"values": 1})

``client_bulk_write`` sends requests on several collections as one command (MongoDB 8.0's
client-level ``bulkWrite``) to the client under the ``CLIENT`` key.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pymongo import (
    DeleteMany,
    DeleteOne,
    IndexModel,
    InsertOne,
    ReplaceOne,
    ReturnDocument,
    UpdateMany,
    UpdateOne,
)
from pymongo.errors import BulkWriteError, ClientBulkWriteException
from pymongo.operations import SearchIndexModel
from pymongo.results import BulkWriteResult, ClientBulkWriteResult, DeleteResult, UpdateResult

T = TypeVar("T")
Document = dict[str, Any]
Pipeline = Sequence[Mapping[str, Any]]
Sort = Sequence[tuple[str, int]]
WriteRequest = InsertOne[Any] | DeleteOne | DeleteMany | ReplaceOne[Any] | UpdateOne | UpdateMany
CLIENT = "$client"
"""The key of the client (``client_bulk.ClientCalls``) among the collections operations run on."""
Written = BulkWriteResult | BulkWriteError | None
"""What one collection's requests of a ``client_bulk_write`` did: all applied, one failed
(the error says which; those before it applied), or not reached (an earlier one failed)."""


def upserted_ids(written: Written) -> dict[int, Any]:
    """The ``_id`` of each document ``written`` inserted by upsert, by request index."""
    if isinstance(written, BulkWriteError):
        return {int(u["index"]): u["_id"] for u in written.details.get("upserted", [])}
    return dict(written.upserted_ids or {}) if written is not None else {}


@dataclass(frozen=True)
class Call:
    """``collections[collection].method(*args, **kwargs)``.

    ``find`` and ``aggregate`` come back as a list of documents, or with
    ``stream=True`` as a ``Cursor`` for ``NextBatch``.
    """

    collection: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass(frozen=True)
class Cursor:
    """A streamed result; only the driver reads ``source``."""

    source: Any


@dataclass(frozen=True)
class NextBatch:
    """Up to ``size`` further documents of a streamed cursor; empty when exhausted."""

    cursor: Cursor
    size: int


@dataclass(frozen=True)
class Emit:
    """An item an iterating operation hands to its caller."""

    item: Any


Step = Call | NextBatch | Emit
Operation = Generator[Step, Any, T]
"""An operation returning ``T``: ``Operation[None]``, ``Operation[list[str]]``..."""
Calling = Generator[Call, T, T]
"""One ``Call`` whose result is ``T``; used as ``result = yield from find(...)``."""


class Relay(Generic[T]):
    """An operation stepped by hand: the one loop every runner of operations uses.

    ``next_step`` resumes the operation with the last step's result or, after ``failed``,
    throws that step's error into it at the ``yield`` that issued the step; so the
    traceback of a failed call names the operation's line, and an operation can handle
    an error. An error the operation raises propagates from ``next_step``.
    """

    def __init__(self, operation: Operation[T]) -> None:
        self.operation = operation
        self._result: Any = None
        self._error: Exception | None = None
        self.value: T  # set when the operation returns

    def next_step(self) -> Step | None:
        """The operation's next step; ``None`` once it has returned (into ``value``)."""
        result, error = self._result, self._error
        self._result = self._error = None
        try:
            if error is not None:
                return self.operation.throw(error)
            return self.operation.send(result)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def returned(self, result: Any) -> None:
        """The current step returned ``result``."""
        self._result = result

    def failed(self, error: Exception) -> None:
        """The current step raised ``error``."""
        # The relaying frame leaves the traceback: it goes on at the operation's line.
        if error.__traceback__ is not None:
            error = error.with_traceback(error.__traceback__.tb_next)
        self._error = error


def _options(**options: Any) -> dict[str, Any]:
    """The keyword arguments that were given (``None`` leaves the driver's default)."""
    return {name: value for name, value in options.items() if value is not None}


def find(
    collection: str,
    filter: Mapping[str, Any],
    *,
    projection: Mapping[str, Any] | None = None,
    sort: Sort | None = None,
    skip: int | None = None,
    limit: int | None = None,
) -> Calling[list[Document]]:
    """``list(collection.find(filter, ...))``."""
    options = _options(projection=projection, sort=sort, skip=skip, limit=limit)
    return (yield Call(collection, "find", (filter,), options))


def find_cursor(
    collection: str,
    filter: Mapping[str, Any],
    *,
    projection: Mapping[str, Any] | None = None,
    sort: Sort | None = None,
    limit: int | None = None,
    batch_size: int | None = None,
) -> Calling[Cursor]:
    """``collection.find(filter, ...)`` as a cursor, read with ``next_batch``
    (``batch_size``: documents per reply from the server, which the driver holds at once)."""
    options = _options(projection=projection, sort=sort, limit=limit, batch_size=batch_size)
    return (yield Call(collection, "find", (filter,), options, stream=True))


def next_batch(cursor: Cursor, size: int) -> Generator[NextBatch, list[Document], list[Document]]:
    """Up to ``size`` further documents of ``cursor``; ``[]`` once it is exhausted."""
    return (yield NextBatch(cursor, size))


def find_one(collection: str, filter: Mapping[str, Any]) -> Calling[Document | None]:
    """``collection.find_one(filter)``."""
    return (yield Call(collection, "find_one", (filter,)))


def find_one_and_update(
    collection: str, filter: Mapping[str, Any], update: Mapping[str, Any], *, upsert: bool
) -> Calling[Document | None]:
    """``collection.find_one_and_update(filter, update, upsert=upsert,
    return_document=ReturnDocument.AFTER)``: the document as updated."""
    options = {"upsert": upsert, "return_document": ReturnDocument.AFTER}
    return (yield Call(collection, "find_one_and_update", (filter, update), options))


def upserted(
    collection: str, filter: Mapping[str, Any], update: Mapping[str, Any]
) -> Operation[Document]:
    """The document ``filter`` selects once ``update`` upserted it: one
    ``find_one_and_update``, or two when the first upsert raced another one to insert the
    document and the server reported none (SecantusDB does; MongoDB retries it itself)."""
    doc = yield from find_one_and_update(collection, filter, update, upsert=True)
    if doc is None:
        doc = yield from find_one_and_update(collection, filter, update, upsert=True)
    assert doc is not None  # the document exists: the second upsert found or inserted it
    return doc


def count_documents(
    collection: str, filter: Mapping[str, Any], *, limit: int | None = None
) -> Calling[int]:
    """``collection.count_documents(filter, ...)``."""
    return (yield Call(collection, "count_documents", (filter,), _options(limit=limit)))


# An aggregation's whole output in its first reply (which MongoDB still bounds by 16 MiB):
# by default the server sends 101 documents, and each further batch is one more round trip,
# which a DeltaChannel history of more than 100 write parts would pay.
AGGREGATE_BATCH = 100_000


def aggregate(collection: str, pipeline: Pipeline) -> Calling[list[Document]]:
    """``list(collection.aggregate(pipeline, batchSize=AGGREGATE_BATCH))``."""
    return (yield Call(collection, "aggregate", (pipeline,), {"batchSize": AGGREGATE_BATCH}))


def distinct(collection: str, key: str, filter: Mapping[str, Any]) -> Calling[list[Any]]:
    """``collection.distinct(key, filter)``."""
    return (yield Call(collection, "distinct", (key, filter)))


def bulk_write(
    collection: str, requests: Sequence[WriteRequest], *, ordered: bool
) -> Calling[BulkWriteResult]:
    """``collection.bulk_write(requests, ordered=ordered)``."""
    return (yield Call(collection, "bulk_write", (requests,), {"ordered": ordered}))


def client_bulk_write(
    writes: Sequence[tuple[str, Sequence[WriteRequest]]], namespaces: Mapping[str, str]
) -> Generator[Call, Any, list[Written]]:
    """``client.bulk_write(...)`` of ``writes`` (collection, requests), in order and ordered,
    as one command; ``namespaces`` gives each collection's ``"db.collection"``.

    Returns one ``Written`` per entry of ``writes``, as a ``bulk_write`` of that collection's
    requests alone would report it (indexes within the entry), so the same code reads both.
    A failure that is no request's own (the connection, a write concern) raises as such.
    """
    models = [_namespaced(r, namespaces[name]) for name, requests in writes for r in requests]
    options = {"ordered": True, "verbose_results": True}
    try:
        result: ClientBulkWriteResult = yield Call(CLIENT, "bulk_write", (models,), options)
    except ClientBulkWriteException as exc:
        if isinstance(exc.error, Exception):  # the connection or the command, not a request
            raise exc.error from exc
        if exc.write_concern_errors or not exc.write_errors:
            raise
        return _per_collection(writes, exc.partial_result, exc.details["writeErrors"][0])
    return _per_collection(writes, result, None)


def _namespaced(request: WriteRequest, namespace: str) -> WriteRequest:
    """``request`` aimed at ``namespace`` (PyMongo's models take it only as they are built)."""
    aimed = copy.copy(request)
    aimed._namespace = namespace
    return aimed


def _per_collection(
    writes: Sequence[tuple[str, Sequence[WriteRequest]]],
    result: ClientBulkWriteResult | None,
    error: Mapping[str, Any] | None,
) -> list[Written]:
    """Split a client bulk write's outcome (``error``: its write error) by entry."""
    upserted: dict[int, Any] = {}
    if result is not None:
        upserted = {i: r.upserted_id for i, r in result.update_results.items()}
    failed: int | None = None if error is None else error["idx"]
    out: list[Written] = []
    start = 0
    for _, requests in writes:
        end = start + len(requests)
        mine = [
            {"index": i - start, "_id": _id}
            for i, _id in sorted(upserted.items())
            if start <= i < end and _id is not None
        ]
        details: dict[str, Any] = {"upserted": mine, "nUpserted": len(mine)}
        if failed is None or failed >= end:
            out.append(BulkWriteResult(details, acknowledged=True))
        elif failed < start:
            out.append(None)
        else:
            details["writeErrors"] = [{**(error or {}), "index": failed - start}]
            details["writeConcernErrors"] = []
            out.append(BulkWriteError(details))
        start = end
    return out


def update_one(
    collection: str, filter: Mapping[str, Any], update: Mapping[str, Any], *, upsert: bool
) -> Calling[UpdateResult]:
    """``collection.update_one(filter, update, upsert=upsert)``."""
    return (yield Call(collection, "update_one", (filter, update), {"upsert": upsert}))


def update_many(
    collection: str, filter: Mapping[str, Any], update: Mapping[str, Any]
) -> Calling[UpdateResult]:
    """``collection.update_many(filter, update)``."""
    return (yield Call(collection, "update_many", (filter, update)))


def delete_many(collection: str, filter: Mapping[str, Any]) -> Calling[DeleteResult]:
    """``collection.delete_many(filter)``."""
    return (yield Call(collection, "delete_many", (filter,)))


def create_indexes(collection: str, indexes: Sequence[IndexModel]) -> Calling[list[str]]:
    """``collection.create_indexes(indexes)``: the names of the indexes."""
    return (yield Call(collection, "create_indexes", (indexes,)))


def create_search_index(collection: str, model: SearchIndexModel) -> Calling[str]:
    """``collection.create_search_index(model)``: the index's name."""
    return (yield Call(collection, "create_search_index", (model,)))


def index_information(collection: str) -> Calling[dict[str, Document]]:
    """``collection.index_information()``: each index's key and options by name."""
    return (yield Call(collection, "index_information"))


def command(database: str, spec: Mapping[str, Any]) -> Calling[Document]:
    """``database.command(spec)``; ``database`` is the key of a database (not a
    collection) among the collections the driver runs on."""
    return (yield Call(database, "command", (spec,)))


def create_collection(database: str, name: str) -> Calling[Any]:
    """``database.create_collection(name)``."""
    return (yield Call(database, "create_collection", (name,)))


def drop_collection(database: str, name: str) -> Calling[Any]:
    """``database.drop_collection(name)``."""
    return (yield Call(database, "drop_collection", (name,)))
