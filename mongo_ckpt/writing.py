"""A checkpoint's writes, the methods of ``CheckpointOperations`` that write (``put``,
``put_writes``), written once for the sync and the async saver.

A ``put`` reads top to bottom in five steps:

1. plan: which new list values are stored as deltas, from this instance's memory and the
   chains the parent names (``listdelta``);
2. build: the value requests and the checkpoint document (``documents``), its size
   checked before anything is written;
3. values: written first, so a reader never sees a checkpoint without its values; a value
   stored by an earlier attempt is adopted (the stored value is the truth); a run with a
   ``thread_owner`` checks its lease before them (``leases``);
4. checkpoint and parent probe: one ordered bulk write (``maintenance.probe_parent``);
   steps 3 and 4 are two commands (``_put_in_two_commands``) or, where the saver uses the
   client-level bulk write (``client_bulk``), one (``_put_in_one_command``), whose value
   heads are inserted or fail: a head stored already stops it before the checkpoint, and
   the put goes on as in two commands (adopting that value);
5. take back: when the probe misses the parent, ``maintenance.judge_parent`` accepts the
   checkpoint or takes it back (``StaleParentError``; ``_settle_probe``).
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, InvalidOperation, OperationFailure
from pymongo.results import BulkWriteResult

from mongo_ckpt import leases, listdelta, maintenance, thread_settings
from mongo_ckpt.calls import (
    Document,
    Operation,
    WriteRequest,
    Written,
    bulk_write,
    client_bulk_write,
    delete_many,
    find,
    upserted_ids,
)
from mongo_ckpt.client_bulk import PutPath
from mongo_ckpt.documents import (
    ConflictingValueError,
    ValueWrites,
    blob_requests,
    check_checkpoint_size,
    checkpoint_document,
    checkpoint_update,
    confirm_checkpoint,
    write_requests,
)
from mongo_ckpt.identifiers import coerce_id, thread_key
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINT_KEY,
    CHECKPOINTS,
    THREADS,
    WRITE_KEY,
    WRITES,
)
from mongo_ckpt.listdelta import (
    Plan,
    is_list,
    plain_serde,
    same_value,
    stored_chain,
    values_entries,
)
from mongo_ckpt.memory import CheckpointMemory
from mongo_ckpt.payload import NEW_PARTS, stray_parts
from mongo_ckpt.reading import (
    SKELETON,
    Loaded,
    MissingValueError,
    blob_keys_query,
    key_of,
)


class WriteOperations:
    """``put`` and ``put_writes`` (a part of ``CheckpointOperations``)."""

    serde: SerializerProtocol
    filterable_keys: Collection[str] | None
    memory: CheckpointMemory
    put_path: PutPath | None

    @property
    def compressing(self) -> bool:
        """Whether large values are stored compressed: not under ``EncryptedSerializer``
        (ciphertext does not compress, and compressing before encrypting would let the
        stored size tell about the contents)."""
        return plain_serde(self.serde) is self.serde


    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Operation[RunnableConfig]:
        """Store a checkpoint in the five steps of the module's docstring."""
        thread_id, checkpoint_ns, parent_id = thread_key(config)
        checkpoint_id = coerce_id(checkpoint["id"], "checkpoint['id']")
        own_ttl = thread_settings.configured(config)
        owner = leases.configured(config)
        key = dict(zip(CHECKPOINT_KEY, (thread_id, checkpoint_ns, checkpoint_id)))
        stored: dict[str, Any] = dict(get_checkpoint_metadata(config, metadata))
        if leases.CONFIG_KEY not in metadata:  # the owner token is a capability: not stored
            stored.pop(leases.CONFIG_KEY, None)
        metadata = stored  # type: ignore[assignment]
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        # 1. plan
        chains = yield from self._parent_chains(key, parent_id, values, versions, new_versions)
        usable = self.memory.usable((thread_id, checkpoint_ns, checkpoint_id), parent_id)
        plan = listdelta.plan(usable, self.memory.deltas_wanted, values, versions,
                              new_versions, self.serde, chains)
        # 2. build
        blobs = blob_requests(thread_id, checkpoint_ns, values, new_versions, self.serde,
                              plan.deltas, compress=self.compressing)
        doc = checkpoint_document(key, checkpoint, metadata, parent_id, self.serde,
                                  self.filterable_keys, plan.chains)
        check_checkpoint_size(doc)  # before the values: a refused put leaves nothing behind
        parent = None if parent_id is None else (thread_id, checkpoint_ns, parent_id)
        stored_parent = None if parent is None else self.memory.stored_id(parent)
        prepared = _Put(key, parent_id, stored_parent, values, plan, blobs, doc, owner)
        # 3. values and 4. the checkpoint with its parent probe: in one command where the
        # server has the client-level bulk write, else in two
        one = self.put_path is not None and self.put_path.namespaces is not None
        sent = self._put_in_one_command if one else self._put_in_two_commands
        written, inserted = yield from sent(prepared)
        # 5. take back (or accept a parent never stored, and confirm)
        stored_id = yield from _settle_probe(key, parent_id, doc, written, inserted)
        self.memory.wrote(
            (thread_id, checkpoint_ns, checkpoint_id), plan, parent_id, doc, metadata, stored_id
        )
        yield from self._store_own_ttl(thread_id, own_ttl, parent_id)
        return {"configurable": key}

    def _store_own_ttl(
        self, thread_id: str, ttl: float | str | None, parent_id: str | None
    ) -> Operation[None]:
        """The ``thread_ttl`` of the put's ``configurable``, stored unless this instance
        stored it last (on a thread's first checkpoint always: another instance may have
        deleted the thread, with its setting, since)."""
        if ttl is not None and (parent_id is None or self.memory.own_ttl(thread_id) != ttl):
            yield from thread_settings.set_ttl(thread_id, ttl)
            self.memory.own_ttl_stored(thread_id, ttl)


    def _put_in_one_command(self, put: _Put) -> Operation[tuple[Written, set[Any]]]:
        """Values and checkpoint in one ordered client-level ``bulkWrite``; on in two
        commands when the primary has no such command (a failover to a pre-8.0 primary) or
        a head stored already stopped it before the checkpoint (a retry: its value is
        adopted, with the heads this command inserted)."""
        requests = [(BLOBS, put.blobs.inserting_heads()), (CHECKPOINTS, put.checkpoint_requests())]
        sent = yield from self._in_one_command(put.key["thread_id"], put.owner, requests)
        if sent is None:
            return (yield from self._put_in_two_commands(put))
        values_written, written = sent
        inserted = _inserted_heads(put.blobs, values_written)
        if isinstance(values_written, BulkWriteError):
            if not _head_stored(values_written, put.blobs):
                raise values_written
            return (yield from self._put_in_two_commands(put, inserted))
        if put.blobs.multipart:
            yield from _drop_stray_parts(BLOBS, BLOB_KEY, put.blobs)
        return written, inserted


    def _in_one_command(
        self,
        thread_id: str,
        owner: str | None,
        requests: builtins.list[tuple[str, builtins.list[WriteRequest]]],
    ) -> Operation[builtins.list[Written] | None]:
        """``requests`` (collection, requests) as one ordered client-level bulk write, after
        the check of ``owner``'s lease (``leases``: where it fails, nothing is written,
        ``ThreadLeaseLost``); what each collection's requests did, or ``None`` when the
        primary has no such command (a failover to a pre-8.0 primary)."""
        path = self.put_path
        assert path is not None and path.namespaces is not None
        if owner is not None:
            requests = [(THREADS, [leases.check(thread_id, owner)]), *requests]
        refused = False
        try:
            written = yield from client_bulk_write(requests, path.namespaces)
        except (OperationFailure, InvalidOperation) as error:
            path.refused(error)  # raised again unless the primary has no such command
            refused = True
        if refused:  # outside the handler: an error of the fallback does not chain to it
            return None
        if owner is None:
            return written
        checked, *rest = written
        if isinstance(checked, BulkWriteError):
            if leases.lost(checked.details["writeErrors"][0]):
                raise leases.ThreadLeaseLost(thread_id)
            raise checked
        return rest

    def _put_in_two_commands(
        self, put: _Put, inserted: set[Any] | None = None
    ) -> Operation[tuple[Written, set[Any]]]:
        """3. the values (a value an earlier attempt stored is adopted: the stored value is
        the truth), then 4. the checkpoint and its parent probe, built after them (an
        adopted value changes ``doc``); also what finishes a stopped one-command put."""
        if inserted is None and put.owner is not None:  # not checked in one command before
            yield from leases.checked(put.key["thread_id"], put.owner)
        inserted = set() if inserted is None else inserted
        if put.blobs.requests:
            result = yield from _write_values(BLOBS, BLOB_KEY, put.blobs)
            inserted |= _inserted_heads(put.blobs, result)
            found = {k[2]: k[3] for k in put.blobs.heads.values() if k not in inserted}
            if found:
                yield from self._adopt_stored(put.key, put.plan, put.values, found, inserted)
                put.doc["values"] = values_entries(put.plan.chains)
        return (yield from _write_checkpoint(put.checkpoint_requests())), inserted


    def _adopt_stored(
        self,
        key: Mapping[str, str],
        plan: Plan,
        values: Mapping[str, Any],
        found: Mapping[str, Any],
        inserted: set[Any],
    ) -> Operation[None]:
        """Name the stored chains of the values in ``found`` (channel: version), whose heads
        existed before this call. A value other than the stored one is refused (unless
        another checkpoint names that version), leaving the values this call ``inserted``
        marked for maintenance."""
        thread_id, checkpoint_ns = key["thread_id"], key["checkpoint_ns"]
        loaded = yield from self._stored_values(thread_id, checkpoint_ns, found)
        for channel, version in found.items():
            try:
                stored = loaded.value(thread_id, checkpoint_ns, channel, version)
            except MissingValueError:
                yield from maintenance.mark_values(inserted)
                raise
            chain = stored_chain(loaded.blobs, (thread_id, checkpoint_ns, channel, version))
            assert chain is not None  # the value was rebuilt from it
            if not same_value(self.serde, values[channel], stored) and not (
                yield from self._named_elsewhere(key, channel, version)
            ):
                yield from maintenance.mark_values(inserted)
                raise ConflictingValueError(thread_id, checkpoint_ns, channel, version)
            plan.adopt(channel, chain)


    def _named_elsewhere(
        self, key: Mapping[str, str], channel: str, version: Any
    ) -> Operation[bool]:
        """Whether a checkpoint other than ``key`` names the value ``(channel, version)``:
        then that version is the thread's history, which keeps its first value (the put
        reuses a version rather than retrying a put)."""
        query = {
            "thread_id": key["thread_id"],
            "checkpoint_ns": key["checkpoint_ns"],
            "checkpoint_id": {"$ne": key["checkpoint_id"]},
            "values": {"$elemMatch": {"channel": channel, "version": version}},
        }
        found = yield from find(CHECKPOINTS, query, projection={"_id": 1}, limit=1)
        return bool(found)


    def _stored_values(
        self, thread_id: str, checkpoint_ns: str, versions: Mapping[str, Any]
    ) -> Operation[Loaded]:
        """The stored documents of ``versions`` (channel: version) and of the list-delta bases
        they are rebuilt from, read hop by hop: only retries and missing parents come here."""
        docs: builtins.list[Document] = []
        todo = {(thread_id, checkpoint_ns, ch, v) for ch, v in versions.items()}
        asked: set[Any] = set()
        while todo:
            asked |= todo
            found = yield from find(BLOBS, blob_keys_query(todo))
            docs += found
            bases = {(*key_of(d, BLOB_KEY)[:3], d["base"]) for d in found if _is_delta_head(d)}
            todo = bases - asked
        return Loaded(self.serde, docs, ())


    def _parent_chains(
        self,
        key: Mapping[str, str],
        parent_id: str | None,
        values: Mapping[str, Any],
        versions: Mapping[str, Any],
        new_versions: ChannelVersions,
    ) -> Operation[dict[str, builtins.list[Any]] | None]:
        """The chains of unchanged list values: those the parent checkpoint names, from
        memory when this instance read or wrote the parent, else from one ``find``; a
        chain the parent does not name (a parent never stored, or gone) is read from the
        stored values."""
        if parent_id is None or not listdelta.needs_parent(values, new_versions):
            return None
        parent = (key["thread_id"], key["checkpoint_ns"], parent_id)
        chains = self.memory.known_chains(parent)
        if chains is None:
            query = dict(zip(CHECKPOINT_KEY, parent))
            docs = yield from find(CHECKPOINTS, query, projection=SKELETON)
            for doc in docs:
                self.memory.remember(doc)
            chains = self.memory.known_chains(parent) or {}
        unknown = {
            ch: versions[ch]
            for ch, v in values.items()
            if ch not in new_versions
            and is_list(v)
            and ch in versions
            and (chains.get(ch) or [None])[-1] != versions[ch]
        }
        if not unknown:
            return chains
        loaded = yield from self._stored_values(key["thread_id"], key["checkpoint_ns"], unknown)
        stored = {
            ch: stored_chain(loaded.blobs, (key["thread_id"], key["checkpoint_ns"], ch, v))
            for ch, v in unknown.items()
        }
        return {**chains, **{ch: chain for ch, chain in stored.items() if chain}}


    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Operation[None]:
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        if checkpoint_id is None:
            raise ValueError(
                "put_writes needs config['configurable']['checkpoint_id']: the checkpoint "
                "the writes belong to"
            )
        key = dict(zip(CHECKPOINT_KEY, (thread_id, checkpoint_ns, checkpoint_id)))
        task_id = coerce_id(task_id, "task_id")
        owner = leases.configured(config)
        requests = write_requests(
            key, writes, task_id, task_path or "", self.serde, compress=self.compressing
        )
        if not requests.requests:
            return
        if owner is not None and self.put_path is not None and self.put_path.namespaces:
            # the lease check and the writes in one command
            sent = yield from self._in_one_command(
                thread_id, owner, [(WRITES, requests.requests)]
            )
            if sent is not None:
                (written,) = sent
                if isinstance(written, BulkWriteError):
                    raise written
                if requests.multipart:
                    yield from _drop_stray_parts(WRITES, WRITE_KEY, requests)
                return
        if owner is not None:
            yield from leases.checked(thread_id, owner)
        yield from _write_values(WRITES, WRITE_KEY, requests)


class _Put(NamedTuple):
    """A put's steps 1 and 2, read by the path that writes it."""

    key: dict[str, str]
    parent_id: str | None
    stored_parent: Any  # the parent's ``_id``, if known: the probe names it
    values: Mapping[str, Any]  # the channel values, to compare a stored value with
    plan: Plan
    blobs: ValueWrites
    doc: dict[str, Any]  # its ``values`` rewritten when a stored value is adopted
    owner: str | None  # the run's ``thread_owner``: its lease is checked first

    def checkpoint_requests(self) -> list[WriteRequest]:
        return _checkpoint_requests(self.key, self.doc, self.parent_id, self.stored_parent)


def _is_delta_head(doc: Mapping[str, Any]) -> bool:
    return doc.get("part", 0) == 0 and "base" in doc


def _checkpoint_requests(
    key: Mapping[str, str], doc: Mapping[str, Any], parent_id: str | None, stored_parent: Any
) -> list[WriteRequest]:
    """The checkpoint's requests: its upsert alone without a parent; else inserted pending,
    the parent probe (``stored_parent``: the parent's ``_id``, if known), which fails the
    ordered write unless the parent is stored untombstoned, and the confirmation, so
    nothing is visible that no probe has passed, whatever cuts the write. With the
    client-level bulk write they follow the values in the same command, so a reader never
    sees a checkpoint without its values."""
    if parent_id is None:
        return [UpdateOne(key, checkpoint_update(doc), upsert=True)]
    parent = maintenance.probe_parent(
        {**key, "checkpoint_id": parent_id}, key["checkpoint_id"], stored_parent
    )
    write = UpdateOne(key, checkpoint_update(doc, pending=True), upsert=True)
    return [write, parent, confirm_checkpoint(key)]


