"""DeltaChannel history in one aggregation, and the ancestry a checkpoint needs.

``history_pipeline`` walks a checkpoint's ancestors with ``$graphLookup`` and
returns, as separate small documents, only the writes between the target and
each requested channel's seed (the nearest ancestor that stores the channel's
value) plus the seed values. ``assemble`` turns those documents into the
``DeltaChannelHistory`` mapping LangGraph expects. ``needed_ancestors`` is the
same walk in Python over checkpoint skeletons, used by prune and
delete_for_runs so they never cut a chain a surviving checkpoint needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt.layout import BLOB_KEY, BLOBS, CHECKPOINTS, JOIN_SEP, WRITE_KEY, WRITES
from mongo_ckpt.payload import join

# LangGraph snapshots every delta channel at least this often (same variable and default).
MAX_DEPTH = int(os.getenv("LANGGRAPH_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT", "5000")) + 1
_UNBOUNDED = MAX_DEPTH + 1


def _stores(entry: str, channel: dict[str, Any]) -> dict[str, Any]:
    return {
        "$in": [channel, {"$map": {"input": f"{entry}.stored", "as": "v", "in": "$$v.channel"}}]
    }


def _ids_within(depth: Any, prefix: Any = None) -> dict[str, Any]:
    """Ids of the chain entries at most ``depth`` steps above the target; with ``prefix``,
    their write join keys (``prefix`` + id)."""
    within = {"$filter": {"input": "$chain", "as": "a", "cond": {"$lte": ["$$a.depth", depth]}}}
    item = {"$concat": [prefix, "$$a.id"]} if prefix is not None else "$$a.id"
    return {"$map": {"input": within, "as": "a", "in": item}}


def _seed_version(name: dict[str, Any]) -> dict[str, Any]:
    """The version ``name`` is stored with at chain entry ``$$a``."""
    stored = {"$filter": {"input": "$$a.stored", "as": "v", "cond": {"$eq": ["$$v.channel", name]}}}
    return {"$let": {"vars": {"v": {"$arrayElemAt": [stored, 0]}}, "in": "$$v.version"}}


def history_pipeline(
    collections: Mapping[str, str],
    target: Mapping[str, Any],
    thread_id: str,
    checkpoint_ns: str,
    channels: Sequence[str],
) -> list[dict[str, Any]]:
    """One aggregation on ``checkpoints`` returning the history of ``channels`` at ``target``.

    ``target`` is the ``$match`` for the target checkpoint (the latest one if it
    names no id). Output documents are ``{"chain": [ancestor ids, nearest first]}``
    (once), ``{"w": write part}`` and ``{"b": seed value part}``. The
    ``$graphLookup`` chain is filtered by thread and namespace again (copied
    threads share checkpoint ids) and sorted by depth with
    ``$unwind``/``$sort``/``$group``, since its order is not guaranteed. Per
    channel, one ``$lookup`` fetches the writes of the ancestors up to the
    channel's seed. Only operators every backend implements are used: no
    ``$reduce``, ``$indexOfArray``, ``$sortArray`` or array-crossing paths.
    """
    names = [{"$literal": ch} for ch in channels]
    # Join keys (see ``layout.write_join`` / ``layout.blob_join``) scope every lookup
    # to this thread and namespace.
    prefix = {"$literal": thread_id + JOIN_SEP + checkpoint_ns + JOIN_SEP}
    deepest: Any = "$l0"
    for i in range(1, len(names)):
        deepest = {"$cond": [{"$gt": [f"$l{i}", deepest]}, f"$l{i}", deepest]}
    # One-element arrays are built with $map: object literals inside array literals
    # are not evaluated as expressions by every backend.
    chain_item = {"$map": {"input": [0], "in": {"chain": _ids_within(deepest)}}}
    write_items = [
        {"$map": {"input": [0], "in": {"channel": name, "ids": _ids_within(f"$l{i}", prefix)}}}
        for i, name in enumerate(names)
    ]
    seed_items = [
        {
            "$map": {
                "input": {
                    "$filter": {
                        "input": "$chain",
                        "as": "a",
                        "cond": {"$eq": ["$$a.depth", f"$l{i}"]},
                    }
                },
                "as": "a",
                "in": {
                    "channel": name,
                    "bj": {
                        "$concat": [
                            prefix,
                            {"$literal": channels[i] + JOIN_SEP},
                            _seed_version(name),
                        ]
                    },
                },
            }
        }
        for i, name in enumerate(names)
    ]

    def own(prefix: str) -> dict[str, Any]:
        return {
            "$and": [
                {"$eq": [f"{prefix}.thread_id", {"$literal": thread_id}]},
                {"$eq": [f"{prefix}.checkpoint_ns", {"$literal": checkpoint_ns}]},
                {"$eq": [f"{prefix}.channel", "$channel"]},
            ]
        }

    return [
        {"$match": target},
        {"$sort": {"checkpoint_id": -1}},
        {"$limit": 1},
        {
            "$graphLookup": {
                "from": collections[CHECKPOINTS],
                "startWith": "$parent_checkpoint_id",
                "connectFromField": "parent_checkpoint_id",
                "connectToField": "checkpoint_id",
                "as": "chain",
                "depthField": "depth",
                "maxDepth": MAX_DEPTH,
                "restrictSearchWithMatch": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns},
            }
        },
        {"$unwind": "$chain"},
        {"$match": {"chain.thread_id": thread_id, "chain.checkpoint_ns": checkpoint_ns}},
        {"$sort": {"chain.depth": 1}},
        {
            "$group": {
                "_id": None,
                "chain": {
                    "$push": {
                        "id": "$chain.checkpoint_id",
                        "depth": "$chain.depth",
                        "stored": {"$ifNull": ["$chain.values", []]},
                    }
                },
            }
        },
        # s<i>: the nearest ancestor storing channel i (its seed); l<i>: its depth, or
        # past the end of the chain when the channel has no seed.
        {
            "$addFields": {
                f"s{i}": {
                    "$arrayElemAt": [
                        {"$filter": {"input": "$chain", "as": "a", "cond": _stores("$$a", name)}},
                        0,
                    ]
                }
                for i, name in enumerate(names)
            }
        },
        {
            "$addFields": {
                f"l{i}": {"$ifNull": [f"$s{i}.depth", _UNBOUNDED]} for i in range(len(names))
            }
        },
        {
            "$project": {
                "_id": 0,
                "items": {"$concatArrays": [chain_item, *write_items, *seed_items]},
            }
        },
        {"$unwind": "$items"},
        {"$replaceRoot": {"newRoot": "$items"}},
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
        {
            "$project": {
                "_id": 0,
                "chain": 1,
                "w": {"$cond": [own("$w"), "$w", None]},
                "b": {"$cond": [own("$b"), "$b", None]},
            }
        },
        {
            "$match": {
                "$or": [{"chain": {"$exists": True}}, {"w": {"$ne": None}}, {"b": {"$ne": None}}]
            }
        },
    ]


def assemble(
    docs: Iterable[Mapping[str, Any]], channels: Sequence[str], serde: SerializerProtocol
) -> dict[str, DeltaChannelHistory]:
    """The ``get_delta_channel_history`` result from ``history_pipeline`` output."""
    docs = list(docs)
    depth_of = {cid: depth for d in docs if "chain" in d for depth, cid in enumerate(d["chain"])}
    ordered: dict[str, list[tuple[tuple[Any, ...], PendingWrite]]] = {ch: [] for ch in channels}
    for _, (head, typed) in join((d["w"] for d in docs if d.get("w")), WRITE_KEY).items():
        order = (
            -depth_of[head["checkpoint_id"]],
            writes_sort_key(head.get("task_path", ""), head["task_id"], head["idx"]),
        )
        write = (head["task_id"], head["channel"], serde.loads_typed(typed))
        ordered[head["channel"]].append((order, write))
    seeds = {
        key[2]: typed
        for key, (_, typed) in join((d["b"] for d in docs if d.get("b")), BLOB_KEY).items()
    }
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {
            "writes": [w for _, w in sorted(ordered[ch], key=lambda x: x[0])]
        }
        if ch in seeds:
            entry["seed"] = serde.loads_typed(seeds[ch])
        result[ch] = entry
    return result


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
