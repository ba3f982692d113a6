"""Re-encrypting stored values under a ``KeyRing``'s current key: ``rekey``.

A value stays under the key that wrote it until it is rewritten. ``rekey`` finds every
value whose type tag names another key (``msgpack+aes:k1``, or ``msgpack+aes``: a value of
``from_pycryptodome_aes``), decrypts it with the ring and encrypts the same plaintext
under the current key: the serialized bytes inside are never decoded, so a value reads
back exactly as before; each new ciphertext is decrypted again and compared before it is
written. A value is written back only if it is still as read (a filter on its old bytes):
a writer that replaced it meanwhile wins. A value in several parts (``payload``) gets its
new parts under the new value id first, marked ``payload.NEW_PARTS`` so that the writers
who remove parts their head does not name leave them, then its head names them (and the
old parts, ``REPLACED``); once the place is done, the old parts go and the mark with them
(a reader that read the old head still finds its parts meanwhile). A head a writer
replaced meanwhile keeps its own parts, and the new ones go instead. Every value written
is read back and counted only if it holds the new bytes.

The scan goes by ``_id`` in batches; running it again resumes a run stopped anywhere (it
selects the values still under other keys) and takes the values that instances holding an
older current key wrote meanwhile. The report counts what is left.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import UpdateOne

from mongo_ckpt import places
from mongo_ckpt.calls import (
    Document,
    Operation,
    bulk_write,
    count_documents,
    delete_many,
    find,
    find_one,
    update_many,
    update_one,
)
from mongo_ckpt.clock import server_now
from mongo_ckpt.keyring import KEY_ID, BoundValueError, KeyRing, ring_in
from mongo_ckpt.layout import BLOB_KEY, BLOBS, CHECKPOINTS, STORE, WRITE_KEY, WRITES
from mongo_ckpt.maintenance import DOOMED, STRAY_AGE, TOUCHED_AT
from mongo_ckpt.payload import NEW_PARTS, REPLACED, join, split
from mongo_ckpt.schema import SCHEMA

BATCH = 200
"""Values read per round: a round holds them twice (old and new bytes) in memory."""
_ENCRYPTED = re.compile(rf"\+aesb?(:{KEY_ID.pattern})?$")


@dataclass(frozen=True)
class Place:
    """Where a collection keeps serialized values: the fields of the type tag and bytes;
    ``parts_key``: the key fields of values stored in parts (``payload``)."""

    collection: str
    type_field: str
    data_field: str
    kind: str | None  # the kind of place values are bound to here (``places``)
    parts_key: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.collection}.{self.type_field.rpartition('.')[0] or 'value'}"


SAVER_PLACES = (
    Place(SCHEMA, "version_key.type", "version_key.data", None),  # a migration's (migration.py)
    Place(CHECKPOINTS, "checkpoint.type", "checkpoint.data", "checkpoint"),
    Place(CHECKPOINTS, "metadata_typed.type", "metadata_typed.data", "metadata"),
    Place(BLOBS, "type", "data", "value", BLOB_KEY),
    Place(WRITES, "type", "data", "write", WRITE_KEY),
)
STORE_PLACES = (Place(STORE, "value_typed.type", "value_typed.data", "item"),)


@dataclass
class Rekeyed:
    """What ``rekey`` did, by place (``collection.field``, collections by logical name):
    values now under the current key, read back (``rekeyed``); values a writer replaced or
    deleted while they were re-encrypted, whose own value stands (``changed``); values
    still under another key when the run ended (``left``: run it again)."""

    rekeyed: Counter[str] = field(default_factory=Counter)
    changed: Counter[str] = field(default_factory=Counter)
    left: Counter[str] = field(default_factory=Counter)

    @property
    def done(self) -> bool:
        """Whether no value was left under another key."""
        return not +self.left


def ring_of(serde: SerializerProtocol | None) -> KeyRing:
    """The ``KeyRing`` of ``serde``; ``TypeError`` saying what to pass if it has none."""
    ring = ring_in(serde)
    if ring is None:
        raise TypeError(
            "rekey re-encrypts values under a KeyRing's current key: open this saver, store "
            "or cache with serde=mongo_ckpt.keyring_serializer(keys, current), where keys "
            f"holds every key values were written with (its serde is {type(serde).__name__})"
        )
    return ring


def selection(place: Place, ring: KeyRing) -> dict[str, Any]:
    """The values at ``place`` encrypted under another key than ``ring``'s current one (or
    not bound where the ring binds), and heads whose old parts a cut run left
    (``REPLACED``)."""
    stale = {place.type_field: {"$regex": _ENCRYPTED.pattern, "$nin": [_own(place, ring)]}}
    return {"$or": [stale, {REPLACED: {"$exists": True}}]} if place.parts_key else stale


def _own(place: Place, ring: KeyRing) -> re.Pattern[str]:
    """The type tags of values ``ring`` leaves as they are at ``place``."""
    bound = "b" if ring.bind and place.kind else "b?"
    return re.compile(rf"\+aes{bound}:{re.escape(ring.current)}$")


def _get(doc: Mapping[str, Any], dotted: str) -> Any:
    for name in dotted.split("."):
        doc = doc[name]
    return doc


@dataclass
class _Swap:
    """One value's re-encryption: the head's ``_id`` and old bytes, its new fields, and
    for a value in parts the new non-head parts and the old value id."""

    id: Any
    old: bytes
    new: dict[str, Any]
    parts: list[UpdateOne] = field(default_factory=list)
    key: dict[str, Any] = field(default_factory=dict)
    old_vid: Any = None


def _swap(ring: KeyRing, place: Place, head: Mapping[str, Any], data: bytes) -> _Swap:
    inner, _, cipher = _get(head, place.type_field).partition("+")
    try:
        with places.at(place.kind, head):
            name, ciphertext = ring.reencrypt(cipher, data)
    except BoundValueError:
        raise
    except ValueError as error:  # pycryptodome: "MAC check failed"
        raise ValueError(
            f"{place.label} document {head['_id']!r} does not decrypt ({error}): it was "
            "altered, or written with another key under the same id; nothing after it was "
            "re-encrypted: restore or delete that document, then run rekey again"
        ) from None
    type_ = f"{inner}+{name}"
    if not place.parts_key:
        new = {place.type_field: type_, place.data_field: ciphertext}
        return _Swap(head["_id"], _get(head, place.data_field), new)
    *tails, first = split(type_, ciphertext)
    first.pop("part")
    key = {name: head[name] for name in place.parts_key}
    kept = {name: head[name] for name in ("channel", "task_path", "join") if name in head}
    parts = [
        UpdateOne(
            {**key, "part": part.pop("part")},
            {
                "$setOnInsert": {**kept, **part, NEW_PARTS: True},
                "$currentDate": {TOUCHED_AT: True},
            },
            upsert=True,
        )
        for part in tails
    ]
    return _Swap(head["_id"], head["data"], first, parts, key, head.get("vid"))


def rekey(
    ring: KeyRing, places: Sequence[Place], batch_size: int = BATCH
) -> Operation[Rekeyed]:
    """Re-encrypt every value at ``places`` under ``ring``'s current key (module docstring)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an int of at least 1, got {batch_size!r}")
    report = Rekeyed()
    for place in places:
        wanted = selection(place, ring)
        swapped: list[Mapping[str, Any]] = []  # heads whose old parts go once the place is done
        last: Any = None
        while True:
            after = {} if last is None else {"_id": {"$gt": last}}
            heads = yield from find(
                place.collection, {**wanted, **after}, sort=[("_id", 1)], limit=batch_size
            )
            if not heads:
                break
            last = heads[-1]["_id"]
            swaps = []
            for head in heads:
                if REPLACED in head:  # swapped by an earlier run, cut before it finished
                    yield from _finish(place, head)
                if _own(place, ring).search(_get(head, place.type_field)):
                    continue
                data = yield from _whole(place, head)
                if data is not None:
                    swaps.append(_swap(ring, place, head, data))
            if swaps:
                yield from _write(place, swaps, report, swapped)
        for done in swapped:
            yield from _finish(place, done)
        if place.parts_key:
            yield from _drop_left_parts(place)
        report.left[place.label] = yield from count_documents(place.collection, wanted)
    return report


