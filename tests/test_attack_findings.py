"""Adversarial review (h10): each test reproduces one remaining way to lose, mix or
misreport a conversation, and asserts the behaviour the contract (docs/architecture.md,
DESIGN.md §2) or ``InMemorySaver`` gives. They fail on the code they were written against."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from pymongo.errors import AutoReconnect

from mongo_ckpt import ConflictingValueError
from mongo_ckpt.calls import Call
from mongo_ckpt.clock import server_now
from mongo_ckpt.drivers import aexecute, execute
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.tombstones import DOOMED
from tests.faults import _fail, _Wrapper
from tests.saver_support import Api
from tests.test_saver_put_retries import T, lost_reply, msg, three


async def step_until(api: Api, operation: Any, stop: Any, hook: Any) -> None:
    """Run ``operation`` call by call on ``api``'s collections; before the first call for
    which ``stop(call)`` holds, await ``hook()``; then run it to its end."""
    result: Any = None
    error: Exception | None = None
    fired = False
    while True:
        try:
            call = operation.throw(error) if error is not None else operation.send(result)
        except StopIteration:
            break
        result = error = None
        if not fired and isinstance(call, Call) and stop(call):
            fired = True
            await hook()
        try:
            if api.is_async:
                result = await aexecute(api.saver.collections, call)
            else:
                result = execute(api.saver.collections, call)
        except Exception as exc:  # thrown back into the operation, as the drivers do
            error = exc
    assert fired, "the operation never made the call the test waits for"


def first_checkpoint(thread_id: str, text: str) -> tuple[Any, ...]:
    values = {"a": text}
    versions = {"a": "00000001.0000000001"}
    checkpoint = generate_checkpoint(channel_values=values, channel_versions=versions)
    return generate_config(thread_id), checkpoint, generate_metadata(step=-1), versions


# -- 1. idle-thread deletion deletes by thread, after its last look ------------------------


async def test_idle_delete_spares_a_conversation_started_after_its_look(api: Api) -> None:
    """``delete --idle-days`` (``delete_idle``, each batch of the sweep) judges a thread
    idle by a ``distinct`` of recent checkpoints, then deletes *every* checkpoint of the
    thread (``delete_many({"thread_id": {"$in": expired}})``), not the ones it tombstoned.
    A put with no parent (the first checkpoint of a new conversation on that thread id,
    after the old one was deleted, e.g. by another instance's sweep or ``delete_thread``;
    or a subgraph's first checkpoint in a new namespace) has no probe, so when it lands
    between the look and the delete it returns success and is deleted: the conversation is
    lost without an error. Contract: "a thread that became active is spared" and
    maintenance deletes "the documents of the checkpoints they chose: exact versions"."""
    await api.put(*first_checkpoint("t", "old conversation"))
    await asyncio.sleep(0.05)  # clocks of millisecond resolution
    cutoff = await api.run(server_now())  # the old conversation is idle since before it
    await asyncio.sleep(0.05)
    new = first_checkpoint("t", "new conversation")
    stored: dict[str, Any] = {}

    async def new_conversation() -> None:
        await api.delete_thread("t")  # the old one goes (another sweep, or the user)
        stored["config"] = await api.put(*new)  # a new conversation on the thread id

    operation = api.saver.ops.delete_idle(["t"], cutoff)
    await step_until(
        api,
        operation,
        lambda c: (c.collection, c.method) == (CHECKPOINTS, "delete_many"),
        new_conversation,
    )
    latest = await api.get_tuple(generate_config("t"))
    assert latest is not None, "the new conversation, put after the look, was deleted"
    assert latest.checkpoint["channel_values"] == {"a": "new conversation"}


# -- 2. a value a refused call marked stays marked once a later call names it ----------------


class CutBlobs(_Wrapper):
    """The first ``bulk_write`` on the values applies its first ``k`` requests, then the
    connection is lost (``AutoReconnect``)."""

    def __init__(self, collections: dict[str, Any], k: int) -> None:
        self.k, self.fired = k, False
        super().__init__(collections)

    def invoke(self, name: str, attr: str, method: Any, args: tuple, kwargs: dict) -> Any:
        if self.fired or (name, attr) != (BLOBS, "bulk_write"):
            return method(*args, **kwargs)
        self.fired = True
        return _fail(method(list(args[0])[: self.k], *args[1:], **kwargs))


async def test_value_adopted_after_a_refused_call_is_not_left_marked(api: Api) -> None:
    """A put cut after its first value (``messages``) is retried once with another
    ``messages`` value: ``ConflictingValueError``, and the value it inserted (``side``) is
    marked for maintenance, as documented. The put is then retried with its first values:
    it finds ``side`` stored, adopts it and stores the checkpoint, but leaves the mark on a
    value a stored checkpoint now names. Maintenance never clears it (it keeps named
    values), and ``_judge_parent`` treats a marked value as one being deleted: the next
    lost-reply retry after ``prune(keep_latest)`` (the documented case that "returns the
    stored checkpoint") raises ``StaleParentError`` for a checkpoint that is stored whole.
    """
    thread = await three(api)
    first = [msg(i) for i in range(4)]
    config, checkpoint, metadata, new = thread.prepare(first, side=["s"])
    assert list(new) == ["messages", "side"]
    cut = CutBlobs(api.saver.collections, k=1)  # the messages head lands, side does not
    try:
        with pytest.raises(AutoReconnect):
            await api.put(config, checkpoint, metadata, new)
    finally:
        cut.restore()
    other = {**checkpoint["channel_values"], "messages": [msg(0), msg(9)]}
    with pytest.raises(ConflictingValueError):  # a retry with another value: refused
        await api.put(config, {**checkpoint, "channel_values": other}, metadata, new)
    await api.put(config, checkpoint, metadata, new)  # the retry with its first values
    await thread.check(api)
    # The next turn: its checkpoint lands, the reply is lost; prune keeps it, drops c4.
    args = thread.prepare([msg(i) for i in range(5)])
    await lost_reply(api, CHECKPOINTS, lambda: api.put(*args))
    await api.prune(["t"], strategy="keep_latest")
    stored = await api.put(*args)  # the same call again: returns the stored checkpoint
    assert stored["configurable"]["checkpoint_id"] == thread.checkpoint_id
    await thread.check(api)
    marked_named = [
        (d["channel"], d["version"])
        for d in await api.docs(BLOBS, {DOOMED: {"$exists": True}})
    ]
    assert marked_named == [], "values stored checkpoints name are marked for deletion"
