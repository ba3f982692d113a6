"""Layout versions: the small metadata document ``setup()`` reads and records.

Each saver (keyed by its checkpoints collection) and each store (keyed by its
collection) has one document in ``SCHEMA_COLLECTION`` of its database::

    {"_id": "saver:checkpoints", "version": 7, "collections": {...}, "updated_at": ...}

``setup()`` reads it first. At the current version nothing else runs (one round
trip). A newer version raises ``SchemaTooNewError`` before any data is read or written.
Versions only go up (``$max``).

The saver reads and writes one layout, version 7 (the numbers below it were development
builds before the first release; 6 stored compressed values under the serializer's own
type tag, which a reader that did not know compression decoded as garbage). Its
``setup()`` records it on new, empty collections, only if no version was recorded since it
read none (``record_first``), and refuses data recorded below it or not recorded at all
(``SchemaUpgradeRequired``, nothing written). Version 7 is: ``join`` keys on value and
write documents, a sparse ``doomed`` index (maintenance marks what it deletes), list
deltas (``listdelta.py``), slim checkpoint documents (``documents.checkpoint_document``)
and compressed values whose type tag names the compression (``payload.split``).

The next layout follows the same rule: an encoding added to stored values is named in
their type tag (``msgpack+zlib``), so a reader that does not know it fails loudly
instead of misreading.

The store reads and writes one layout, version 5 (1 to 4 were development builds), the
same way: recorded on new collections, anything else of ours refused. Version 5 is: the
namespace registry beside the items on the items' indexes (``store/registry.py``), quiet
puts and batch documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mongo_ckpt.calls import Operation, find_one, update_one, upserted
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import SCHEMA as SCHEMA  # logical name, in ``saver.collections``
from mongo_ckpt.layout import SCHEMA_COLLECTION as SCHEMA_COLLECTION

SAVER_SCHEMA_VERSION = 7
STORE_SCHEMA_VERSION = 5
SCHEMA_VERSION = {"saver": SAVER_SCHEMA_VERSION, "store": STORE_SCHEMA_VERSION}


class SchemaTooNewError(MongoCkptError, RuntimeError):
    """The data was written by a newer mongo-ckpt whose layout this version cannot read."""


class SchemaUpgradeRequired(MongoCkptError, RuntimeError):
    """The data is not in a layout this release reads: a pre-release one, or
    langgraph-checkpoint-mongodb's (``mongo-ckpt migrate`` converts it)."""


def saver_key(checkpoints: str) -> str:
    """The schema document id of the saver whose checkpoints collection is ``checkpoints``."""
    return f"saver:{checkpoints}"


def store_key(collection: str) -> str:
    """The schema document id of the store on ``collection``."""
    return f"store:{collection}"


def _kind(key: str) -> str:
    return key.split(":", 1)[0]


def read(key: str, where: str) -> Operation[int | None]:
    """The recorded version of ``key`` (``None`` when unversioned); raises
    ``SchemaTooNewError`` when it is newer than this release understands."""
    doc = yield from find_one(SCHEMA, {"_id": key})
    return _understood(doc, key, where)


def _understood(doc: Mapping[str, Any] | None, key: str, where: str) -> int | None:
    """The version in ``doc``; raises ``SchemaTooNewError`` when this release cannot read it."""
    found = version_of(doc)
    current = SCHEMA_VERSION[_kind(key)]
    if found is not None and found > current:
        written_by = (doc or {}).get("written_by", "a newer mongo-ckpt")
        raise SchemaTooNewError(
            f"{where} holds layout version {found} (written by {written_by}), newer than "
            f"version {current} that mongo-ckpt {library_version()} reads: upgrade mongo-ckpt "
            "to a newer release instead of reading this data with an older one"
        )
    return found


# What to do with data a development build wrote before the first release.
PRE_RELEASE_FIX = (
    "set up on a new database (or drop these collections) and write the data again"
)


def pre_release(key: str, where: str, found: int | None) -> SchemaUpgradeRequired:
    """The refusal of data that a development build wrote before the first release (a
    layout version below the current one, or none recorded): this release reads its own."""
    held = "no recorded layout version" if found is None else f"layout version {found}"
    return SchemaUpgradeRequired(
        f"{where} holds mongo-ckpt data with {held}, written by a development build before "
        f"the first release; mongo-ckpt {library_version()} reads layout version "
        f"{SCHEMA_VERSION[_kind(key)]} only: "
        + PRE_RELEASE_FIX
    )


def record(
    key: str, collections: Mapping[str, str], version: int | None = None
) -> Operation[None]:
    """Record ``version`` (default: the current one) of ``key``, never lowering a newer one."""
    update = {
        "$max": {"version": SCHEMA_VERSION[_kind(key)] if version is None else version},
        "$set": _recorded_by(collections),
    }
    yield from update_one(SCHEMA, {"_id": key}, update, upsert=True)


def record_first(
    key: str, collections: Mapping[str, str], version: int, where: str
) -> Operation[int]:
    """On new, empty collections: record ``version`` unless a version was recorded since
    ``read`` found none, and return the version stored (``SchemaTooNewError`` when this
    release cannot read it). A process of another release setting up the same new
    collections at the same moment then shares its layout, whichever recorded first."""
    update = {"$setOnInsert": {"version": version, **_recorded_by(collections)}}
    doc = yield from upserted(SCHEMA, {"_id": key}, update)
    found = _understood(doc, key, where)
    assert found is not None  # a document with a version: read or inserted
    return found


def _recorded_by(collections: Mapping[str, str]) -> dict[str, Any]:
    return {
        "collections": dict(collections),
        "written_by": f"mongo-ckpt {library_version()}",
        "updated_at": datetime.now(timezone.utc),
    }


def version_of(doc: Mapping[str, Any] | None) -> int | None:
    """The version in a schema document (``None`` for no document)."""
    return None if doc is None else int(doc["version"])


def read_version(database: Any, key: str) -> int | None:
    """The recorded version of ``key`` in a synchronous ``database`` (for tools such as
    ``mongo-ckpt doctor``); ``None`` when unversioned."""
    return version_of(database[SCHEMA_COLLECTION].find_one({"_id": key}))


def library_version() -> str:
    try:
        return version("mongo-ckpt")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "(source)"