def _whole(place: Place, head: Mapping[str, Any]) -> Operation[bytes | None]:
    """The bytes of the value ``head`` starts; ``None`` if it is not whole (a write cut or
    under way: its writer finishes or removes it)."""
    if head.get("parts", 1) == 1:
        return bytes(_get(head, place.data_field))
    _, data = yield from value_parts(place.collection, head, place.parts_key)
    return data


def value_parts(
    collection: str, head: Mapping[str, Any], key_fields: tuple[str, ...]
) -> Operation[tuple[list[Document], bytes | None]]:
    """The other parts of the value ``head`` starts (none for a value in one part), and its
    joined bytes (``None`` if it is not whole: a write cut or under way)."""
    tails: list[Document] = []
    if head.get("parts", 1) > 1:
        key = {name: head[name] for name in key_fields}
        tails = yield from find(collection, {**key, "vid": head.get("vid"), "part": {"$ne": 0}})
    found = join([head, *tails], key_fields).get(tuple(head[name] for name in key_fields))
    return tails, None if found is None else found[1][1]


def _write(
    place: Place, swaps: Sequence[_Swap], report: Rekeyed, swapped: list[Mapping[str, Any]]
) -> Operation[None]:
    """Write ``swaps`` back where their values are still as read, then read them back;
    the heads swapped to new parts join ``swapped``."""
    whole = [s for s in swaps if not s.parts]
    if whole:
        requests = [
            UpdateOne({"_id": s.id, place.data_field: s.old}, {"$set": s.new}) for s in whole
        ]
        yield from bulk_write(place.collection, requests, ordered=False)
    for swap in swaps:
        if swap.parts and (yield from _write_in_parts(place, swap)):
            head = {"_id": swap.id, **swap.key, "vid": swap.new["vid"], REPLACED: swap.old_vid}
            swapped.append(head)
    ids = [swap.id for swap in swaps]
    stored = yield from find(
        place.collection, {"_id": {"$in": ids}}, projection={place.data_field: 1}
    )
    now = {doc["_id"]: bytes(_get(doc, place.data_field)) for doc in stored}
    for swap in swaps:
        landed = now.get(swap.id) == bytes(swap.new[place.data_field])
        (report.rekeyed if landed else report.changed)[place.label] += 1


