"""``rekey`` of values in parts beside maintenance, copies and cut runs: a value
``delete_thread``, ``prune`` or the sweep is deleting is not re-encrypted (its new parts
would outlive it); a copy that puts an old head back keeps the parts it names; parts a cut
run left marked are removed by a later run once older than ``maintenance.STRAY_AGE``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint
from pymongo.errors import AutoReconnect

from mongo_ckpt import keyring_serializer, maintenance, payload
from mongo_ckpt.layout import BLOB_KEY, BLOBS, CHECKPOINTS, WRITE_KEY, WRITES
from tests.fault_harness import CHUNK
from tests.faults import _Wrapper
from tests.saver_support import Api

K1, K2 = b"1" * 32, b"2" * 16
OLD, BOTH = {"k1": K1}, {"k1": K1, "k2": K2}
MARKER = "rekey-beside-maintenance-5d1"
INTERRUPT = "__interrupt__"  # a special channel: its write overwrites
CONFIG = {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload, "CHUNK_SIZE", CHUNK)


class Hook(_Wrapper):
    """Runs ``hook()`` once, before (or, ``after``, after) the first call ``when`` picks."""

    def __init__(self, collections: dict[str, Any], when: Callable[..., bool],
                 hook: Callable, after: bool = False) -> None:
        self.when, self.hook, self.after, self.fired = when, hook, after, False
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Callable, args: tuple, kwargs: dict) -> Any:
        if self.fired or not self.when(name, attr, args):
            return method(*args, **kwargs)
        self.fired = True
        if not self.after:
            self.hook()
            return method(*args, **kwargs)
        result = method(*args, **kwargs)
        self.hook()
        return result


class Crash(Exception):
    pass


def crash() -> None:
    raise Crash


def seed(saver: Any) -> tuple[Api, Any]:
    old = Api(saver).reopened(serde=keyring_serializer(OLD, "k1"))
    old.saver.setup()
    checkpoint = generate_checkpoint()
    checkpoint["channel_values"] = {"big": MARKER * 40}
    checkpoint["channel_versions"] = {"big": "1"}
    stored = old.saver.put(CONFIG, checkpoint, {}, {"big": "1"})
    old.saver.put_writes(stored, [("w", MARKER * 30), (INTERRUPT, MARKER * 20)], "task")
    return old, stored


def age_marked_parts(api: Api) -> None:
    """Make the parts a cut run left marked older than ``maintenance.STRAY_AGE``."""
    long_ago = datetime.now(timezone.utc) - 2 * maintenance.STRAY_AGE
    for logical in (BLOBS, WRITES):
        marked = {payload.NEW_PARTS: True}
        api.raw(logical).update_many(marked, {"$set": {maintenance.TOUCHED_AT: long_ago}})


def leftovers(api: Api) -> dict[str, list[Any]]:
    """Per collection: documents still marked by rekey and parts no head joins."""
    out: dict[str, list[Any]] = {}
    for logical, key in ((BLOBS, BLOB_KEY), (WRITES, WRITE_KEY)):
        docs = list(api.raw(logical).find({}))
        heads = {tuple(d[k] for k in key): d.get("vid") for d in docs if d.get("part", 0) == 0}
        bad = [
            (d.get("channel"), d["part"], "marked" if payload.NEW_PARTS in d else "",
             "replaced" if "replaced_vid" in d else "")
            for d in docs
            if payload.NEW_PARTS in d or "replaced_vid" in d
            or (d.get("part", 0) != 0 and heads.get(tuple(d[k] for k in key)) != d["vid"])
        ]
        if bad:
            out[logical] = sorted(Counter((c, m, r) for c, _, m, r in bad).items())
    return out


def test_rekey_beside_delete_thread_leaves_its_new_parts(
    saver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete_thread marks the thread's values (doomed) and deletes its checkpoints; a rekey
    landing before delete_thread's last step re-encrypts the marked heads: its new parts
    carry no mark, the head is deleted, its new parts stay for good (the thread is gone,
    so no later maintenance of it finds them)."""
    old, stored = seed(saver)
    rotated = Api(saver).reopened(serde=keyring_serializer(BOTH, "k2"))
    hook = Hook(old.saver.collections, lambda n, a, args: n == WRITES and a == "find",
                lambda: rotated.saver.rekey())
    try:
        old.saver.delete_thread("u")
    finally:
        hook.restore()
    assert hook.fired
    assert rotated.saver.rekey().done
    # Every document counted old: the sweep does not see the thread (no checkpoint left).
    monkeypatch.setattr(maintenance, "STRAY_AGE", timedelta(seconds=-5))
    old.saver.set_thread_ttl("u", 0.001)
    old.saver.sweep_expired()
    assert leftovers(rotated) == {}


