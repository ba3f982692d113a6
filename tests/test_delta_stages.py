"""The DeltaChannel history pipeline stage by stage, and the walk bounded by the snapshot distance.

Each stage builder of ``mongo_ckpt.delta`` is run, with the stages before it, on a small
hand-made thread, and its output documents are compared with the shape its docstring
notes. Then, on a long conversation with frequent snapshots, every state load walks no
further than the farthest seed it needs: the checkpoints it visits are at most that
distance + 1 (the target).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver, listdelta
from mongo_ckpt import memory as memory_module
from mongo_ckpt.base import MongoSaverBase
from mongo_ckpt.delta import (
    NO_SEED,
    RangeRead,
    chain_stages,
    history_pipeline,
    missing_ancestor,
    on_chain,
    own_part_stages,
    part_lookup_stages,
    range_chain_stages,
    range_history_pipeline,
    range_limit,
    seed_depth_stages,
    work_item_stages,
)
from mongo_ckpt.layout import (
    BLOBS,
    CHECKPOINTS,
    JOIN_SEP,
    PENDING,
    WRITES,
    blob_join,
    write_join,
)
from mongo_ckpt.memory import CheckpointMemory
from mongo_ckpt.reading import checkpoint_query, newest_stages
from mongo_ckpt.snapshot_distance import (
    MAX_DEPTH,
    supersteps_since_snapshot,
    walk_depth,
)
from tests.backends import count_calls
from tests.delta_graphs import CHANNEL, DefaultWalk, HistoryWalks, Recorder, message_summary
from tests.graphs import thread
from tests.perf.conversation import DELTA, chat_graph, converse
from tests.saver_support import Api

NAMES = {CHECKPOINTS: "cp", BLOBS: "blobs", WRITES: "writes"}
PENDING_SET = {"$set": {PENDING: True}}
T, NS = "t", ""
# A thread c0 <- c1 <- c2 <- c3 <- c4: "m" is stored at c1 (version 1), "n" nowhere, and
# every checkpoint has one write to "m" and one to "n". Thread "u" is a copy of c0..c2
# (same checkpoint ids) storing "m" at c2, which thread "t" must never see.
CHAIN = ["c0", "c1", "c2", "c3", "c4"]


def _checkpoint(thread_id: str, i: int, stored: list[str]) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": NS,
        "checkpoint_id": CHAIN[i],
        "parent_checkpoint_id": CHAIN[i - 1] if i else None,
        "values": [{"channel": ch, "version": str(i)} for ch in stored],
    }


def _write(thread_id: str, checkpoint_id: str, channel: str) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": NS,
        "checkpoint_id": checkpoint_id,
        "channel": channel,
        "join": write_join(thread_id, NS, checkpoint_id),
        "value": f"{thread_id}/{checkpoint_id}/{channel}",
    }


def _blob(thread_id: str, i: int, channel: str) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "checkpoint_ns": NS,
        "channel": channel,
        "version": str(i),
        "join": blob_join(thread_id, NS, channel, str(i)),
        "value": f"{thread_id}/{channel}@{i}",
    }


@pytest.fixture
def db(client: Any) -> Iterator[Any]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    db = client[name]
    db[NAMES[CHECKPOINTS]].insert_many(
        [_checkpoint(T, i, ["m"] if i == 1 else []) for i in range(5)]
        + [_checkpoint("u", i, ["m"] if i == 2 else []) for i in range(3)]
    )
    db[NAMES[WRITES]].insert_many(
        [_write(tid, c, ch) for tid in (T, "u") for c in CHAIN for ch in ("m", "n")]
    )
    db[NAMES[BLOBS]].insert_many([_blob(T, 1, "m"), _blob("u", 2, "m")])
    yield db
    client.drop_database(name)


def run(db: Any, stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    docs = list(db[NAMES[CHECKPOINTS]].aggregate(stages))
    for doc in docs:
        doc.pop("_id", None)
    return docs


def walk(max_depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    return [
        *newest_stages({"thread_id": T, "checkpoint_ns": NS}),
        *chain_stages(NAMES[CHECKPOINTS], T, NS, max_depth),
    ]


def test_newest_stages_emit_the_newest_matching_checkpoint(db: Any) -> None:
    latest = run(db, newest_stages({"thread_id": T, "checkpoint_ns": NS}))
    assert [(d["thread_id"], d["checkpoint_id"]) for d in latest] == [(T, "c4")]
    chosen = run(db, newest_stages({"thread_id": T, "checkpoint_ns": NS, "checkpoint_id": "c2"}))
    assert [d["checkpoint_id"] for d in chosen] == ["c2"]
    assert run(db, newest_stages({"thread_id": T, "checkpoint_ns": "other"})) == []


def test_newest_stages_skip_a_pending_checkpoint_matching_its_key_first(db: Any) -> None:
    db[NAMES[CHECKPOINTS]].update_one({"thread_id": T, "checkpoint_id": "c4"}, PENDING_SET)
    stages = newest_stages(checkpoint_query(T, NS, None))
    assert [d["checkpoint_id"] for d in run(db, stages)] == ["c3"]
    # The key alone first, so a server planning indexes per ``$match`` reads checkpoint_key.
    assert stages[0] == {"$match": {"thread_id": T, "checkpoint_ns": NS}}
    assert run(db, newest_stages(checkpoint_query(T, NS, "c4"))) == []


def test_chain_stages_emit_the_thread_ancestors_nearest_first(db: Any) -> None:
    [doc] = run(db, walk())
    assert doc == {
        "start": "c3",
        "chain": [
            {"id": "c3", "depth": 0, "parent": "c2", "stored": []},
            {"id": "c2", "depth": 1, "parent": "c1", "stored": []},
            {"id": "c1", "depth": 2, "parent": "c0", "stored": [{"channel": "m", "version": "1"}]},
            {"id": "c0", "depth": 3, "parent": None, "stored": []},
        ]
    }
    [short] = run(db, walk(max_depth=1))
    assert [(e["id"], e["depth"]) for e in short["chain"]] == [("c3", 0), ("c2", 1)]
    root = newest_stages({"thread_id": T, "checkpoint_ns": NS, "checkpoint_id": "c0"})
    # The root has no ancestors: no document (mongomock: one with an empty chain).
    rooted = run(db, [*root, *chain_stages(NAMES[CHECKPOINTS], T, NS, MAX_DEPTH)])
    assert [d["chain"] for d in rooted] in ([], [[]])


def test_seed_depth_stages_add_each_channels_seed_depth(db: Any) -> None:
    [doc] = run(db, [*walk(), *seed_depth_stages(["m", "n"])])
    assert (doc["l0"], doc["l1"]) == (2, NO_SEED)
    assert doc["s0"]["id"] == "c1"
    [short] = run(db, [*walk(max_depth=1), *seed_depth_stages(["m"])])
    assert short["l0"] == NO_SEED


ROOT = {"id": "c0", "depth": 3, "parent": None, "stored": []}
C1 = {"id": "c1", "depth": 2, "parent": "c0", "stored": [{"channel": "m", "version": "1"}]}
C2 = {"id": "c2", "depth": 1, "parent": "c1", "stored": []}


def links(n: int) -> dict[str, Any]:
    """``start`` and ``parents`` of a chain item whose chain is c3, c2... (``n`` entries)."""
    return {"start": "c3", "parents": ["c2", "c1", "c0", None][:n]}


def test_work_item_stages_emit_one_document_per_lookup(db: Any) -> None:
    prefix = T + JOIN_SEP + NS + JOIN_SEP
    docs = run(
        db,
        [*walk(), *seed_depth_stages(["m", "n"]), *work_item_stages(T, NS, ["m", "n"], MAX_DEPTH)],
    )
    assert docs == [
        # "n" has no seed, so the chain goes to the root; the full walk is not cut, and it
        # ends at the root (no parent: nothing is missing).
        {
            "chain": ["c3", "c2", "c1", "c0"],
            "cut": False,
            "unseeded": True,
            **links(4),
            "end": ROOT,
            # The version of each seed value found: "m" at c1.
            "seeds": [{"channel": "m", "version": "1", "id": "c1"}],
        },
        {"channel": "m", "ids": [prefix + c for c in ("c3", "c2", "c1")]},
        {"channel": "n", "ids": [prefix + c for c in ("c3", "c2", "c1", "c0")]},
        # The join keys of the seed value and of the list-delta bases it is rebuilt from.
        {"channel": "m", "bj": [blob_join(T, NS, "m", "1")], "vs": ["1"]},
    ]
    seeded = run(
        db, [*walk(max_depth=2), *seed_depth_stages(["m"]), *work_item_stages(T, NS, ["m"], 2)]
    )
    assert seeded[0] == {
        "chain": ["c3", "c2", "c1"],
        "cut": False,
        "unseeded": False,
        **links(3),
        "end": C1,
        "seeds": [{"channel": "m", "version": "1", "id": "c1"}],
    }
    assert missing_ancestor(seeded, 2) is None  # stopped at the depth bound, not a gap
    # A walk that stops above c1 with "m" unseeded while c2 has a parent is cut.
    cut = run(
        db, [*walk(max_depth=1), *seed_depth_stages(["m"]), *work_item_stages(T, NS, ["m"], 1)]
    )
    assert cut[0] == {
        "chain": ["c3", "c2"],
        "cut": True,
        "unseeded": True,
        **links(2),
        "end": C2,
        "seeds": [],
    }
    assert [d for d in cut if "bj" in d] == []


def test_a_walk_that_meets_a_missing_ancestor_names_it(db: Any) -> None:
    db[NAMES[CHECKPOINTS]].delete_one({"thread_id": T, "checkpoint_id": "c1"})
    stages = [*walk(), *seed_depth_stages(["m"]), *work_item_stages(T, NS, ["m"], MAX_DEPTH)]
    docs = run(db, stages)
    # "m" is stored at c1 only: the walk stops at c2, whose parent is gone (a server that
    # ignores restrictSearchWithMatch walks on through thread "u" and finds c0: a gap).
    assert docs[0]["chain"][:2] == ["c3", "c2"]
    assert missing_ancestor(docs, MAX_DEPTH) == "c1"
    db[NAMES[CHECKPOINTS]].delete_one({"thread_id": T, "checkpoint_id": "c3"})
    # The target's parent: named, or (no ancestor found at all) left to the saver's check.
    assert missing_ancestor(run(db, stages), MAX_DEPTH) in ("c3", None)


def test_a_missing_ancestor_above_every_seed_is_no_gap(db: Any) -> None:
    # What prune leaves under durability="exit": the seed's parent is gone, and LangGraph's
    # counters allow a deeper walk than the checkpoints stored, so the walk stops short.
    db[NAMES[CHECKPOINTS]].delete_one({"thread_id": T, "checkpoint_id": "c0"})
    stages = [*walk(), *seed_depth_stages(["m"]), *work_item_stages(T, NS, ["m"], MAX_DEPTH)]
    docs = run(db, stages)
    assert docs[0]["chain"] == ["c3", "c2", "c1"] and docs[0]["unseeded"] is False
    assert missing_ancestor(docs, MAX_DEPTH) is None
    # A channel without a seed there still needs c0's history: a hole.
    both = [*walk(), *seed_depth_stages(["m", "n"]), *work_item_stages(T, NS, ["m", "n"], 9)]
    assert missing_ancestor(run(db, both), 9) == "c0"


# Versions as Python's ``str`` spells them in ``blob_join``: strings, ints, longs, doubles
# (whole ones are "1.0"; MongoDB's ``$toString`` drops the ".0").
VERSIONS = ["00000000002.abc", "1.0", 1, 7, 2**40, 1.0, 3.0, 1.5, 0.1, -2.0, 12345678901234.0]


def test_seed_join_keys_match_python_for_every_version_type(db: Any) -> None:
    checkpoints, blobs = db[NAMES[CHECKPOINTS]], db[NAMES[BLOBS]]
    for n, version in enumerate(VERSIONS):
        channel = f"v{n}"
        checkpoints.update_one(
            {"thread_id": T, "checkpoint_id": "c1"},
            {"$push": {"values": {"channel": channel, "version": version}}},
        )
        blob = {**_blob(T, 1, channel), "version": version, "value": repr(version)}
        blobs.insert_one({**blob, "join": blob_join(T, NS, channel, version)})
    # A string version spelled like a number's key is not that number's value.
    string = {**_blob(T, 1, "v2"), "version": "1.0", "value": "the string '1.0'"}
    blobs.insert_one({**string, "join": blob_join(T, NS, "v2", "1.0")})
    channels = [f"v{n}" for n in range(len(VERSIONS))]
    docs = run(db, history_pipeline(NAMES, {"thread_id": T, "checkpoint_ns": NS}, T, NS, channels))
    found = {d["b"]["channel"]: d["b"]["value"] for d in docs if d.get("b")}
    assert found == {f"v{n}": repr(v) for n, v in enumerate(VERSIONS)}


def test_part_lookup_stages_add_one_part_per_document(db: Any) -> None:
    stages = [
        *walk(),
        *seed_depth_stages(["m"]),
        *work_item_stages(T, NS, ["m"], MAX_DEPTH),
        *part_lookup_stages(NAMES),
    ]
    docs = run(db, stages)
    chain_docs = [d for d in docs if "chain" in d]
    assert [("w" in d, "b" in d) for d in chain_docs] == [(False, False)]
    writes = sorted(d["w"]["value"] for d in docs if "ids" in d)
    # The lookup by join key brings every channel's writes of c3..c1; the next stage
    # keeps those of the item's channel.
    assert writes == sorted(f"{T}/{c}/{ch}" for c in ("c3", "c2", "c1") for ch in ("m", "n"))
    [seed] = [d for d in docs if "bj" in d]
    assert seed["b"]["value"] == f"{T}/m@1"


def test_own_part_stages_keep_only_this_channels_parts(db: Any) -> None:
    stages = history_pipeline(NAMES, {"thread_id": T, "checkpoint_ns": NS}, T, NS, ["m", "n"])
    assert stages[-2:] == own_part_stages(T, NS)
    docs = run(db, stages)
    assert docs[0] == {
        "chain": ["c3", "c2", "c1", "c0"],
        "cut": False,
        "unseeded": True,
        **links(4),
        "end": ROOT,
        "seeds": [{"channel": "m", "version": "1", "id": "c1"}],
        "w": None,
        "b": None,
    }
    assert sorted(d["w"]["value"] for d in docs if d.get("w")) == sorted(
        [f"{T}/{c}/m" for c in ("c3", "c2", "c1")] + [f"{T}/{c}/n" for c in CHAIN[:4]]
    )
    assert [d["b"]["value"] for d in docs if d.get("b")] == [f"{T}/m@1"]
    assert [sorted(k for k, v in d.items() if v is not None) for d in docs[1:]] == [["w"]] * 7 + [
        ["b"]
    ]


# -- the walk's bound ------------------------------------------------------------------


def test_walk_depth_reaches_the_farthest_seed() -> None:
    metadata = {
        "counters_since_delta_snapshot": {"a": (1, 3), "b": [7, 9], "c": [2, "x"], "d": [1, -1]}
    }
    steps = supersteps_since_snapshot(metadata)
    assert steps == {"a": 3, "b": 9}
    assert walk_depth(steps, ["a"]) == 2
    assert walk_depth(steps, ["a", "b"]) == 8
    assert walk_depth(steps, ["a", "c"]) == MAX_DEPTH  # "c" has no usable count
    assert walk_depth({}, ["a"]) == MAX_DEPTH
    assert walk_depth({"a": 10**9}, ["a"]) == MAX_DEPTH


def test_snapshot_distances_keep_the_latest_entries() -> None:
    memory = CheckpointMemory(checkpoints=2)
    keys = [("t", "", f"c{i}") for i in range(3)]
    for i, key in enumerate(keys):
        doc = dict(zip(("thread_id", "checkpoint_ns", "checkpoint_id"), key))
        memory.read(doc, {"counters_since_delta_snapshot": {"a": (0, i + 2)}})
    assert [memory.walk_depth(key, ["a"]) for key in keys] == [MAX_DEPTH, 2, 3]
    memory.read(dict(zip(("thread_id", "checkpoint_ns", "checkpoint_id"), keys[2])), {})
    assert memory.walk_depth(keys[2], ["a"]) == MAX_DEPTH  # re-read without counters
    memory.forget(["t"])
    assert memory.walk_depth(keys[1], ["a"]) == MAX_DEPTH


def test_the_checkpoint_a_get_tuple_finds_and_what_it_replays() -> None:
    memory = CheckpointMemory()
    key = ("t", "", "c1")
    doc = {**dict(zip(("thread_id", "checkpoint_ns", "checkpoint_id"), key)), "replay": ["a"]}
    assert memory.replayed("t", "", None) is None  # nothing written, nothing expected
    memory.wrote(key, listdelta.Plan(), "c0", doc, {"counters_since_delta_snapshot": {"a": (2, 2)}})
    assert memory.replayed("t", "", None) == (key, ("a",))  # the latest: written last
    assert memory.replayed("t", "", "c1") == (key, ("a",))
    assert memory.walk_depth(key, ["a"]) == 1  # its put noted the counters
    assert memory.replayed("t", "", "c0") is None  # never seen
    assert memory.replayed("t", "ns", None) is None  # another namespace
    memory.read({**doc, "checkpoint_id": "c2", "replay": []}, {})
    assert memory.replayed("t", "", "c2") is None  # seen, replays nothing
    memory.read({**doc, "checkpoint_id": "c3"}, {})
    memory.found_latest(("t", ""), "c3", False, "c1")  # read as the latest: newer than c1
    assert memory.replayed("t", "", None) == (("t", "", "c3"), ("a",))
    memory.found_latest(("t", ""), "c2", False, "c3")  # an older latest (a slow read): not kept
    assert memory.replayed("t", "", None) == (("t", "", "c3"), ("a",))
    assert memory.newest_known("t", "") == "c3"
    # A read of the whole thread found an older one: c3 is gone; c1, written last, is older.
    memory.found_latest(("t", ""), "c2", whole=True, since="c3")
    assert memory.newest_known("t", "") == "c2"
    memory.found_latest(("t", ""), None, whole=True, since="c2")  # empty: c1 is gone too
    assert memory.newest_known("t", "") is None
    assert memory.replayed("t", "", None) is None
    memory.found_latest(("t", ""), "c3", False, None)
    memory.forget(["t"])
    assert memory.replayed("t", "", None) is None
    memory.read({**doc, "checkpoint_id": "c3"}, {})
    assert memory.replayed("t", "", None) is None  # the latest found is forgotten too


def test_a_history_read_with_the_tuple_is_taken_once_for_its_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    memory = CheckpointMemory()
    key = ("t", "", "c1")
    part = {"b": {"data": b"x" * 100}}
    read = RangeRead([{"chain": []}, part])
    memory.prefetched(key, ["a", "b"], read)
    assert memory.take_prefetched(key, ["a"]) is None  # other channels: dropped
    assert memory.take_prefetched(key, ["a", "b"]) is None
    memory.prefetched(key, ["a", "b"], read)
    assert memory.take_prefetched(key, ["b", "a"]) == read
    assert memory.take_prefetched(key, ["a", "b"]) is None  # taken once
    memory.prefetched(key, ["a"], read)
    memory.forget(["t"])
    assert memory.take_prefetched(key, ["a"]) is None
    clock = [0.0]
    monkeypatch.setattr(memory_module, "monotonic", lambda: clock[0])
    memory.prefetched(key, ["a"], read)
    clock[0] = memory_module.PREFETCH_SECONDS + 1
    assert memory.take_prefetched(key, ["a"]) is None  # too old
    # Bounded by the stored bytes of the parts held: one past the budget is not kept.
    monkeypatch.setattr(memory_module, "PREFETCHED_BYTES", 2048)
    small = CheckpointMemory()
    small.prefetched(key, ["a"], RangeRead([{"b": {"data": b"x" * 2048}}]))
    assert small.take_prefetched(key, ["a"]) is None
    small.prefetched(key, ["a"], read)
    small.prefetched(("t", "", "c2"), ["a"], read)  # 2 x (1024 + 100) > 2048: c1 evicted
    assert small.take_prefetched(key, ["a"]) is None
    assert small.take_prefetched(("t", "", "c2"), ["a"]) == read


def test_seed_floors_follow_the_newest_history_read() -> None:
    memory = CheckpointMemory()
    memory.found_seeds(("t", "", "c5"), {"a": "c3", "b": "c1"})
    assert memory.seed_floor(("t", "", "c6"), ["a", "b"]) == "c1"  # the oldest of the two
    assert memory.seed_floor(("t", "", "c6"), ["a"]) == "c3"
    assert memory.seed_floor(("t", "", "c6"), ["a", "x"]) is None  # "x" never read
    assert memory.seed_floor(("t", "", "c4"), ["a"]) is None  # older than the read's target
    assert memory.seed_floor(("t", "ns", "c6"), ["a"]) is None  # another namespace
    memory.found_seeds(("t", "", "c2"), {"a": "c0"})  # an older target: kept as it was
    memory.found_seeds(("t", "", "c5"), {"x": "c4"})  # the same target: merged
    assert memory.seed_floor(("t", "", "c6"), ["a", "x"]) == "c3"
    memory.found_seeds(("t", "", "c7"), {"a": "c6"})  # a newer target: replaces
    assert memory.seed_floor(("t", "", "c8"), ["a"]) == "c6"
    assert memory.seed_floor(("t", "", "c8"), ["b"]) is None
    memory.forget(["t"])
    assert memory.seed_floor(("t", "", "c8"), ["a"]) is None


def test_range_limits() -> None:
    assert range_limit(MAX_DEPTH, None) is None  # nothing bounds the range: walk
    assert range_limit(MAX_DEPTH, "c1") == MAX_DEPTH + 2  # the walk's bound, target included
    assert range_limit(3, None) == 5  # the target and depths 0..3
    assert range_limit(3, "c1") == 10  # as many places again for a fork's siblings


def test_range_chain_stages_number_the_range_below_the_target(db: Any) -> None:
    stages = range_chain_stages(T, NS, "c3", None, 3)
    [doc] = run(db, stages)
    assert (doc["target"], doc["start"]) == ("c3", "c2")
    assert [(e["id"], e["depth"], e["parent"]) for e in doc["chain"]] == [
        ("c2", 0, "c1"),
        ("c1", 1, "c0"),
    ]
    assert doc["chain"][1]["stored"] == [{"channel": "m", "version": "1"}]
    [floored] = run(db, range_chain_stages(T, NS, "c3", "c2", 9))
    assert [e["id"] for e in floored["chain"]] == ["c2"]
    assert run(db, range_chain_stages(T, NS, "c9", None, 3)) == []  # no target stored
    db[NAMES[CHECKPOINTS]].update_one({"thread_id": T, "checkpoint_id": "c4"}, PENDING_SET)
    assert run(db, range_chain_stages(T, NS, "c4", None, 3)) == []  # nor a pending one
    # The whole pipeline equals the walk's on a linear thread.
    channels = ["m", "n"]
    ranged = run(db, range_history_pipeline(NAMES, T, NS, "c3", channels, None, 9))
    target = {"thread_id": T, "checkpoint_ns": NS, "checkpoint_id": "c3"}
    walked = run(db, history_pipeline(NAMES, target, T, NS, channels))
    assert sorted(map(repr, on_chain(ranged, channels) or [])) == sorted(map(repr, walked))


def test_on_chain_skips_siblings_and_refuses_what_it_cannot_stand_for() -> None:
    # Range below c6 (newest first): c5 <- c1 is the chain, c4 and c3 a sibling branch.
    def head(seeds: list[str], unseeded: bool = False) -> dict[str, Any]:
        return {
            "chain": ["c5", "c4", "c3", "c1"],
            "parents": ["c1", "c3", "c1", "c0"],
            "start": "c5",
            "unseeded": unseeded,
            "seeds": [{"channel": "m", "version": "1", "id": s} for s in seeds],
        }

    writes = [{"w": {"checkpoint_id": c}} for c in ("c5", "c4", "c3", "c1")]
    seed = {"b": {"channel": "m"}}
    kept = on_chain([head(["c1"]), *writes, seed], ["m"])
    assert kept is not None
    assert kept[0]["chain"] == ["c5", "c1"]
    assert [d["w"]["checkpoint_id"] for d in kept if "w" in d] == ["c5", "c1"]
    assert kept[-1] == seed
    assert on_chain([head(["c3"]), *writes], ["m"]) is None  # the sibling stores "m"
    assert on_chain([head([], True), *writes], ["m"]) is None  # c1's parent c0 not read
    assert on_chain([], ["m"]) is None  # no target


def seed_distances(saver: MongoSaverBase, thread_id: str) -> dict[str, int]:
    """Per checkpoint id, how many checkpoints up its ``messages`` seed is (the root's
    distance when it has none), from the stored documents."""
    stored = saver.db[saver.layout.checkpoints].find({"thread_id": thread_id})
    docs = {d["checkpoint_id"]: d for d in stored}
    out = {}
    for checkpoint_id, doc in docs.items():
        distance, parent = 0, doc["parent_checkpoint_id"]
        while parent is not None:
            distance += 1
            if CHANNEL in {v["channel"] for v in docs[parent]["values"]}:
                break
            parent = docs[parent]["parent_checkpoint_id"]
        out[checkpoint_id] = distance
    return out


def visited(saver: MongoSaverBase, thread_id: str, checkpoint_id: str, max_depth: int) -> int:
    """Checkpoints the walk reads: the target and its chain."""
    target = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    name = saver.layout.checkpoints
    stages = [*newest_stages(target), *chain_stages(name, thread_id, "", max_depth)]
    docs = list(saver.db[name].aggregate(stages))
    return 1 + sum(len(d["chain"]) for d in docs)


def test_state_loads_walk_only_to_the_farthest_seed(saver: MongoDBSaver) -> None:
    """A 30-turn DeltaChannel conversation snapshotting every 4 updates (every 2 turns),
    stored as the graph stores it; every checkpoint's state is loaded through the graph."""
    recorder = Recorder()
    reference = converse(recorder, 30, DELTA, "long", snapshot_frequency=4)
    for method, args in recorder.calls:
        getattr(saver, method)(*args)
    graph = chat_graph(saver, DELTA, snapshot_frequency=4)
    walks = HistoryWalks(saver)
    distances = seed_distances(saver, "long")
    loads = 0
    for t in list(saver.list(thread("long"))):
        checkpoint_id = t.config["configurable"]["checkpoint_id"]
        walks.clear()
        state = graph.get_state(t.config)
        assert message_summary(state.values.get(CHANNEL, [])) == message_summary(
            reference.get_state(t.config).values.get(CHANNEL, [])
        )
        if not walks.ranges:
            continue  # the checkpoint stores a snapshot: nothing to replay
        loads += 1
        # A linear thread: one range read, which stands for the walk.
        assert walks.max_depths == [], checkpoint_id
        [read] = walks.range_reads()
        assert read <= distances[checkpoint_id] + 1, checkpoint_id
    assert loads > 40
    # Without the bound, the latest checkpoint's walk reads the whole thread.
    latest = saver.get_tuple(thread("long")).config["configurable"]["checkpoint_id"]
    assert visited(saver, "long", latest, MAX_DEPTH) == len(distances) > distances[latest] + 1


