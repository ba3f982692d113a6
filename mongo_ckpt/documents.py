"""How a checkpoint is stored: pure builders of documents and write requests."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
from bson import Binary
from langgraph.checkpoint.base import WRITES_IDX_MAP, ChannelVersions, Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import DeleteMany, UpdateOne

from mongo_ckpt import places
from mongo_ckpt.checkpoint_fields import stored_metadata
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import as_id
from mongo_ckpt.layout import PENDING, blob_join, write_join
from mongo_ckpt.listdelta import Delta, values_entries
from mongo_ckpt.maintenance import DOOMED, TOUCHED_AT
from mongo_ckpt.payload import NEW_PARTS, may_span_parts, split

_MAX_INT64 = 2**63 - 1


def plain(value: Any) -> tuple[bool, Any]:
    """Convert ``value`` to a BSON-safe literal; ``(False, None)`` if it has none."""
    if value is None or isinstance(value, (str, bool, float)):
        return True, value
    if isinstance(value, int):
        return (-_MAX_INT64 <= value <= _MAX_INT64), value
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            ok, pv = plain(v)
            if not ok or not _plain_key(k):
                return False, None
            out[k] = pv
        return True, out
    return False, None


def plain_metadata(metadata: Mapping[str, Any], keys: Collection[str] | None) -> dict[str, Any]:
    """The filterable copy of checkpoint metadata: ``keys`` only (all if ``None``)."""
    out = {}
    for k, v in metadata.items():
        if keys is not None and k not in keys:
            continue
        ok, pv = plain(v)
        if ok and _plain_key(k):
            out[k] = pv
    return out


def _plain_key(key: Any) -> bool:
    """Whether ``key`` can be a field name in the filterable copy (the serialized copy
    keeps every key): not empty, no leading ``$``, no ``.`` and no NUL."""
    return (
        type(key) is str
        and bool(key)
        and not key.startswith("$")
        and not ("." in key or "\x00" in key)
    )


MAX_CHECKPOINT_BYTES = 15 * 2**20
"""Largest checkpoint document (metadata up to twice, plus the checkpoint without its
channel values) ``put`` accepts: below MongoDB's 16 MiB, leaving room for the update."""


def check_checkpoint_size(doc: Mapping[str, Any]) -> None:
    """Refuse, before anything is written, a checkpoint document MongoDB would refuse."""
    size = len(bson.encode(doc))
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"checkpoint {doc.get('checkpoint_id')!r} of thread {doc.get('thread_id')!r} "
            f"needs a {size}-byte document, over the {MAX_CHECKPOINT_BYTES}-byte (15 MiB) "
            "limit: its metadata is stored twice, so keep metadata well under 7 MiB and "
            "put large data in channel values"
        )


def typed(
    serde: SerializerProtocol, value: Any, kind: str | None = None, key: Mapping[str, Any] = {}
) -> dict[str, Any]:
    """A small serialized value stored inline: ``{"type": ..., "data": ...}``; at the
    ``kind`` place of ``key`` (``places``)."""
    with places.at(kind, key):
        type_, data = serde.dumps_typed(value)
    return {"type": type_, "data": Binary(data)}


# Fields a checkpoint document holds only when set (``checkpoint_update`` unsets them
# otherwise, so a rewrite never keeps an earlier attempt's).
OPTIONAL_FIELDS = ("metadata_typed", "run_id", "replay")


def _reads_back(plain: Any, serialized: Any) -> bool:
    """Whether the plain copy ``plain``, once stored as BSON, reads back exactly as the
    serializer gives ``serialized`` back: the same types (``True`` is not ``1``, an enum
    member is not its value, an int64 comes back as ``bson.Int64``), values and keys."""
    return _same(bson.decode(bson.encode({"m": plain}))["m"], serialized)


def _same(stored: Any, serialized: Any) -> bool:
    if type(stored) is not type(serialized):
        return False
    if type(stored) is list:
        return len(stored) == len(serialized) and all(map(_same, stored, serialized))
    if type(stored) is dict:
        return list(stored) == list(serialized) and all(
            _same(stored[k], serialized[k]) for k in stored
        )
    return bool(stored == serialized)


