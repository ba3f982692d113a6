"""DeltaChannel history in one aggregation, and the ancestry a checkpoint needs.

``history_pipeline`` walks a checkpoint's ancestors with ``$graphLookup`` and
returns, as separate small documents, only the writes between the target and
each requested channel's seed (the nearest ancestor that stores the channel's
value) plus the seed values. It is composed of the stage builders below, each
noting the documents it emits. ``assemble`` turns the output into the
``DeltaChannelHistory`` mapping LangGraph expects. ``needed_ancestors`` is the
same walk in Python over checkpoint skeletons, used by prune and
delete_for_runs so they never cut a chain a surviving checkpoint needs.

Only operators every backend implements are used: no ``$reduce``,
``$indexOfArray``, ``$sortArray``, ``$lookup`` sub-pipelines or array-crossing
paths. One-element arrays are built with ``$map``: object literals inside array
literals are not evaluated as expressions by every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt import places
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import (
    BLOB_KEY,
    BLOBS,
    CHECKPOINTS,
    JOIN_SEP,
    NOT_PENDING,
    PENDING,
    WRITE_KEY,
    WRITES,
)
from mongo_ckpt.listdelta import rebuild
from mongo_ckpt.payload import join
from mongo_ckpt.reading import MissingValueError, blob_join_keys, newest_stages
from mongo_ckpt.snapshot_distance import MAX_DEPTH

Stage = dict[str, Any]
# The seed depth of a channel without a seed: past the end of any chain.
NO_SEED = MAX_DEPTH + 1


def history_pipeline(
    collections: Mapping[str, str],
    target: Mapping[str, Any],
    thread_id: str,
    checkpoint_ns: str,
    channels: Sequence[str],
    max_depth: int = MAX_DEPTH,
) -> list[Stage]:
    """One aggregation on ``checkpoints`` returning the history of ``channels`` at ``target``.

    ``target`` is the ``$match`` for the target checkpoint (the latest one if it
    names no id); the walk goes at most ``max_depth`` steps above its parent
    (``snapshot_distance.walk_depth``). Output: ``{"chain": [ancestor ids, nearest
    first], "cut": bool, "unseeded": bool, ...}`` once, then ``{"w": write part}`` and
    ``{"b": seed value part}`` documents. Nothing when the target has no ancestor
    (mongomock: an empty chain).
    """
    return [
        *newest_stages(target),
        *chain_stages(collections[CHECKPOINTS], thread_id, checkpoint_ns, max_depth),
        *_history_stages(collections, thread_id, checkpoint_ns, channels, max_depth),
    ]


def range_history_pipeline(
    collections: Mapping[str, str],
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str | None,
    channels: Sequence[str],
    floor: str | None,
    limit: int,
    *,
    whole: bool = False,
) -> list[Stage]:
    """``history_pipeline`` with the ancestors read as a range of checkpoint ids.

    The walk is replaced by one indexed read (``range_chain_stages``) of the target and
    the checkpoints of its thread and namespace just below it: its cost follows the
    range, not the collection (a server without an index behind ``$graphLookup`` scans
    the collection at every step). The chain is the range in id order, so on a forked
    thread it holds the target's siblings too: ``on_chain`` keeps what is on the
    target's parent chain, or says the range cannot be trusted. Same output as
    ``history_pipeline``; nothing when the target is not stored.

    ``whole``: ``reading.tuple_pipeline`` in the same aggregation, for the checkpoint
    ``checkpoint_id`` (the newest one if ``None``): its values and pending writes too, as
    ``{"checkpoint": doc}`` once, ``{"tv": True, "b": part}`` per part of a value it names
    and ``{"tw": True, "w": part}`` per part of its writes (``split_prefetched`` turns
    these into ``tuple_pipeline``'s); nothing when the newest checkpoint of the range is
    not the one asked for or is pending (the caller reads the tuple alone).
    """
    return [
        *range_chain_stages(thread_id, checkpoint_ns, checkpoint_id, floor, limit, whole=whole),
        *_history_stages(collections, thread_id, checkpoint_ns, channels, MAX_DEPTH, whole),
    ]


def split_prefetched(
    docs: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """``range_history_pipeline(whole=True)`` output as ``reading.tuple_pipeline`` output (for
    ``reading.split_joined``) and ``range_history_pipeline`` output (for ``on_chain``)."""
    tuple_docs: list[Mapping[str, Any]] = []
    history: list[Mapping[str, Any]] = []
    for d in docs:
        if d.get("checkpoint") is not None:
            tuple_docs.append({"checkpoint": d["checkpoint"]})
        elif d.get("tv"):
            tuple_docs.append({"value": d["b"]})
        elif d.get("tw"):
            tuple_docs.append({"write": d["w"]})
        else:
            history.append(d)
    return tuple_docs, history


def _history_stages(
    collections: Mapping[str, str],
    thread_id: str,
    checkpoint_ns: str,
    channels: Sequence[str],
    max_depth: int,
    whole: bool = False,
) -> list[Stage]:
    """The stages after the chain: seeds, lookups and the parts found (``whole``: and the
    target's tuple, ``range_history_pipeline``)."""
    return [
        *seed_depth_stages(channels),
        *work_item_stages(thread_id, checkpoint_ns, channels, max_depth, whole),
        *part_lookup_stages(collections),
        *own_part_stages(thread_id, checkpoint_ns),
    ]


def range_limit(depth: int, floor: str | None) -> int | None:
    """How many checkpoints a range read takes, target included; ``None`` when nothing
    bounds it (no counters, no floor): then the walk is cheaper than reading the thread.

    ``depth`` is ``snapshot_distance.walk_depth``: the target and ``depth + 1`` ancestors
    reach the farthest seed on a linear thread. With a ``floor`` (a lower bound of the
    seeds' ids, ``CheckpointMemory.seed_floor``) the range is bounded by ids, and the
    limit leaves as many places again for siblings from a fork, so a stale floor never
    reads more than twice what the walk would.
    """
    if depth >= MAX_DEPTH:
        return None if floor is None else MAX_DEPTH + 2
    return (depth + 2) * (1 if floor is None else 2)


def range_chain_stages(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str | None,
    floor: str | None,
    limit: int,
    whole: bool = False,
) -> list[Stage]:
    """Emits ``{"start", "chain"}`` as ``chain_stages`` does, from the newest ``limit``
    checkpoints of the thread and namespace with ids at most ``checkpoint_id`` (any, if
    ``None``) and at least ``floor``, read on the ``checkpoint_key`` index: the first must
    be the target, not pending (else nothing is emitted, as ``newest_stages`` finds none),
    the others are the chain, ``depth`` their place in id order. Numbered by ``$unwind``'s
    ``includeArrayIndex`` (not every backend has ``$setWindowFields`` or ``$range``).
    ``whole``: the target's document too, as ``checkpoint``."""
    ids: dict[str, str] = {}
    if checkpoint_id is not None:
        ids["$lte"] = checkpoint_id
    if floor is not None:
        ids["$gte"] = floor
    at_target: dict[str, Any] = {} if checkpoint_id is None else {"target": checkpoint_id}
    target_doc: dict[str, Any] = {"checkpoint": {"$first": "$$ROOT"}} if whole else {}
    entry = {**_chain_entry("$"), PENDING: {"$ifNull": [f"${PENDING}", False]}}
    numbered = {
        "id": "$e.id",
        "depth": {"$subtract": ["$at", 1]},
        "parent": "$e.parent",
        "stored": "$e.stored",
    }
    is_ancestor = {"$gte": ["$$a.depth", 0]}
    scope: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if ids:
        scope["checkpoint_id"] = ids
    return [
        {"$match": scope},
        {"$sort": {"checkpoint_id": -1}},
        {"$limit": limit},
        {"$group": {"_id": None, "e": {"$push": entry}, **target_doc}},
        {"$unwind": {"path": "$e", "includeArrayIndex": "at"}},
        {
            "$group": {
                "_id": None,
                "target": {"$first": "$e.id"},
                PENDING: {"$first": f"$e.{PENDING}"},
                "start": {"$first": "$e.parent"},
                "chain": {"$push": numbered},
                **({"checkpoint": {"$first": "$checkpoint"}} if whole else {}),
            }
        },
        {"$match": {**at_target, **NOT_PENDING}},
        {"$addFields": {"chain": {"$filter": {"input": "$chain", "as": "a", "cond": is_ancestor}}}},
    ]


def chain_stages(
    collection: str, thread_id: str, checkpoint_ns: str, max_depth: int
) -> list[Stage]:
    """Emits ``{"start": the target's parent, "chain": [{"id", "depth", "parent",
    "stored"}, ...]}``: the ancestors at most ``max_depth`` steps above the parent
    (depth 0), nearest first.

    ``stored`` lists ``{"channel", "version"}`` of the values stored at that ancestor.
    The chain is filtered by thread and namespace again (copied threads share
    checkpoint ids, and not every server applies ``restrictSearchWithMatch``) and
    sorted by depth with ``$unwind``/``$sort``/``$group``: ``$graphLookup`` promises
    no order.
    """
    return [
        {
            "$graphLookup": {
                "from": collection,
                "startWith": "$parent_checkpoint_id",
                "connectFromField": "parent_checkpoint_id",
                "connectToField": "checkpoint_id",
                "as": "chain",
                "depthField": "depth",
                "maxDepth": max_depth,
                "restrictSearchWithMatch": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns},
            }
        },
        {"$unwind": "$chain"},
        {"$match": {"chain.thread_id": thread_id, "chain.checkpoint_ns": checkpoint_ns}},
        {"$sort": {"chain.depth": 1}},
        {
            "$group": {
                "_id": None,
                "start": {"$first": "$parent_checkpoint_id"},
                "chain": {"$push": _chain_entry("$chain.", depth="$chain.depth")},
            }
        },
    ]


def _chain_entry(path: str, depth: str | None = None) -> dict[str, Any]:
    """A chain entry's ``id``, ``depth`` if given, ``parent`` and ``stored`` (in the order
    every entry has), read from the checkpoint document at ``path`` (``"$"``, or
    ``"$chain."`` for one ``$graphLookup`` found)."""
    entry: dict[str, Any] = {"id": f"{path}checkpoint_id"}
    if depth is not None:
        entry["depth"] = depth
    entry["parent"] = {"$ifNull": [f"{path}parent_checkpoint_id", None]}
    entry["stored"] = {"$ifNull": [f"{path}values", []]}
    return entry


def seed_depth_stages(channels: Sequence[str]) -> list[Stage]:
    """Adds ``s<i>`` to the chain document, channel ``i``'s seed (the nearest entry
    storing it), and ``l<i>``, the seed's depth or ``NO_SEED`` when the chain has none."""
    nearest = {
        f"s{i}": {
            "$arrayElemAt": [
                {"$filter": {"input": "$chain", "as": "a", "cond": _stores("$$a", name)}},
                0,
            ]
        }
        for i, name in enumerate(_names(channels))
    }
    depths = {f"l{i}": {"$ifNull": [f"$s{i}.depth", NO_SEED]} for i in range(len(channels))}
    return [{"$addFields": nearest}, {"$addFields": depths}]


def work_item_stages(
    thread_id: str,
    checkpoint_ns: str,
    channels: Sequence[str],
    max_depth: int,
    whole: bool = False,
) -> list[Stage]:
    """Emits one document per lookup to make: ``{"chain": [ids up to the deepest seed],
    "cut": bool, "unseeded": bool, ...}``, then per channel ``{"channel", "ids": [write
    join keys up to its seed]}`` and, for a seeded channel, ``{"channel", "bj": [join
    keys of its seed value and of the list-delta bases it is rebuilt from], "vs": [their
    versions]}``; with ``whole`` first ``{"checkpoint"}``, ``{"tv": True, "bj": [join keys
    of its values]}`` and ``{"tw": True, "ids": [join key of its writes]}``, each looking
    up ``""`` (which no join key is) where it has nothing to look up.
    """
    names = _names(channels)
    # Join keys (see ``layout.write_join`` / ``layout.blob_join``) scope every lookup
    # to this thread and namespace.
    prefix = {"$literal": thread_id + JOIN_SEP + checkpoint_ns + JOIN_SEP}
    deepest: Any = "$l0"
    for i in range(1, len(names)):
        deepest = {"$cond": [{"$gt": [f"$l{i}", deepest]}, f"$l{i}", deepest]}
    # How the entries link, and where the walk stopped: ``missing_ancestor`` finds gaps.
    chain_item = _one(
        {
            "chain": _ids_within(deepest),
            "cut": _cut(len(names), max_depth),
            "unseeded": _unseeded(len(names)),
            "start": "$start",
            "parents": _ids_within(deepest, field="parent"),
            "end": {"$arrayElemAt": ["$chain", -1]},
            # The version each seeded channel's value is stored with: ``assemble`` checks
            # that it arrived, so a value missing is an error, not a shorter history.
            "seeds": {"$concatArrays": [_seed_version(i, ch) for i, ch in enumerate(channels)]},
        }
    )
    write_items = [
        _one({"channel": name, "ids": _ids_within(f"$l{i}", prefix)})
        for i, name in enumerate(names)
    ]
    seed_items = [_seed_item(i, channel, prefix) for i, channel in enumerate(channels)]
    target_items = _target_items(prefix) if whole else []
    items = {"$concatArrays": [*target_items, chain_item, *write_items, *seed_items]}
    return [
        {"$project": {"_id": 0, "items": items}},
        {"$unwind": "$items"},
        {"$replaceRoot": {"newRoot": "$items"}},
    ]


def _target_items(prefix: dict[str, str]) -> list[dict[str, Any]]:
    """The target's work items (``work_item_stages`` with ``whole``)."""
    names = {"$ifNull": ["$checkpoint.values", []]}
    values = blob_join_keys(names, [prefix, "$$v.channel", {"$literal": JOIN_SEP}])
    writes = _one({"$concat": [prefix, "$checkpoint.checkpoint_id"]})
    return [
        _one({"checkpoint": "$checkpoint", "bj": "", "ids": ""}),
        _one(
            {"tv": True, "bj": {"$cond": [{"$gt": [{"$size": names}, 0]}, values, ""]}, "ids": ""}
        ),
        _one({"tw": True, "bj": "", "ids": writes}),
    ]


def _unseeded(count: int) -> dict[str, Any]:
    """Whether one of ``count`` channels has no seed in the chain."""
    return {"$or": [{"$eq": [f"$l{i}", NO_SEED]} for i in range(count)]}


def _cut(count: int, max_depth: int) -> dict[str, Any]:
    """Whether one of ``count`` channels has no seed and the walk stopped at ``max_depth``
    although the entry there has a parent, so a longer walk might find more."""
    beyond = {
        "$filter": {
            "input": "$chain",
            "as": "a",
            "cond": {"$and": [{"$eq": ["$$a.depth", max_depth]}, {"$ne": ["$$a.parent", None]}]},
        }
    }
    return {"$and": [_unseeded(count), {"$gt": [{"$size": beyond}, 0]}]}


def _at_seed(i: int) -> dict[str, Any]:
    """Channel ``i``'s seed entry of the chain, as a list: empty when it has none."""
    return {"$filter": {"input": "$chain", "as": "a", "cond": {"$eq": ["$$a.depth", f"$l{i}"]}}}


def _seed_version(i: int, channel: str) -> dict[str, Any]:
    """``[{"channel", "version", "id"}]``: the version of channel ``i``'s seed value (the
    last of its ``values`` entries, after the list-delta bases) and the seed's checkpoint
    id; empty when it has no seed."""
    name = {"$literal": channel}
    versions = {"$map": {"input": _stored_entries(name), "as": "v", "in": "$$v.version"}}
    item = {"channel": name, "version": {"$arrayElemAt": [versions, -1]}, "id": "$$a.id"}
    return {"$map": {"input": _at_seed(i), "as": "a", "in": item}}


def _seed_item(i: int, channel: str, prefix: dict[str, str]) -> dict[str, Any]:
    """``[{"channel", "bj", "vs"}]`` for channel ``i``'s seed; empty when it has none."""
    name = {"$literal": channel}
    # The seed value and the list-delta bases it is rebuilt from: their join keys, and
    # their versions, which the parts found must have (``own_part_stages``).
    entries = _stored_entries(name)
    item = {
        "channel": name,
        "bj": blob_join_keys(entries, [prefix, {"$literal": channel + JOIN_SEP}]),
        "vs": {"$map": {"input": entries, "as": "v", "in": "$$v.version"}},
    }
    return {"$map": {"input": _at_seed(i), "as": "a", "in": item}}


def part_lookup_stages(collections: Mapping[str, str]) -> list[Stage]:
    """Adds ``b`` (one part of a seed value, by ``bj``) and ``w`` (one write part, by
    ``ids``): one document per part found, the work item alone when there is none."""
    return [
        {
            "$lookup": {
                "from": collections[BLOBS],
                "localField": "bj",
                "foreignField": "join",
                "as": "b",
            }
        },
        {"$unwind": {"path": "$b", "preserveNullAndEmptyArrays": True}},
        {
            "$lookup": {
                "from": collections[WRITES],
                "localField": "ids",
                "foreignField": "join",
                "as": "w",
            }
        },
        {"$unwind": {"path": "$w", "preserveNullAndEmptyArrays": True}},
    ]


def own_part_stages(thread_id: str, checkpoint_ns: str) -> list[Stage]:
    """Emits ``{"chain", "cut", "unseeded", ...}``, ``{"w": write part}`` or ``{"b": seed
    value part}`` (the other fields null): parts of another thread, namespace or channel
    are dropped, and so are items whose lookups found nothing."""

    def own(part: str, *more: dict[str, Any]) -> dict[str, Any]:
        return {
            "$and": [
                {"$eq": [f"{part}.thread_id", {"$literal": thread_id}]},
                {"$eq": [f"{part}.checkpoint_ns", {"$literal": checkpoint_ns}]},
                {"$eq": [f"{part}.channel", "$channel"]},
                *more,
            ]
        }

    # Of the join keys tried for a numeric version, only the stored version's part counts.
    own_version = {"$in": ["$b.version", {"$ifNull": ["$vs", []]}]}

    # The target's own parts (``tv``, ``tw``): ``reading.split_joined`` checks them.
    own_thread = {"$eq": ["$b.thread_id", {"$literal": thread_id}]}
    target_value = {"$and": [{"$eq": ["$tv", True]}, own_thread]}
    target_write = {
        "$and": [{"$eq": ["$tw", True]}, {"$eq": ["$w.thread_id", {"$literal": thread_id}]}]
    }
    return [
        {
            "$project": {
                "_id": 0,
                "checkpoint": 1,
                "tv": 1,
                "tw": 1,
                "chain": 1,
                "cut": 1,
                "unseeded": 1,
                "start": 1,
                "parents": 1,
                "end": 1,
                "seeds": 1,
                "w": {"$cond": [{"$or": [target_write, own("$w")]}, "$w", None]},
                "b": {"$cond": [{"$or": [target_value, own("$b", own_version)]}, "$b", None]},
            }
        },
        {
            "$match": {
                "$or": [
                    {"checkpoint": {"$exists": True}},
                    {"chain": {"$exists": True}},
                    {"w": {"$ne": None}},
                    {"b": {"$ne": None}},
                ]
            }
        },
    ]


def _names(channels: Sequence[str]) -> list[dict[str, str]]:
    return [{"$literal": ch} for ch in channels]


def _one(item: dict[str, Any]) -> dict[str, Any]:
    """A one-element array holding ``item``, its expressions evaluated."""
    return {"$map": {"input": [0], "in": item}}


def _stores(entry: str, channel: dict[str, Any]) -> dict[str, Any]:
    return {
        "$in": [channel, {"$map": {"input": f"{entry}.stored", "as": "v", "in": "$$v.channel"}}]
    }


def _ids_within(depth: Any, prefix: Any = None, field: str = "id") -> dict[str, Any]:
    """Ids (or another ``field``) of the chain entries at most ``depth`` steps above the
    target; with ``prefix``, their write join keys (``prefix`` + id)."""
    within = {"$filter": {"input": "$chain", "as": "a", "cond": {"$lte": ["$$a.depth", depth]}}}
    item = {"$concat": [prefix, "$$a.id"]} if prefix is not None else f"$$a.{field}"
    return {"$map": {"input": within, "as": "a", "in": item}}


def _stored_entries(name: dict[str, Any]) -> dict[str, Any]:
    """The ``values`` entries of ``name`` at chain entry ``$$a``: the version its value is
    stored with and the list-delta bases that value is rebuilt from."""
    cond = {"$eq": ["$$v.channel", name]}
    return {"$filter": {"input": "$$a.stored", "as": "v", "cond": cond}}


def missing_ancestor(docs: Iterable[Mapping[str, Any]], max_depth: int | None) -> str | None:
    """The id of an ancestor a ``history_pipeline`` walk needed and did not find stored:
    a gap in the chain up to the deepest seed, or (with the walk's ``max_depth``, when it
    is known to reach every seed) a parent where a walk that found no seed for some
    channel stopped short of it. A walk that found every channel's seed is complete: an
    ancestor missing beyond the deepest seed (deleted by maintenance, which keeps only
    what survivors need) is no hole. ``None`` when nothing is missing, or no ancestor was
    found at all."""
    for doc in docs:
        if "chain" not in doc:
            continue
        ids, parents = doc["chain"], doc.get("parents", [])
        if ids and ids[0] != doc.get("start"):
            return str(doc.get("start"))
        for i in range(len(ids) - 1):
            if parents[i] != ids[i + 1]:
                return str(parents[i])
        end: Mapping[str, Any] = doc.get("end") or {}
        reached_end = bool(ids) and end.get("id") == ids[-1]
        stopped_short = max_depth is not None and end.get("depth", max_depth) < max_depth
        unseeded = bool(doc.get("unseeded", True))
        if reached_end and end.get("parent") is not None and stopped_short and unseeded:
            return str(end["parent"])
    return None


class MissingHistoryError(MongoCkptError, LookupError):
    """A checkpoint's DeltaChannel history needs an ancestor that is not stored."""

    def __init__(
        self, thread_id: str, checkpoint_ns: str, channels: Sequence[str], ancestor: str
    ) -> None:
        super().__init__(
            f"DeltaChannel history missing: thread_id={thread_id!r} "
            f"checkpoint_ns={checkpoint_ns!r} channels={list(channels)!r} are rebuilt from "
            f"ancestor checkpoint {ancestor!r}, which is not stored (deleted while a run "
            "continued from it, or by hand)"
        )
        self.thread_id, self.checkpoint_ns = thread_id, checkpoint_ns
        self.channels, self.ancestor = list(channels), ancestor


def on_chain(
    docs: Iterable[Mapping[str, Any]], channels: Sequence[str]
) -> list[Mapping[str, Any]] | None:
    """``range_history_pipeline`` output kept to the target's parent chain, or ``None``
    when the range cannot stand for the walk.

    The chain is followed from the target's parent by parent pointers over the range
    (ancestors come in id order; a sibling from a fork is skipped, and so are its
    writes). The range stands for the walk when every channel's seed (the newest entry
    of the range storing it) is on the chain, since the writes fetched reach down to it,
    and, when some channel has none, when the chain reaches the thread's first
    checkpoint. Otherwise (a sibling stores a channel, the floor or the limit stopped the
    range above a seed, an ancestor is missing, the target is not stored) the caller
    walks as before.
    """
    docs = list(docs)
    heads = [d for d in docs if "chain" in d]
    if len(heads) != 1:
        return None
    head = heads[0]
    ancestors: list[str] = []
    following = head.get("start")
    for checkpoint_id, parent in zip(head["chain"], head["parents"]):
        if checkpoint_id == following:
            ancestors.append(checkpoint_id)
            following = parent
    kept = set(ancestors)
    seeds = {s["channel"]: s["id"] for s in head.get("seeds", ())}
    if any(seed not in kept for seed in seeds.values()):
        return None
    if len(seeds) < len(set(channels)) and following is not None:
        return None
    linear = {**head, "chain": ancestors}
    writes = [d for d in docs if d.get("w") and d["w"]["checkpoint_id"] in kept]
    return [linear, *writes, *(d for d in docs if d.get("b"))]


@dataclass(frozen=True, slots=True)
class RangeRead:
    """A history range read, judged: its output kept to the target's parent chain
    (``on_chain``), or ``None`` when it cannot stand for the walk, and then whether its
    limit cut it short (``range_cut_short``: the walk must not trust the counters)."""

    docs: list[Mapping[str, Any]] | None
    cut: bool = False


def judged(docs: Iterable[Mapping[str, Any]], channels: Sequence[str], limit: int) -> RangeRead:
    """The ``RangeRead`` of the output of a range read of ``limit`` checkpoints."""
    docs = list(docs)
    kept = on_chain(docs, channels)
    return RangeRead(kept, kept is None and range_cut_short(docs, limit))


def range_cut_short(docs: Iterable[Mapping[str, Any]], limit: int) -> bool:
    """Whether a range read that ``on_chain`` refused was stopped by its ``limit`` on a
    linear run of ancestors with a channel still unseeded: LangGraph's counters
    understated the distance, so the walk that follows must not trust them either."""
    for head in docs:
        if "chain" in head and head.get("unseeded"):
            ids, parents = head["chain"], head["parents"]
            linked = ids[:1] == [head.get("start")] and parents[:-1] == ids[1:]
            return linked and len(ids) == limit - 1 and parents[-1:] != [None]
    return False


def seed_ids(docs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Per channel, the id of the seed checkpoint a history read found."""
    return {s["channel"]: s["id"] for d in docs if "chain" in d for s in d.get("seeds", ())}


def walk_cut_short(docs: Iterable[Mapping[str, Any]]) -> bool:
    """Whether ``history_pipeline`` output says its walk may have stopped above a seed."""
    return any(d.get("cut") for d in docs if "chain" in d)


def assemble(
    docs: Iterable[Mapping[str, Any]],
    channels: Sequence[str],
    serde: SerializerProtocol,
    thread_id: str,
    checkpoint_ns: str,
) -> dict[str, DeltaChannelHistory]:
    """The ``get_delta_channel_history`` result from ``history_pipeline`` output.

    Raises ``MissingValueError`` when a seed value the walk found named is not there.
    """
    docs = list(docs)
    stored = {s["channel"]: s["version"] for d in docs if "chain" in d for s in d.get("seeds", ())}
    depth_of = {cid: depth for d in docs if "chain" in d for depth, cid in enumerate(d["chain"])}
    ordered: dict[str, list[tuple[tuple[Any, ...], PendingWrite]]] = {ch: [] for ch in channels}
    for _, (head, typed) in join((d["w"] for d in docs if d.get("w")), WRITE_KEY).items():
        order = (
            -depth_of[head["checkpoint_id"]],
            writes_sort_key(head.get("task_path", ""), head["task_id"], head["idx"]),
        )
        with places.at("write", head):
            write = (head["task_id"], head["channel"], serde.loads_typed(typed))
        ordered[head["channel"]].append((order, write))
    blobs = join((d["b"] for d in docs if d.get("b")), BLOB_KEY)
    # Per channel, the seed is the fetched version no other fetched version is based on.
    bases = {(*key[:3], head["base"]) for key, (head, _) in blobs.items() if "base" in head}
    seeds = {key[2]: key for key in blobs if key not in bases}
    for channel, version in stored.items():
        if channel not in seeds or seeds[channel][3] != version:
            raise MissingValueError(thread_id, checkpoint_ns, channel, version)
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {
            "writes": [w for _, w in sorted(ordered[ch], key=lambda x: x[0])]
        }
        seed = seeds.get(ch)
        if seed is not None:
            entry["seed"] = rebuild(blobs, seed, serde.loads_typed, _missing(seed))
        result[ch] = entry
    return result


def _missing(key: tuple[Any, ...]) -> Callable[[Any], Exception]:
    def error(at: Any) -> Exception:
        thread_id, checkpoint_ns, channel, version = key
        base = at if at != version else None
        return MissingValueError(thread_id, checkpoint_ns, channel, version, base)

    return error


Skeleton = Mapping[str, Any]


def needed_ancestors(
    skeletons: Iterable[Skeleton], survivors: Iterable[Skeleton]
) -> set[tuple[Any, ...]]:
    """Keys ``(thread_id, checkpoint_ns, checkpoint_id)`` of ancestors survivors rebuild from.

    A checkpoint's ``replay`` channels (DeltaChannels without a stored value) are
    rebuilt from the writes of its ancestors back to each channel's seed; those
    ancestors, seeds included, must stay, and since they stay they must rebuild
    too, so their own ancestors are added the same way.
    """
    by_key = {(s["thread_id"], s["checkpoint_ns"], s["checkpoint_id"]): s for s in skeletons}
    needed: set[tuple[Any, ...]] = set()
    pending = list(survivors)
    while pending:
        checkpoint = pending.pop()
        remaining = set(checkpoint.get("replay", ()))
        thread_id, checkpoint_ns = checkpoint["thread_id"], checkpoint["checkpoint_ns"]
        parent = checkpoint.get("parent_checkpoint_id")
        while remaining and parent is not None:
            key = (thread_id, checkpoint_ns, parent)
            ancestor = by_key.get(key)
            if ancestor is None:
                break
            if key not in needed:
                needed.add(key)
                pending.append(ancestor)
            remaining -= {v["channel"] for v in ancestor.get("values", ())}
            parent = ancestor.get("parent_checkpoint_id")
    return needed