async def test_async_state_load_is_bounded(asaver: AsyncMongoDBSaver) -> None:
    recorder = Recorder()
    converse(recorder, 5, DELTA, "short", snapshot_frequency=4)
    await recorder.replay(Api(asaver))
    walks = HistoryWalks(asaver)
    calls = count_calls(asaver.collections)
    latest = await asaver.aget_tuple(thread("short"))
    history = await asaver.aget_delta_channel_history(config=latest.config, channels=[CHANNEL])
    steps = latest.metadata["counters_since_delta_snapshot"][CHANNEL][1]
    # One range read of the target and its ``steps`` nearest ancestors, down to the seed,
    # made by the get_tuple (the saver wrote the thread, so it knows the counters): the
    # state load is one aggregation.
    assert (walks.max_depths, [r[2] for r in walks.ranges]) == ([], [{"$limit": steps + 1}])
    assert calls == {(CHECKPOINTS, "aggregate"): 1}
    expected = recorder.get_delta_channel_history(config=latest.config, channels=[CHANNEL])
    assert history == expected


# -- without counters, or with counters that understate the distance -------------------


def _put_chain(saver: MongoDBSaver, claimed: list[int | None]) -> list[dict[str, Any]]:
    """c0 stores ``messages``; c1.. store nothing, c<i> claiming ``claimed[i - 1]``
    supersteps since the snapshot (no counters when ``None``); one write per checkpoint."""
    configs = []
    parent = thread("hand")
    for i, steps in enumerate([0, *claimed]):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"c{i}"
        checkpoint["channel_versions"] = {CHANNEL: str(i + 1)}
        if i == 0:
            checkpoint["channel_values"] = {CHANNEL: ["seed"]}
        metadata: dict[str, Any] = {"step": i}
        if i and steps is not None:
            metadata["counters_since_delta_snapshot"] = {CHANNEL: (steps, steps)}
        config = saver.put(parent, checkpoint, metadata, {CHANNEL: str(i + 1)})
        saver.put_writes(config, [(CHANNEL, f"after c{i}")], f"task{i}")
        configs.append(config)
        parent = config
    return configs


@pytest.mark.parametrize(
    ("claimed", "limits", "depths"),
    [
        ([1, 2, 3], [4], []),  # LangGraph's counters: one range read, down to the seed
        ([1, 2, None], [], [MAX_DEPTH]),  # no counters (nor seed known): LangGraph's bound
        ([1, 2, 1], [2], [MAX_DEPTH]),  # understated: the range stops short, a full walk
    ],
)
@pytest.mark.parametrize("loaded", [False, True])
async def test_history_is_right_whatever_the_counters(
    saver: MongoDBSaver,
    claimed: list[int | None],
    limits: list[int],
    depths: list[int],
    loaded: bool,
) -> None:
    """The history alone (the counters noted by a read, as any load does), or ``loaded``
    as LangGraph loads a state: ``get_tuple``, which reads the range along when the
    counters bound it, then the history, which then reads no range again."""
    configs = _put_chain(saver, claimed)
    if not loaded:
        assert list(saver.list(configs[-1]))  # notes the counters; reads no history
    walks = HistoryWalks(saver)
    calls = count_calls(saver.collections)
    if loaded:
        assert saver.get_tuple(configs[-1]) is not None
    history = saver.get_delta_channel_history(config=configs[-1], channels=[CHANNEL])
    assert ([r[2]["$limit"] for r in walks.ranges], walks.max_depths) == (limits, depths)
    # With ``loaded``, the range read is the get_tuple's, or the get_tuple's own read is one.
    assert sum(calls.values()) == len(limits) + len(depths) + (loaded and not limits)
    assert history == {
        CHANNEL: {
            "seed": ["seed"],
            "writes": [(f"task{i}", CHANNEL, f"after c{i}") for i in range(3)],
        }
    }
    _, default = await DefaultWalk(saver).histories(configs[-1], [CHANNEL])
    assert default == history