def checkpoint_document(
    key: Mapping[str, str],
    checkpoint: Checkpoint,
    metadata: Mapping[str, Any],
    parent_id: str | None,
    serde: SerializerProtocol,
    filterable_keys: Collection[str] | None,
    chains: Mapping[str, Sequence[Any]] | None = None,
) -> dict[str, Any]:
    """The ``checkpoints`` document: everything but the channel values. Slim: the
    serialized metadata only when the plain copy does not read back exactly,
    ``OPTIONAL_FIELDS`` only when set, the serialized checkpoint without its id (the
    document's ``checkpoint_id``).

    ``chains`` gives, per channel, the versions its value is rebuilt from (list deltas'
    bases first, the value's own version last); by default each value's own version.
    """
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    if chains is None:
        chains = {ch: [versions[ch]] for ch in values if ch in versions}
    left_out = ("channel_values", "id")
    plain = plain_metadata(metadata, filterable_keys)
    doc: dict[str, Any] = {
        **key,
        "parent_checkpoint_id": parent_id,
        "checkpoint": typed(
            serde, {k: v for k, v in checkpoint.items() if k not in left_out}, "checkpoint", key
        ),
        "metadata": plain,
        "metadata_typed": typed(serde, metadata, "metadata", key),
        "run_id": as_id(metadata.get("run_id")),
        # Channels whose value at this checkpoint is a stored blob, with its version,
        # each preceded by the list-delta bases it is rebuilt from (listdelta.py).
        "values": values_entries(chains),
        # DeltaChannels without a stored value here, rebuilt from history: LangGraph counts
        # updates since the last snapshot for exactly those channels.
        "replay": [
            ch
            for ch in metadata.get("counters_since_delta_snapshot") or ()
            if ch in versions and ch not in values
        ],
    }
    if _reads_back(plain, stored_metadata(serde, doc)):
        del doc["metadata_typed"]
    # An optional field is left out when unset: no run id, nothing to replay ("" is a run id).
    return {k: v for k, v in doc.items() if k not in OPTIONAL_FIELDS or v not in (None, [])}


def checkpoint_update(doc: Mapping[str, Any], *, pending: bool = False) -> dict[str, Any]:
    """The upsert of checkpoint document ``doc``; ``created_at`` (it decides retention) is
    the server's time. ``pending``: inserted invisible (``layout.PENDING``), to be confirmed
    once its parent probe ran; a stored checkpoint it rewrites stays visible."""
    update: dict[str, Any] = {"$set": doc, "$currentDate": {"created_at": True}}
    unset = {name: "" for name in OPTIONAL_FIELDS if name not in doc}
    if unset:
        update["$unset"] = unset
    if pending:
        update["$setOnInsert"] = {PENDING: True}
    return update


def confirm_checkpoint(key: Mapping[str, str]) -> UpdateOne:
    """Makes the checkpoint ``key`` visible (after its parent probe, in the same bulk write)."""
    return UpdateOne(dict(key), {"$unset": {PENDING: ""}})


@dataclass
class ValueWrites:
    """The ordered requests writing some values, and the keys of those that are
    first-write-wins and in several parts: after the write, parts of another attempt
    under those keys (a cut or losing one) are found and removed (``payload.stray_parts``)."""

    requests: list[Any] = field(default_factory=list)
    multipart: list[dict[str, Any]] = field(default_factory=list)
    # The key of the value each head (part 0) request writes, by request index: a bulk
    # write's ``upserted_ids`` say which heads the call inserted.
    heads: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    def inserting_heads(self) -> list[Any]:
        """``requests`` with each head inserted or failing (``E11000``) where one is stored:
        an ordered write stops there, before what would name the value."""
        return [self._inserts.get(i, request) for i, request in enumerate(self.requests)]

    _inserts: dict[int, Any] = field(default_factory=dict)