def test_cut_rekey_then_special_overwrite_leaves_marked_parts(saver: Any) -> None:
    """rekey is cut after writing the new parts of an interrupt write, before its swap;
    the interrupt is then overwritten by a writer under the current key. The overwrite
    spares the marked parts, a second rekey does not select the head (own key, no
    replaced_vid), and so the marked parts stay: only a prune or sweep of the thread at
    least STRAY_AGE later removes them (none, if the thread is never pruned)."""
    old, stored = seed(saver)
    rotated = Api(saver).reopened(serde=keyring_serializer(BOTH, "k2"))
    hook = Hook(rotated.saver.collections,
                lambda n, a, args: n == WRITES and a == "bulk_write"
                and any("rekeying" in str(r) and "-3" in str(r) for r in args[0]),
                crash, after=True)
    try:
        with pytest.raises(Crash):
            rotated.saver.rekey()
    finally:
        hook.restore()
    assert hook.fired
    rotated.saver.put_writes(stored, [(INTERRUPT, "other" * 40)], "task")
    assert rotated.saver.rekey().done
    assert leftovers(rotated)  # young: the cut run may still be going
    age_marked_parts(rotated)
    assert rotated.saver.rekey().done
    assert leftovers(rotated) == {}


def test_rekey_beside_prune_leaves_its_new_parts_unnamed(saver: Any) -> None:
    """prune (keep_latest) of a superseded checkpoint: a rekey between its marking and its
    last step re-encrypts the doomed value; the old head and parts go, the new parts
    (never marked doomed) stay, named by no head, until an hour later a prune of the
    thread counts them as strays."""
    old, stored = seed(saver)
    checkpoint = generate_checkpoint()
    checkpoint["channel_values"] = {"big": MARKER * 41}
    checkpoint["channel_versions"] = {"big": "2"}
    old.saver.put(stored, checkpoint, {}, {"big": "2"})
    rotated = Api(saver).reopened(serde=keyring_serializer(BOTH, "k2"))
    hook = Hook(old.saver.collections, lambda n, a, args: n == WRITES and a == "find",
                lambda: rotated.saver.rekey())
    try:
        old.saver.prune(["u"])
    finally:
        hook.restore()
    assert hook.fired
    assert rotated.saver.rekey().done
    old.saver.prune(["u"])
    assert leftovers(rotated) == {}


def test_a_copy_onto_a_swapped_head_then_finish_deletes_the_parts_it_names(saver: Any) -> None:
    """t holds the values of a cut copy of u (no checkpoints), s a whole copy of u (its
    documents newer than t's). rekey swaps t's value (replaced_vid = the old vid) before
    s's; copy_thread(s, t) then lands (t has no checkpoint of its own: allowed) and puts
    back s's head, still under the old vid, with its parts. At the end of the collection
    rekey's _finish deletes t's parts of the old vid, which t's head names again: t's
    checkpoint is visible without its value."""
    old, stored = seed(saver)
    checkpoints = lambda n, a, args: (n, a) == (CHECKPOINTS, "bulk_write")  # noqa: E731
    cut = Hook(old.saver.collections, checkpoints, crash)
    try:
        with pytest.raises(Crash):
            old.saver.copy_thread("u", "t")
    finally:
        cut.restore()
    old.saver.copy_thread("u", "s")
    want = old.saver.get_tuple(stored).checkpoint["channel_values"]
    s_head = old.raw(BLOBS).find_one({"thread_id": "s", "part": 0})["_id"]
    rotated = Api(saver).reopened(serde=keyring_serializer(BOTH, "k2"))
    hook = Hook(rotated.saver.collections,
                lambda n, a, args: (n, a) == (BLOBS, "update_one") and args[0]["_id"] == s_head,
                lambda: old.saver.copy_thread("s", "t"))
    try:
        rotated.saver.rekey()
    finally:
        hook.restore()
    assert hook.fired
    got = rotated.saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["channel_values"] == want, leftovers(rotated)


def test_a_cut_run_beside_delete_thread_leaves_nothing_once_run_again(saver: Any) -> None:
    """``delete_thread`` lands after rekey read a value in parts; rekey writes its new parts
    under the deleted thread, its swap finds no head, and the connection is lost before it
    removes them: a later run removes them once they are old."""
    old, stored = seed(saver)
    rotated = Api(saver).reopened(serde=keyring_serializer(BOTH, "k2"))
    rotated.saver.setup()
    delete = Hook(rotated.saver.collections, lambda n, a, args: (n, a) == (BLOBS, "bulk_write"),
                  lambda: old.saver.delete_thread("u"))
    lost = Hook(rotated.saver.collections, lambda n, a, args: (n, a) == (BLOBS, "delete_many"),
                lambda: (_ for _ in ()).throw(AutoReconnect("injected")))
    try:
        with pytest.raises(AutoReconnect):
            rotated.saver.rekey()
    finally:
        lost.restore()
        delete.restore()
    assert rotated.saver.rekey().done
    age_marked_parts(rotated)
    assert rotated.saver.rekey().done
    assert leftovers(rotated) == {}
