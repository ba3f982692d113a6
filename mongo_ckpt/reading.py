"""How a checkpoint is read back: pure query builders and tuple assembly."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt import places
from mongo_ckpt.checkpoint_fields import stored_checkpoint, stored_metadata
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.identifiers import (
    check_field_name,
    check_filter_value,
    coerce_id,
    thread_key,
)
from mongo_ckpt.keyring import BoundValueError, is_bound
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINT_KEY,
    JOIN_SEP,
    NOT_PENDING,
    WRITE_KEY,
    WRITES,
)
from mongo_ckpt.listdelta import rebuild
from mongo_ckpt.payload import join

LATEST = [("checkpoint_id", -1)]
# What maintenance and a put read of a checkpoint: its key, parent, the values it names.
SKELETON = dict.fromkeys((*CHECKPOINT_KEY, "parent_checkpoint_id", "values", "replay", "run_id"), 1)
Key = tuple[str, ...]


def key_of(doc: Mapping[str, Any], fields: tuple[str, ...] = CHECKPOINT_KEY) -> Key:
    return tuple(doc[f] for f in fields)


def checkpoint_query(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
) -> dict[str, Any]:
    query: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        query["checkpoint_id"] = checkpoint_id
    return {**query, **NOT_PENDING}


def tuple_pipeline(
    query: Mapping[str, Any], collections: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The checkpoint matching ``query`` (newest first), the value parts it names (list-delta
    bases included) and its pending writes, in one aggregation on ``checkpoints``.

    Output: ``{"checkpoint": doc}`` once, then one ``{"value": part}`` or ``{"write": part}``
    document per part found (and an empty document for a branch that found none), so no
    result document holds more than one part: a value of many MiB stays under the 16 MiB
    limit, and the checkpoint fields are not repeated. The copies made by ``_row`` each
    do one lookup (the others look up ``""``, which no join key is; a missing or empty
    ``localField`` would match every document without a ``join``).

    Values and writes are looked up by their ``join`` keys (``layout.blob_join``,
    ``layout.write_join``), which encode thread, namespace and checkpoint id or channel
    and version; ``split_joined`` checks those fields again. Only localField/foreignField
    joins and operators every backend implements are used.
    """
    names = {"$ifNull": ["$values", []]}
    prefix = ["$thread_id", JOIN_SEP, "$checkpoint_ns", JOIN_SEP, "$$v.channel", JOIN_SEP]
    values = {"$cond": [{"$gt": [{"$size": names}, 0]}, blob_join_keys(names, prefix), ""]}
    writes = {"$concat": ["$thread_id", JOIN_SEP, "$checkpoint_ns", JOIN_SEP, "$checkpoint_id"]}

    def row(n: int, then: Any, other: Any = "") -> dict[str, Any]:
        return {"$cond": [{"$eq": ["$_row", n]}, then, other]}

    return [
        *newest_stages(query),
        {"$addFields": {"_row": [0, 1, 2]}},
        {"$unwind": "$_row"},
        {
            "$project": {
                "_id": 0,
                "checkpoint": row(0, "$$ROOT", "$$REMOVE"),
                "vj": row(1, values),
                "wj": row(2, writes),
            }
        },
        *_lookup_one(collections[BLOBS], "vj", "value"),
        *_lookup_one(collections[WRITES], "wj", "write"),
        {"$project": {"vj": 0, "wj": 0}},
    ]