def _settle_probe(
    key: Mapping[str, str],
    parent_id: str | None,
    doc: Mapping[str, Any],
    written: Written,
    inserted: set[Any],
) -> Operation[Any]:
    """Step 5: when the parent probe missed, take the put back, or accept a parent never
    stored (``maintenance.judge_parent``), then confirm; the checkpoint's ``_id`` if this
    call inserted it (the next put's probe names it)."""
    stored_id = upserted_ids(written).get(0)
    if isinstance(written, BulkWriteError):
        if not maintenance.probe_missed(written):
            raise written
        assert parent_id is not None  # only a put with a parent probes
        mine = stored_id is not None
        yield from maintenance.judge_parent(key, parent_id, doc, inserted, mine)
        yield from bulk_write(CHECKPOINTS, [confirm_checkpoint(key)], ordered=True)
        yield from maintenance.unmark_after_late_confirmation(key, parent_id, doc)
    return stored_id


def _inserted_heads(blobs: ValueWrites, written: Written) -> set[Any]:
    """The value keys whose head ``written`` (the write of ``blobs``) inserted."""
    return {blobs.heads[i] for i in upserted_ids(written) if i in blobs.heads}


def _head_stored(error: BulkWriteError, blobs: ValueWrites) -> bool:
    """Whether the write of ``blobs.inserting_heads()`` stopped at a head stored already."""
    errors = error.details.get("writeErrors", [])
    return [e.get("code") for e in errors] == [maintenance.DUPLICATE_KEY] and (
        errors[0].get("index") in blobs.heads
    )


