"""Store operations run one collection call at a time, for race tests of the registry
(this module holds no tests)."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import ListNamespacesOp, Op
from pymongo.errors import BulkWriteError

from mongo_ckpt.calls import Call, Operation, Relay
from mongo_ckpt.drivers import execute
from mongo_ckpt.store import MongoDBStore, documents
from mongo_ckpt.store.vectors import Embedded

LISTING = ListNamespacesOp(match_conditions=(), max_depth=None, limit=10, offset=0)


def listed(store: Any) -> list[tuple[str, ...]]:
    return store.list_namespaces(limit=1000)


def truth(store: Any) -> list[tuple[str, ...]]:
    """The namespaces with a live item, read from the items themselves."""
    now = documents.utc_now()
    query = documents.live(now)
    return sorted({tuple(d["namespace"]) for d in store.collections["store"].find(query)})


class Stepper:
    """An operation run one step at a time through ``calls.Relay``: each collection call,
    and each request of a bulk write on its own (the server may interleave other writes
    between them). A request that fails ends its ordered bulk write, whose error names its
    index."""

    def __init__(self, operation: Operation[Any]) -> None:
        self.relay = Relay(operation)
        self._queue: list[Call] = []
        self._position = 0  # of the next request in its bulk write
        self.done = False
        self.result: Any = None
        self._advance()

    def _advance(self) -> None:
        step = self.relay.next_step()
        if step is None:
            self.done, self.result = True, self.relay.value
            return
        assert isinstance(step, Call)
        self._position = 0
        if step.method == "bulk_write":
            self._queue = [
                Call(step.collection, step.method, ([r],), step.kwargs) for r in step.args[0]
            ]
        else:
            self._queue = [step]

    def step(self, collections: dict[str, Any]) -> None:
        call = self._queue.pop(0)
        try:
            result = execute(collections, call)
        except BulkWriteError as error:
            details = dict(error.details)
            details["writeErrors"] = [
                {**e, "index": e["index"] + self._position} for e in details["writeErrors"]
            ]
            self._queue = []
            self.relay.failed(BulkWriteError(details))
            self._advance()
            return
        self._position += 1
        if not self._queue:
            self.relay.returned(None if call.method == "bulk_write" else result)
            self._advance()


def operation(store: MongoDBStore, ops: list[Op]) -> Operation[Any]:
    return store.ops.run_plan(store.ops.plan(ops), Embedded())