def value_upsert(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The upsert of one value part: its fields written once (first write wins), its
    ``touched_at`` set to the server's time on every write, so a retry's values are as young
    as its write, and a maintenance mark left by a refused call cleared: maintenance
    deletes a value only while it is still marked or still old, and a mark set after this
    write is one the put's parent check sees."""
    return {
        "$setOnInsert": fields,
        "$currentDate": {TOUCHED_AT: True},
        "$unset": {DOOMED: ""},
    }


def blob_requests(
    thread_id: str,
    checkpoint_ns: str,
    values: Mapping[str, Any],
    new_versions: ChannelVersions,
    serde: SerializerProtocol,
    deltas: Mapping[str, Delta] | None = None,
    *,
    compress: bool = False,
) -> ValueWrites:
    """Upserts for the value of every channel in ``new_versions`` that has one.

    A channel in ``deltas`` is stored as its new tail, the head naming the base.
    ``compress``: large values stored compressed (``payload.split``).

    A version is written once: the head is inserted, never replaced (``heads`` says
    which request writes each head, so ``put`` learns which it inserted and names the
    stored value of the others). Parts are keyed by the value's digest, so two attempts
    never mix.
    """
    out = ValueWrites()
    for channel, version in new_versions.items():
        if channel not in values:
            continue
        key = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "channel": channel,
            "version": version,
        }
        join = blob_join(thread_id, checkpoint_ns, channel, version)
        delta = (deltas or {}).get(channel)
        payload = delta.tail if delta is not None else values[channel]
        with places.at("value", {**key, **(delta.head_fields() if delta is not None else {})}):
            type_, data = serde.dumps_typed(payload)
        parts = list(split(type_, data, compress=compress))
        for fields in parts:
            part = fields.pop("part")
            fields["join"] = join
            if part == 0:
                out.heads[len(out.requests)] = (thread_id, checkpoint_ns, channel, version)
                if delta is not None:
                    fields.update(delta.head_fields())
                # No stored part is numbered below 0: the upsert inserts, or fails on the
                # key index. A range on the key's last field, not a field no document has,
                # so a server that plans an index only for a filter the index holds whole
                # (the wire test server) does not scan the collection.
                only_new = {**key, "part": {"$lt": 0}}
                out._inserts[len(out.requests)] = UpdateOne(
                    only_new, value_upsert({**fields, "part": 0}), upsert=True
                )
            out.requests.append(UpdateOne({**key, "part": part}, value_upsert(fields), upsert=True))
        # An attempt that did not compress it (cut, or of an instance that does not compress
        # yet) may have left parts under this key.
        if len(parts) > 1 or may_span_parts(data):
            out.multipart.append(key)
    return out


def write_requests(
    key: Mapping[str, str],
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    serde: SerializerProtocol,
    idxs: Sequence[int] | None = None,
    *,
    compress: bool = False,
) -> ValueWrites:
    """Upserts for pending writes: special channels overwrite, regular ones never do.

    Each write's ``idx`` is its position (special channels: their ``WRITES_IDX_MAP``
    slot) unless ``idxs`` gives them (a migration keeps the stored ones). ``compress``: as
    for ``blob_requests``.

    Parts are keyed by the value's digest and written before the head. A regular
    write inserts its head only if none exists (first whole value wins); a special
    channel replaces the head, swapping to the new parts in one document write,
    then drops parts of earlier values.
    """
    out = ValueWrites()
    join = write_join(key["thread_id"], key["checkpoint_ns"], key["checkpoint_id"])
    for position, (channel, value) in enumerate(writes):
        special = channel in WRITES_IDX_MAP
        idx = WRITES_IDX_MAP.get(channel, position) if idxs is None else idxs[position]
        write_key = {**key, "task_id": task_id, "idx": idx}
        with places.at("write", {**write_key, "channel": channel, "task_path": task_path}):
            type_, data = serde.dumps_typed(value)
        # A special write in several parts is never compressed: two attempts of it at once,
        # one compressing and one not, would each delete the other's parts as stale.
        spans = may_span_parts(data)
        parts = list(split(type_, data, compress=compress and not (special and spans)))
        for fields in parts:
            part = fields.pop("part")
            fields.update(channel=channel, task_path=task_path, join=join)
            update = {"$set" if special and part == 0 else "$setOnInsert": fields}
            out.requests.append(UpdateOne({**write_key, "part": part}, update, upsert=True))
        if special:
            stale = {**write_key, "part": {"$ne": 0}, "vid": {"$ne": parts[0]["vid"]},
                     NEW_PARTS: {"$exists": False}}
            out.requests.append(DeleteMany(stale))
        elif len(parts) > 1 or spans:
            out.multipart.append(write_key)
    return out


class ConflictingValueError(MongoCkptError, ValueError):
    """A ``put`` gave a channel version a value other than the one already stored for it.

    A version names one value: a retried ``put`` must pass the same values. Nothing
    readable was changed (no checkpoint written).
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, channel: str, version: Any) -> None:
        super().__init__(
            f"channel {channel!r} version {version!r} (thread_id={thread_id!r} "
            f"checkpoint_ns={checkpoint_ns!r}) is already stored with a different value, and "
            "a version names one value: retry a put with the values it was first given, or "
            "give a changed value a new version (in new_versions and channel_versions)"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.channel, self.version = channel, version
