"""``copy_thread``: a thread's checkpoints, values and writes copied onto another thread,
beside live writers and maintenance (the methods of ``CheckpointOperations`` that copy)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from bson import Binary
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import ReplaceOne, UpdateOne

from mongo_ckpt import maintenance, places, thread_settings
from mongo_ckpt.calls import (
    Document,
    Operation,
    WriteRequest,
    bulk_write,
    find,
    find_cursor,
    next_batch,
    update_many,
)
from mongo_ckpt.documents import checkpoint_update
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import coerce_id
from mongo_ckpt.keyring import BOUND_TAG, BoundValueError, KeyRing, is_bound, ring_in
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINT_KEY,
    CHECKPOINTS,
    WRITE_KEY,
    WRITES,
    blob_join,
    write_join,
)
from mongo_ckpt.payload import NEW_PARTS, REPLACED, split
from mongo_ckpt.reading import (
    SKELETON,
    Key,
    blob_keys_query,
    key_of,
    keys_query,
    needed_values,
)
from mongo_ckpt.rekeying import value_parts

COPY_BATCH = 200


_KEY_FIELDS = {
    CHECKPOINTS: CHECKPOINT_KEY,
    BLOBS: (*BLOB_KEY, "part"),
    WRITES: (*WRITE_KEY, "part"),
}


COPIED_FROM = "copied_from"  # on a copied checkpoint: the thread it was copied from


class CopyOperations:
    """``copy_thread`` and its target check (a part of ``CheckpointOperations``)."""

    serde: SerializerProtocol

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        source = coerce_id(source_thread_id, "source_thread_id")
        target = coerce_id(target_thread_id, "target_thread_id")
        if source == target:
            raise ValueError("copy_thread needs two different thread ids")
        yield from self.check_copy_target(source, target)
        # The checkpoints as they are now, then the values and writes they name (exact
        # keys: nothing unnamed, which no maintenance of a deleted target would remove),
        # then those checkpoints, as in ``put``: a checkpoint written during the copy
        # (whose values may have been missed) is not copied.
        query = {"thread_id": source}
        ring = ring_in(self.serde)
        if ring is None:  # bound values are copied only by their ring: refused before writing
            tagged = {CHECKPOINTS: "checkpoint.type", BLOBS: "type", WRITES: "type"}
            for collection, tag in tagged.items():
                bound = {**query, tag: {"$regex": BOUND_TAG}}
                if (yield from find(collection, bound, projection={"_id": 1}, limit=1)):
                    raise _unbound_copy(source)
        ids = yield from find(CHECKPOINTS, query, projection=SKELETON)
        if ids:
            values = needed_values(ids)
            if values:
                yield from _copy(BLOBS, blob_keys_query(values), target, ring)
            yield from _copy(WRITES, keys_query(key_of(s) for s in ids), target, ring)
        copied: set[Key] = set()
        for start in range(0, len(ids), COPY_BATCH):
            batch = [doc["_id"] for doc in ids[start : start + COPY_BATCH]]
            batch_query = {**query, "_id": {"$in": batch}}
            copied |= yield from _copy(CHECKPOINTS, batch_query, target, ring)
        # Checkpoints deleted from the source meanwhile were not copied: what the copy
        # wrote for them alone is marked for maintenance (``delete_thread`` of the target
        # removes it with the rest).
        missed = [s for s in ids if key_of(s) not in copied]
        if missed:
            unused = needed_values(missed) - needed_values(s for s in ids if key_of(s) in copied)
            yield from maintenance.mark_values({(target, *k[1:]) for k in unused})
            writes = keys_query((target, *key_of(s)[1:]) for s in missed)
            yield from update_many(WRITES, writes, maintenance.MARK)
        yield from thread_settings.copy(source, target)


    def check_copy_target(self, source_thread_id: str, target_thread_id: str) -> Operation[None]:
        """Raise ``ThreadExistsError`` when the target has checkpoints of its own: copying
        would merge two histories. Checkpoints an earlier (maybe cut) copy of the same
        source wrote do not count, so the same copy again is harmless."""
        source = coerce_id(source_thread_id, "source_thread_id")
        target = coerce_id(target_thread_id, "target_thread_id")
        own = {"thread_id": target, COPIED_FROM: {"$ne": source}}
        if (yield from find(CHECKPOINTS, own, projection={"_id": 1}, limit=1)):
            raise ThreadExistsError(target)


class ThreadExistsError(MongoCkptError, ValueError):
    """``copy_thread`` onto a thread that already has checkpoints of its own."""

    def __init__(self, target_thread_id: str) -> None:
        super().__init__(
            f"thread {target_thread_id!r} already has checkpoints: copying onto it would merge "
            "two histories; delete it first (delete_thread, `mongo-ckpt delete`) or copy to "
            "a new thread id"
        )
        self.target_thread_id = target_thread_id


def _copy(
    collection: str, query: Mapping[str, Any], target: str, ring: KeyRing | None
) -> Operation[set[Key]]:
    """Copy the documents ``query`` matches onto thread ``target``; their source keys.

    Values bound to their place (``places``) are encrypted again at their new place with
    ``ring``: values and writes are then copied head first, a bound one joined from its
    parts, re-encrypted and split again."""
    copied: set[Key] = set()
    by_head = ring is not None and collection != CHECKPOINTS
    cursor = yield from find_cursor(collection, {**query, "part": 0} if by_head else query)
    while docs := (yield from next_batch(cursor, COPY_BATCH)):
        requests: builtins.list[WriteRequest] = []
        for doc in docs:
            if ring is None and any(map(is_bound, _tags(doc))):
                raise _unbound_copy(doc["thread_id"])
            if by_head:
                assert ring is not None
                requests += yield from _copied_value(collection, doc, target, ring)
            else:
                moved = doc if ring is None else _rebound_checkpoint(doc, target, ring)
                requests.append(_copy_request(collection, moved, target))
        if requests:
            yield from bulk_write(collection, requests, ordered=False)
        copied.update(key_of(doc, _KEY_FIELDS[collection]) for doc in docs)
    return copied


def _unbound_copy(source: str) -> BoundValueError:
    return BoundValueError(
        f"thread {source!r} holds values bound to their place: copy it with a saver whose "
        "serde holds their KeyRing (keyring_serializer; the command line: MONGO_CKPT_KEYS)"
    )


def _tags(doc: Mapping[str, Any]) -> builtins.list[str]:
    fields = (doc, doc.get("checkpoint"), doc.get("metadata_typed"))
    return [f["type"] for f in fields if isinstance(f, Mapping) and "type" in f]


def _rebound_checkpoint(doc: Document, target: str, ring: KeyRing) -> Document:
    """Checkpoint document ``doc`` with its bound fields encrypted again for ``target``."""
    moved = {**doc, "thread_id": target}
    out = dict(doc)
    for field, kind in (("checkpoint", "checkpoint"), ("metadata_typed", "metadata")):
        stored = doc.get(field)
        if stored is not None and is_bound(stored["type"]):
            inner, _, cipher = stored["type"].partition("+")
            with places.at(kind, doc):
                name, data = ring.reencrypt(cipher, bytes(stored["data"]), places.of(kind, moved))
            out[field] = {"type": f"{inner}+{name}", "data": Binary(data)}
    return out


def _copied_value(
    collection: str, head: Document, target: str, ring: KeyRing
) -> Operation[builtins.list[WriteRequest]]:
    """The requests copying the value ``head`` starts, with its parts: as stored, or, bound
    to its place, joined, encrypted again at its place on ``target`` and split again
    (nothing for a value not whole: a write cut, or under way)."""
    kind, fields = ("value", BLOB_KEY) if collection == BLOBS else ("write", WRITE_KEY)
    key = {name: head[name] for name in fields}
    tails, whole = yield from value_parts(collection, head, fields)
    if not is_bound(head["type"]):
        return [_copy_request(collection, doc, target) for doc in (head, *tails)]
    if whole is None:
        return []
    inner, _, cipher = head["type"].partition("+")
    with places.at(kind, head):
        at_target = places.of(kind, {**head, "thread_id": target})
        name, data = ring.reencrypt(cipher, whole, at_target)
    *parts, first = split(f"{inner}+{name}", data)
    first.pop("part")
    kept = {name: head[name] for name in ("channel", "task_path") if name in head}
    head = {k: v for k, v in head.items() if k != REPLACED}
    docs = [{**head, **first}, *({**key, **kept, **part} for part in parts)]
    return [_copy_request(collection, doc, target) for doc in docs]


def _copy_request(collection: str, doc: Document, target: str) -> WriteRequest:
    source = doc["thread_id"]
    # A mark is the source's maintenance's (set on a value or write a checkpoint being
    # deleted names, maybe lifted again later): copied, it would let any maintenance call
    # delete the copy before the checkpoints naming it are copied. What the copy wrote
    # for checkpoints it missed alone, it marks itself.
    # A mark of a rekey in flight is its own (``rekeying``): a part it marks is either named
    # by its head, or not part of any value.
    doc = {k: v for k, v in doc.items() if k not in ("_id", maintenance.DOOMED, NEW_PARTS)}
    doc["thread_id"] = target
    key = {f: doc.get(f) for f in _KEY_FIELDS[collection]}
    if collection == CHECKPOINTS:
        # A tombstone belongs to the source's maintenance, and the copy is the target's
        # activity now: ``created_at`` is the server's time of the copy.
        own = (maintenance.DOOMED, maintenance.DOOMED_AT, "created_at")
        copied = {k: v for k, v in doc.items() if k not in own} | {COPIED_FROM: source}
        return UpdateOne(key, checkpoint_update(copied), upsert=True)
    if collection == BLOBS:
        doc["join"] = blob_join(*key_of(doc, BLOB_KEY))
    elif collection == WRITES:
        doc["join"] = write_join(*key_of(doc))
    return ReplaceOne(key, doc, upsert=True)