def _write_checkpoint(requests: Sequence[WriteRequest]) -> Operation[Written]:
    """The checkpoint's requests in one ordered bulk write; its error is returned."""
    try:
        return (yield from bulk_write(CHECKPOINTS, requests, ordered=True))
    except BulkWriteError as error:
        return error


def _write_values(
    collection: str, key_fields: tuple[str, ...], writes: ValueWrites
) -> Operation[BulkWriteResult]:
    """Write values in one ordered bulk write, so each head lands after its parts; then
    ``_drop_stray_parts``."""
    result = yield from bulk_write(collection, writes.requests, ordered=True)
    if writes.multipart:
        yield from _drop_stray_parts(collection, key_fields, writes)
    return result


def _drop_stray_parts(
    collection: str, key_fields: tuple[str, ...], writes: ValueWrites
) -> Operation[None]:
    """After values in several parts were written: one ``find`` of their part ids, and the
    parts left by a cut or losing attempt under the same keys deleted (by ``_id``) when
    there are any."""
    query = writes.multipart[0] if len(writes.multipart) == 1 else {"$or": writes.multipart}
    projection = dict.fromkeys(("part", "vid", *key_fields), 1)
    docs = yield from find(collection, query, projection=projection)
    stray = stray_parts(docs, key_fields)
    if stray:
        thread_id = writes.multipart[0]["thread_id"]  # one thread per call: routes the delete
        # Parts ``rekeying`` wrote for a head it is about to swap are not strays.
        query = {"thread_id": thread_id, "_id": {"$in": stray}, NEW_PARTS: {"$exists": False}}
        yield from delete_many(collection, query)