def newest_stages(query: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Emits the newest checkpoint document matching ``query``.

    The checkpoint key's fields are matched in a ``$match`` of their own, the rest
    (``pending``) in the next one. MongoDB merges adjacent ``$match`` stages into one
    index read; a server that plans an index only for a match whose every field the index
    holds (the wire test server) would scan the whole collection for the merged one.
    """
    keyed = {f: query[f] for f in CHECKPOINT_KEY if f in query}
    rest = {f: v for f, v in query.items() if f not in keyed}
    matches = [{"$match": part} for part in (keyed, rest) if part]
    return [*matches, {"$sort": {"checkpoint_id": -1}}, {"$limit": 1}]


def _lookup_one(collection: str, local: str, into: str) -> list[dict[str, Any]]:
    """Join ``collection`` on ``join``, one output document per match; the ``$unwind``
    right after the ``$lookup`` is merged into it, so no array of matches is built."""
    spec = {"from": collection, "localField": local, "foreignField": "join", "as": into}
    return [
        {"$lookup": spec},
        {"$unwind": {"path": f"${into}", "preserveNullAndEmptyArrays": True}},
    ]


def blob_join_keys(entries: Any, prefix: Sequence[Any]) -> dict[str, Any]:
    """The ``layout.blob_join`` keys of the value ``entries`` (``$$v``: ``{"channel",
    "version"}``), each ``prefix`` (thread, namespace, channel, separators) + version.

    A version is a string, an int or a float; the key spells it as Python's ``str``.
    ``$toString`` returns a string as it is and spells ints the same, but a whole double
    without its ``.0`` on MongoDB (``1.0`` -> ``"1"``, where mongomock says ``"1.0"``), so
    a number also gets the key with ``.0`` appended: whichever is stored is found.
    """
    spelled = {"$toString": "$$v.version"}
    numbers = {"$filter": {"input": entries, "as": "v", "cond": {"$isNumber": "$$v.version"}}}
    return {
        "$concatArrays": [
            {"$map": {"input": entries, "as": "v", "in": {"$concat": [*prefix, spelled]}}},
            {
                "$map": {
                    "input": numbers,
                    "as": "v",
                    "in": {"$concat": [*prefix, spelled, {"$literal": ".0"}]},
                }
            },
        ]
    }


def split_joined(
    docs: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any] | None, list[Any], list[Any]]:
    """Split ``tuple_pipeline`` output into the checkpoint document (``None`` if none
    matched), the parts of the values it names and of its writes; parts of another
    thread, namespace, checkpoint or version (a join key collision) are dropped."""
    head = next((dict(d["checkpoint"]) for d in docs if "checkpoint" in d), None)
    if head is None:
        return None, [], []
    head.pop("_row", None)
    needed = needed_values([head])
    values = [d["value"] for d in docs if "value" in d and key_of(d["value"], BLOB_KEY) in needed]
    key = key_of(head)
    writes = [d["write"] for d in docs if "write" in d and key_of(d["write"]) == key]
    return head, values, writes


def list_query(
    config: RunnableConfig | None,
    filter: Mapping[str, Any] | None,
    before: RunnableConfig | None,
    filterable_keys: Collection[str] | None,
) -> dict[str, Any]:
    """The ``checkpoints`` query of ``list``; validates every user-supplied part."""
    query: dict[str, Any] = dict(NOT_PENDING)
    if config is not None:
        thread_id, checkpoint_ns, checkpoint_id = thread_key(config)
        query["thread_id"] = thread_id
        if config["configurable"].get("checkpoint_ns") is not None:
            query["checkpoint_ns"] = checkpoint_ns
        if checkpoint_id:
            query["checkpoint_id"] = checkpoint_id
    for key, value in (filter or {}).items():
        check_field_name(key, "metadata filter")
        check_filter_value(value, "metadata filter value")
        if filterable_keys is not None and key.split(".")[0] not in filterable_keys:
            raise ValueError(
                f"metadata filter key {key!r} is not stored in plain form: add it to "
                "filterable_metadata_keys when creating the saver"
            )
        query.update(_containment(f"metadata.{key}", value))
    before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
    if before_id is not None:
        bound = {"$lt": coerce_id(before_id, "before['configurable']['checkpoint_id']")}
        if "checkpoint_id" in query:
            bound["$eq"] = query["checkpoint_id"]
        query["checkpoint_id"] = bound
    return query


def _containment(path: str, value: Any) -> dict[str, Any]:
    """``path`` contains ``value`` as in Postgres's JSONB ``@>``: a dict matches any
    object holding at least its keys (recursively, in any order; ``{}`` any object),
    anything else by equality. Dicts become one condition per dotted leaf path."""
    if not isinstance(value, Mapping):
        return {path: {"$eq": value}}
    if not value:
        return {path: {"$type": "object"}}
    conditions: dict[str, Any] = {}
    for key, item in value.items():
        check_field_name(key, "metadata filter")
        if "." in key:
            raise ValueError(
                f"metadata filter key {key!r} inside {path!r} contains '.', which "
                "cannot be matched by containment"
            )
        conditions.update(_containment(f"{path}.{key}", item))
    return conditions


def needed_values(docs: Iterable[Mapping[str, Any]]) -> set[Key]:
    """The ``(thread, ns, channel, version)`` keys of every value document that reading
    the checkpoints ``docs`` needs. Reads fetch exactly these, and maintenance keeps every
    value some surviving checkpoint needs, so this is the one place that says which."""
    return {
        (doc["thread_id"], doc["checkpoint_ns"], v["channel"], v["version"])
        for doc in docs
        for v in doc.get("values", ())
    }


def blobs_query(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``checkpoint_blobs`` query for the channel values of ``docs``; ``None`` if none."""
    refs = needed_values(docs)
    if not refs:
        return None
    return {"$or": [dict(zip(BLOB_KEY, ref)) for ref in sorted(refs, key=repr)]}


def blob_keys_query(keys: Iterable[Key]) -> dict[str, Any]:
    """Match the value documents (all parts) of exact ``(thread, ns, channel, version)`` keys,
    one ``$in`` per thread, namespace and channel."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for thread_id, checkpoint_ns, channel, version in keys:
        groups.setdefault((thread_id, checkpoint_ns, channel), []).append(version)
    clauses = [
        {
            "thread_id": t,
            "checkpoint_ns": ns,
            "channel": ch,
            "version": {"$in": sorted(versions, key=repr)},
        }
        for (t, ns, ch), versions in sorted(groups.items())
    ]
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def writes_query(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``checkpoint_writes`` query for the pending writes of ``docs``."""
    return keys_query(key_of(doc) for doc in docs)


def keys_query(keys: Iterable[Key]) -> dict[str, Any]:
    """Match documents of the given checkpoint keys, one ``$in`` per thread and namespace."""
    groups: dict[tuple[str, str], list[str]] = {}
    for thread_id, checkpoint_ns, checkpoint_id in keys:
        groups.setdefault((thread_id, checkpoint_ns), []).append(checkpoint_id)
    clauses = [
        {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": {"$in": sorted(ids)}}
        for (t, ns), ids in sorted(groups.items())
    ]
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def inactive_threads_pipeline(
    cutoff: datetime | None, several: bool = False, thread_ids: list[str] | None = None
) -> list[dict[str, Any]]:
    """Threads whose newest checkpoint was written before ``cutoff`` (``None``: any), of
    ``thread_ids`` (``None``: all), with that checkpoint's time (``{"_id": thread_id,
    "last": ...}``); with ``several``, only those with more than one checkpoint (what a
    prune may delete)."""
    chosen = [] if thread_ids is None else [{"$match": {"thread_id": {"$in": thread_ids}}}]
    last = {} if cutoff is None else {"last": {"$lt": cutoff}}
    return [
        *chosen,
        # Same direction on both fields, so the (thread_id, created_at) index serves the sort.
        {"$sort": {"thread_id": 1, "created_at": 1}},
        {"$group": {"_id": "$thread_id", "last": {"$last": "$created_at"}, "n": {"$sum": 1}}},
        {"$match": {**last, **({"n": {"$gt": 1}} if several else {})}},
    ]


class MissingValueError(MongoCkptError, LookupError):
    """A checkpoint names a channel value whose documents are missing or incomplete.

    ``base`` is set when the value is a list delta and the missing document is the
    base version it is rebuilt from.
    """

    def __init__(
        self, thread_id: str, checkpoint_ns: str, channel: str, version: Any, base: Any = None
    ) -> None:
        detail = f" (its list-delta base version {base!r} is missing)" if base is not None else ""
        super().__init__(
            f"checkpoint value missing: thread_id={thread_id!r} checkpoint_ns={checkpoint_ns!r} "
            f"channel={channel!r} version={version!r}{detail}"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.channel, self.version, self.base = channel, version, base


class Loaded:
    """Decoded blobs and writes of a page of checkpoints."""

    def __init__(
        self,
        serde: SerializerProtocol,
        blob_docs: Iterable[Mapping[str, Any]],
        write_docs: Iterable[Mapping[str, Any]],
    ) -> None:
        self.serde = serde
        self.blobs = join(blob_docs, BLOB_KEY)
        writes: dict[Key, list[tuple[tuple[Any, ...], PendingWrite]]] = {}
        for key, (head, typed) in join(write_docs, WRITE_KEY).items():
            sort_key = writes_sort_key(head.get("task_path", ""), head["task_id"], head["idx"])
            with places.at("write", head):
                write = (head["task_id"], head["channel"], serde.loads_typed(typed))
            writes.setdefault(key[:3], []).append((sort_key, write))
        self.writes = {k: [w for _, w in sorted(ws)] for k, ws in writes.items()}

    def checkpoint_tuple(self, doc: Mapping[str, Any]) -> CheckpointTuple:
        """The ``CheckpointTuple`` of checkpoint document ``doc``: values and writes decoded."""
        thread_id, checkpoint_ns, checkpoint_id = key_of(doc)
        checkpoint = stored_checkpoint(self.serde, doc)
        refs = [ref for ref in doc.get("values", ()) if not ref.get("base")]
        if is_bound(doc["checkpoint"]["type"]):  # its references checked against it too
            versions = checkpoint["channel_versions"]
            for ref in refs:
                if versions.get(ref["channel"]) != ref["version"]:
                    raise BoundValueError(
                        f"checkpoint {checkpoint_id!r} of thread {thread_id!r} names version "
                        f"{ref['version']!r} of channel {ref['channel']!r}, but its channel "
                        "versions do not: its references were altered"
                    )
        checkpoint["channel_values"] = {
            ref["channel"]: self.value(thread_id, checkpoint_ns, ref["channel"], ref["version"])
            for ref in refs
        }
        parent_id = doc.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=stored_metadata(self.serde, doc),
            parent_config=_config(thread_id, checkpoint_ns, parent_id) if parent_id else None,
            pending_writes=self.writes.get((thread_id, checkpoint_ns, checkpoint_id), []),
        )

    def value(self, thread_id: str, checkpoint_ns: str, channel: str, version: Any) -> Any:
        """The decoded value of one channel version, rebuilt from its list-delta bases."""

        def missing(at: Any) -> MissingValueError:
            base = at if at != version else None
            return MissingValueError(thread_id, checkpoint_ns, channel, version, base)

        key = (thread_id, checkpoint_ns, channel, version)
        return rebuild(self.blobs, key, self.serde.loads_typed, missing)


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }
