"""Layout versions: the small metadata document ``setup()`` reads and records.

Each saver (keyed by its checkpoints collection) and each store (keyed by its
collection) has one document in ``SCHEMA_COLLECTION`` of its database::

    {"_id": "saver:checkpoints", "version": 8, "collections": {...}, "updated_at": ...}

``setup()`` reads it first. At the current version nothing else runs (one round
trip). A newer version raises ``SchemaTooNewError`` before any data is read or written.
Versions only go up (``$max``).

The saver reads and writes one layout, version 8 (the numbers below it were development
builds before the first release; 6 stored compressed values under the serializer's own
type tag, which a reader that did not know compression decoded as garbage; 7 had no
collection of thread settings, so its sweep would expire a thread kept forever). Its
``setup()`` records it on new, empty collections, only if no version was recorded since it
read none (``record_first``), and refuses data recorded below it or not recorded at all
(``SchemaUpgradeRequired``, nothing written). Version 8 is: ``join`` keys on value and
write documents, a sparse ``doomed`` index (maintenance marks what it deletes), list
deltas (``listdelta.py``), slim checkpoint documents (``documents.checkpoint_document``),
compressed values whose type tag names the compression (``payload.split``), and the
settings of single threads (their own ``ttl``) in a collection of their own.

The next layout follows the same rule: an encoding added to stored values is named in
their type tag (``msgpack+zlib``), so a reader that does not know it fails loudly
instead of misreading. It is one ``Rung`` of its kind's ``Ladder`` (``LADDERS``) and, when
existing data changes, one step method on the kind's operations; ``climb`` runs the steps
for ``setup()`` and ``upgrade()`` of both kinds.

The store reads and writes one layout, version 6 (1 to 5 were development builds), the
same way: recorded on new collections, anything else of ours refused. Version 6 is: the
items alone in the store's collection, the namespace registry in a collection of its own
(``store/registry.py``) with batch documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mongo_ckpt.calls import Operation, find_one, update_one, upserted
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import SCHEMA as SCHEMA  # logical name, in ``saver.collections``
from mongo_ckpt.layout import SCHEMA_COLLECTION as SCHEMA_COLLECTION


@dataclass(frozen=True)
class Rung:
    """A layout version this release reads. ``step``: the name of the operations' method
    that rewrites existing data in place to reach it (``None``: nothing to rewrite);
    ``by_setup``: whether ``setup()`` takes existing data there by itself, or only
    ``upgrade()`` (run once no process of a release that cannot read it is left; until
    then this release must write what the version below it reads)."""

    version: int
    step: str | None = None
    by_setup: bool = True


@dataclass(frozen=True)
class Ladder:
    """The layout versions of one kind this release reads, oldest first."""

    rungs: tuple[Rung, ...]

    @property
    def oldest(self) -> int:
        return self.rungs[0].version

    @property
    def current(self) -> int:
        return self.rungs[-1].version

    @property
    def new(self) -> int:
        """What new collections get: the highest version setup takes data to by itself
        (one only ``upgrade()`` takes would lock out the processes of the release before,
        still running beside this one)."""
        return [self.rungs[0], *self.above(self.oldest, upgrade=False)][-1].version

    def above(self, found: int, *, upgrade: bool) -> list[Rung]:
        """The rungs to climb from ``found``: on ``upgrade`` every one above it, on setup
        those below the first that only ``upgrade()`` takes."""
        climbed = []
        for rung in (r for r in self.rungs if r.version > found):
            if not (upgrade or rung.by_setup):
                break
            climbed.append(rung)
        return climbed


# One layout each before the first release; a new layout is one rung here and, when data
# changes, one step method on the kind's operations.
LADDERS = {"saver": Ladder((Rung(8),)), "store": Ladder((Rung(6),))}
SAVER_SCHEMA_VERSION = LADDERS["saver"].current
STORE_SCHEMA_VERSION = LADDERS["store"].current


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
    found, _ = yield from read_record(key, where)
    return found


def read_record(key: str, where: str) -> Operation[tuple[int | None, dict[str, str]]]:
    """``read``, and the collections recorded with the version (by logical name)."""
    doc = yield from find_one(SCHEMA, {"_id": key})
    return _understood(doc, key, where), dict((doc or {}).get("collections", {}))


def _understood(doc: Mapping[str, Any] | None, key: str, where: str) -> int | None:
    """The version in ``doc``; raises ``SchemaTooNewError`` when this release cannot read it."""
    found = version_of(doc)
    current = LADDERS[_kind(key)].current
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
    ladder = LADDERS[_kind(key)]
    reads = (
        f"version {ladder.current} only"
        if ladder.oldest == ladder.current
        else f"versions {ladder.oldest} to {ladder.current}"
    )
    return SchemaUpgradeRequired(
        f"{where} holds mongo-ckpt data with {held}, written by a development build before "
        f"the first release; mongo-ckpt {library_version()} reads layout {reads}: "
        + PRE_RELEASE_FIX
    )


def climb(
    key: str, where: str, found: int, collections: Mapping[str, str], steps: object,
    *, upgrade: bool = False,
) -> Operation[int]:
    """The layout of ``key`` taken from ``found`` (a recorded version this release does not
    find too new) up its ladder: below the oldest rung ``SchemaUpgradeRequired``, nothing
    written; then each rung this call takes (``Ladder.above``), its step (a method of
    ``steps``) run, then its version recorded. The version reached."""
    ladder = LADDERS[_kind(key)]
    if found < ladder.oldest:
        raise pre_release(key, where, found)
    for rung in ladder.above(found, upgrade=upgrade):
        if rung.step is not None:
            yield from getattr(steps, rung.step)()
        yield from record(key, collections, rung.version)
        found = rung.version
    return found


def record(key: str, collections: Mapping[str, str], version: int) -> Operation[None]:
    """Record ``version`` of ``key``, never lowering a newer one."""
    update = {"$max": {"version": version}, "$set": _recorded_by(collections)}
    yield from update_one(SCHEMA, {"_id": key}, update, upsert=True)


def record_first(key: str, collections: Mapping[str, str], where: str) -> Operation[int]:
    """On new, empty collections: record the version new collections get (``Ladder.new``)
    unless a version was recorded since ``read`` found none, and return the version stored
    (``SchemaTooNewError`` when this release cannot read it). A process of another release
    setting up the same new collections at the same moment then shares its layout,
    whichever recorded first."""
    version = LADDERS[_kind(key)].new
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
