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

The store reads versions 2 to 5. Its ``setup()`` records 5 on new collections (as the
saver does), refuses items without a recorded version or at version 1 (pre-release,
``SchemaUpgradeRequired``), and takes a collection at 2, 3 or 4 as found; the later
versions are recorded by the upgrade step (``store.upgrade()``, ``mongo-ckpt upgrade
--store``), run once every process runs a release that reads them; until then the store
writes what the recorded version reads. Once it is recorded, earlier releases refuse the
data at setup (``SchemaTooNewError``).

Store versions:
  1. One document per item (a development build's; refused).
  2. The namespace registry beside the items (``store/registry.py``). A reader of version 1
     would write items without their entries.
  3. Quiet puts: a put leaves a registry entry that needs no change as it was, its
     ``version`` moving only when a listing has claimed it. No data changes, but a release
     reading version 2 settles entries without claiming them and could then write an
     expiry that misses such a put's item. Recorded by ``setup()`` only on a new, empty
     collection; on existing data by ``store.upgrade()`` (``mongo-ckpt upgrade --store``).
  4. Batch documents: a batch into many namespaces names them in one document, which
     listings fold into the entries. A reader of version 3 would not list those
     namespaces. Recorded like version 3.
  5. The registry on the items' indexes: entries carry marks in ``prefixes`` and an
     ``expires_at`` equal to ``listed_until``; the registry's own indexes are dropped. A
     reader of version 4 would raise ``listed_until`` alone, and the items' TTL index
     would delete the entry too early. Recorded like version 3, by the upgrade that also
     gives existing entries those fields.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from time import monotonic
from typing import Any

from mongo_ckpt.calls import Operation, find_one, update_one, upserted
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import SCHEMA as SCHEMA  # logical name, in ``saver.collections``
from mongo_ckpt.layout import SCHEMA_COLLECTION as SCHEMA_COLLECTION

SAVER_SCHEMA_VERSION = 7
STORE_SCHEMA_VERSION = 5
# The oldest store version this release reads; a collection at it (or 3, or 4) stays there
# until ``store.upgrade()``: a release that reads version 2 settles registry entries without
# claiming them, which quiet puts need.
STORE_OLDEST_VERSION = 2
# The recorded store version from which a put may leave an unclaimed entry as it was.
STORE_QUIET_PUTS_VERSION = 3
# The recorded store version from which a batch may name its namespaces in one batch
# document, which releases before it would not list.
STORE_BATCH_DOCUMENTS_VERSION = 4
# The recorded store version from which the namespace registry is on the items' indexes
# (its entries expire by ``expires_at``), which releases before it would not keep.
STORE_ITEM_INDEXES_VERSION = 5
SCHEMA_VERSION = {"saver": SAVER_SCHEMA_VERSION, "store": STORE_SCHEMA_VERSION}
# The oldest version each reads: below it, data of a pre-release layout (refused).
OLDEST_VERSION = {"saver": SAVER_SCHEMA_VERSION, "store": STORE_OLDEST_VERSION}
# While a store's recorded version is below the current one, how often it reads it again,
# so an upgrade by another process takes effect without a restart.
LAYOUT_RECHECK_SECONDS = 60.0


class SchemaTooNewError(MongoCkptError, RuntimeError):
    """The data was written by a newer mongo-ckpt whose layout this version cannot read."""


class SchemaUpgradeRequired(MongoCkptError, RuntimeError):
    """The data is not in a layout this release reads: a pre-release one, or
    langgraph-checkpoint-mongodb's (``mongo-ckpt migrate`` converts it)."""


class LayoutRecheck:
    """When a store whose recorded layout version is older than the current one reads it
    again: once ``LAYOUT_RECHECK_SECONDS`` passed since the last read, by one of
    the operations running at that moment (it claims the read before sending it)."""

    def __init__(self) -> None:
        self._next = 0.0
        self._lock = threading.Lock()  # threads of one sync saver or store claim one read

    def read(self) -> None:
        """The version was just read (by ``setup`` or a recheck)."""
        self._next = monotonic() + LAYOUT_RECHECK_SECONDS

    def claim(self) -> bool:
        """Whether the version is due to be read again; the read is then claimed, so the
        operations running beside this one do not send it too."""
        with self._lock:
            if monotonic() < self._next:
                return False
            self.read()
            return True

    def reread(self, key: str, where: str) -> Operation[int | None]:
        """``read`` of ``key``, claimed; if it fails, the next operation reads again (so a
        newer version it raised on keeps being refused, as at setup)."""
        try:
            return (yield from read(key, where))
        except Exception:
            self._next = 0.0
            raise


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
    oldest, current = OLDEST_VERSION[_kind(key)], SCHEMA_VERSION[_kind(key)]
    reads = f"version {current} only" if oldest == current else f"versions {oldest} to {current}"
    return SchemaUpgradeRequired(
        f"{where} holds mongo-ckpt data with {held}, written by a development build before "
        f"the first release; mongo-ckpt {library_version()} reads layout {reads}: "
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