def _write_in_parts(place: Place, swap: _Swap) -> Operation[bool]:
    """New parts first (``NEW_PARTS``), then the head swapped to them if it is still as
    read, naming the old parts in ``REPLACED``; whether it was. Unswapped, the new parts
    go, unless the head names them (another run swapped it: the parts of a value are the
    same in every run, ``KeyRing.reencrypt``)."""
    yield from bulk_write(place.collection, swap.parts, ordered=True)
    result = yield from update_one(
        place.collection,
        # Not a value maintenance is deleting: its new parts would outlive it.
        {"_id": swap.id, "data": swap.old, "vid": swap.old_vid, DOOMED: {"$exists": False}},
        {"$set": {**swap.new, REPLACED: swap.old_vid}},
        upsert=False,
    )
    if result.matched_count:
        return True
    head = yield from find_one(place.collection, {"_id": swap.id})
    if head is None or head.get("vid") != swap.new["vid"]:
        new = {**swap.key, "part": {"$ne": 0}, "vid": swap.new["vid"]}
        yield from delete_many(place.collection, new)
    return False


def _finish(place: Place, head: Mapping[str, Any]) -> Operation[None]:
    """After a head was swapped to new parts: its old parts deleted unless the head names
    them again (a copy put the old head back), the new ones unmarked (deleted instead if
    the head no longer names them), then ``REPLACED``."""
    key = {name: head[name] for name in place.parts_key}
    tails = {**key, "part": {"$ne": 0}}
    now = yield from find_one(place.collection, {"_id": head["_id"]})
    named = None if now is None else now.get("vid")
    if named != head[REPLACED]:
        yield from delete_many(place.collection, {**tails, "vid": head[REPLACED]})
    if named == head["vid"]:
        unmark = {"$unset": {NEW_PARTS: ""}}
        yield from update_many(place.collection, {**tails, "vid": head["vid"]}, unmark)
    else:
        yield from delete_many(place.collection, {**tails, "vid": head["vid"], NEW_PARTS: True})
    marked = {"_id": head["_id"], REPLACED: head[REPLACED]}
    yield from update_one(place.collection, marked, {"$unset": {REPLACED: ""}}, upsert=False)


def _drop_left_parts(place: Place) -> Operation[None]:
    """Parts a run cut between writing them and its swap left marked (``NEW_PARTS``), older
    than ``maintenance.STRAY_AGE`` by the server's clock: deleted unless their head names
    them (then unmarked). No writer's clean-up removes a marked part."""
    cutoff = (yield from server_now()) - STRAY_AGE
    left = yield from find(
        place.collection, {NEW_PARTS: True, TOUCHED_AT: {"$lt": cutoff}}, projection={"data": 0}
    )
    for part in left:
        key = {name: part[name] for name in place.parts_key}
        head = yield from find_one(place.collection, {**key, "part": 0})
        same = {"_id": part["_id"], NEW_PARTS: True, TOUCHED_AT: {"$lt": cutoff}}
        if head is not None and head.get("vid") == part["vid"]:
            yield from update_many(place.collection, same, {"$unset": {NEW_PARTS: ""}})
        else:
            yield from delete_many(place.collection, same)
