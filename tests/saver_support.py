"""Helpers shared by the saver and graph tests (this module holds no tests).

``Api`` puts a sync or an async saver, and the graphs compiled on it, behind one awaitable
interface, so each behaviour is written once and run on both savers (and, through the
``api`` fixture, on every backend).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import bson
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from mongo_ckpt.calls import CLIENT
from mongo_ckpt.layout import BLOB_KEY, BLOBS, CHECKPOINTS, WRITE_KEY, WRITES
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.reading import key_of
from tests.backends import count_calls, maybe_await, total

LOGICAL = (CHECKPOINTS, BLOBS, WRITES)
# Runs a test of the ``api`` fixture on both ways a put is sent: one client-level bulk write
# where the backend has it (wire, mongodb) and one bulk write per collection (the mock's
# duplicate case is deselected: mock has only the second).
BOTH_PUT_PATHS = pytest.mark.parametrize(
    "client_bulk_write", [None, False], ids=["put-detected", "put-per-collection"]
)
Attempt = Callable[[], Awaitable[Any]]


class AwaitableMethods:
    """An object whose methods are called through ``await wrapper.name(...)``: ``aname`` on
    an async object (``Async...`` classes), ``name`` on a sync one."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.is_async = type(target).__name__.startswith("Async")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return partial(self.call, name)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.target, f"a{name}")(*args, **kwargs)
        return getattr(self.target, name)(*args, **kwargs)


class Api(AwaitableMethods):
    """A saver behind async methods: ``await api.put(...)`` calls ``aput`` on an async
    saver and ``put`` on a sync one. Graphs compiled by ``compile`` run through the
    matching graph API (the sync one in a worker thread, so concurrent runs really
    overlap). Raw-collection helpers bypass the saver (and any ``count_calls`` wrapper
    on ``saver.collections``).
    """

    def __init__(self, saver: Any) -> None:
        super().__init__(saver)
        self.saver = saver

    def reopened(self, db_name: str | None = None, **saver_options: Any) -> Api:
        """A new saver of the same kind on the same client and (by default) the same
        database (and ``client_bulk_write``), as after a process restart."""
        saver_options.setdefault("client_bulk_write", self.saver.client_bulk_write)
        saver = type(self.saver)(self.saver.client, db_name or self.saver.db.name, **saver_options)
        return Api(saver)

    async def run(self, operation: Any) -> Any:
        """Run a ``calls`` operation through the saver's own driver."""
        if self.is_async:
            return await self.saver._arun(operation)
        return self.saver._run(operation)

    async def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        """What the saver lists for ``config``, newest first."""
        return [item async for item in self.stream(config, **kwargs)]

    async def stream(
        self, config: RunnableConfig | None, **kwargs: Any
    ) -> AsyncIterator[CheckpointTuple]:
        """``alist`` / ``list`` as an async iterator, item by item."""
        if self.is_async:
            async for item in self.saver.alist(config, **kwargs):
                yield item
        else:
            for item in self.saver.list(config, **kwargs):
                yield item

    # -- graphs ------------------------------------------------------------------

    def compile(self, builder: StateGraph, **kwargs: Any) -> CompiledStateGraph:
        return builder.compile(checkpointer=self.saver, **kwargs)

    async def _graph(self, graph: CompiledStateGraph, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(graph, f"a{name}")(*args, **kwargs)
        return await asyncio.to_thread(getattr(graph, name), *args, **kwargs)

    async def invoke(
        self, graph: CompiledStateGraph, input: Any, config: RunnableConfig, **kwargs: Any
    ) -> Any:
        return await self._graph(graph, "invoke", input, config, **kwargs)

    async def state(
        self, graph: CompiledStateGraph, config: RunnableConfig, *, subgraphs: bool = False
    ) -> StateSnapshot:
        return await self._graph(graph, "get_state", config, subgraphs=subgraphs)

    async def update(
        self,
        graph: CompiledStateGraph,
        config: RunnableConfig,
        values: Any,
        as_node: str | None = None,
    ) -> RunnableConfig:
        return await self._graph(graph, "update_state", config, values, as_node)

    async def history(
        self, graph: CompiledStateGraph, config: RunnableConfig
    ) -> list[StateSnapshot]:
        """``get_state_history``, newest first."""
        if self.is_async:
            return [snapshot async for snapshot in graph.aget_state_history(config)]
        return await asyncio.to_thread(lambda: list(graph.get_state_history(config)))

    # -- raw collections --------------------------------------------------------

    def raw(self, logical: str) -> Any:
        names = self.saver.layout.by_logical()
        return self.saver.db[names[logical]]

    async def docs(self, logical: str, query: dict[str, Any] | None = None) -> list[dict]:
        cursor = self.raw(logical).find(query or {})
        if self.is_async:
            return [doc async for doc in cursor]
        return list(cursor)

    async def count(self, logical: str, query: dict[str, Any] | None = None) -> int:
        return await maybe_await(self.raw(logical).count_documents(query or {}))

    async def age(self, thread_id: str, seconds: float) -> None:
        """Make every checkpoint of the thread ``seconds`` old (its ``created_at``)."""
        moment = datetime.now(timezone.utc) - timedelta(seconds=seconds)
        update = {"$set": {"created_at": moment}}
        await maybe_await(self.raw(CHECKPOINTS).update_many({"thread_id": thread_id}, update))

    async def counts(self) -> dict[str, int]:
        return {logical: await self.count(logical) for logical in LOGICAL}

    async def thread_docs(self, thread_id: str) -> dict[str, list[dict]]:
        """Every stored document of one thread, per collection, in a stable order."""
        return {
            logical: sorted(await self.docs(logical, {"thread_id": thread_id}), key=_stable)
            for logical in LOGICAL
        }

    async def raw_bytes(self) -> bytes:
        """All documents of the three collections, BSON-encoded as stored."""
        chunks = [bson.encode(doc) for logical in LOGICAL for doc in await self.docs(logical)]
        return b"".join(chunks)

    async def drop_database(self) -> None:
        await maybe_await(self.saver.client.drop_database(self.saver.db.name))

    async def unique_keys(self, logical: str) -> set[tuple[str, ...]]:
        """The field lists of the collection's unique indexes."""
        indexes = await maybe_await(self.raw(logical).index_information())
        return {
            tuple(field for field, _ in spec["key"])
            for spec in indexes.values()
            if spec.get("unique")
        }


def put_write_calls(saver: Any, *, values: bool = True) -> dict[tuple[str, str], int]:
    """The calls a ``put`` writes with (no value of it stored before): one client-level
    bulk write where the saver uses it, else the values' bulk write (with ``values``) and
    the checkpoint's (with the probe of its parent)."""
    if saver.uses_client_bulk_write:
        return {(CLIENT, "bulk_write"): 1}
    return {**({(BLOBS, "bulk_write"): 1} if values else {}), (CHECKPOINTS, "bulk_write"): 1}


def _stable(doc: dict) -> str:
    return repr(sorted((k, repr(v)) for k, v in doc.items()))


def values_at(step: int, thread_id: str, ns: str = "") -> dict[str, str]:
    """Channel values of checkpoint ``step`` in ``put_chain``: ``a`` changes every
    step, ``b`` is written once at step 0 and never again."""
    return {"a": f"{thread_id}/{ns}/a{step}", "b": f"{thread_id}/{ns}/b"}


async def put_chain(
    api: Api,
    thread_id: str,
    n: int,
    *,
    ns: str = "",
    run_ids: Iterable[str | int] | None = None,
    writes: bool = False,
    **metadata: Any,
) -> list[RunnableConfig]:
    """Put ``n`` chained checkpoints (``values_at``); return their configs, oldest first.

    ``run_ids`` gives each checkpoint's run id; ``writes`` adds one pending write per
    checkpoint (channel ``w``, value ``"w<step>"``); ``metadata`` is added to each.
    """
    runs: list[Any] = list(run_ids) if run_ids is not None else [None] * n
    configs: list[RunnableConfig] = []
    for step in range(n):
        versions = {"a": f"{step + 1:08}", "b": f"{1:08}"}
        new_versions = versions if step == 0 else {"a": versions["a"]}
        checkpoint = generate_checkpoint(
            channel_values=values_at(step, thread_id, ns), channel_versions=versions
        )
        config = generate_config(thread_id, checkpoint_ns=ns)
        if configs:
            config["configurable"]["checkpoint_id"] = configs[-1]["configurable"]["checkpoint_id"]
        extra = {**metadata, **({"run_id": runs[step]} if runs[step] is not None else {})}
        metadata_at = generate_metadata(step=step, **extra)
        stored = await api.put(config, checkpoint, metadata_at, new_versions)
        if writes:
            await api.put_writes(stored, [("w", f"w{step}")], f"task-{step}")
        configs.append(stored)
    return configs


async def assert_no_orphans(api: Api) -> None:
    """Every blob is referenced by a checkpoint, every write belongs to a checkpoint,
    every part of a value is joined by its head, and no document is left marked."""
    checkpoints = await api.docs(CHECKPOINTS)
    keys = {(d["thread_id"], d["checkpoint_ns"], d["checkpoint_id"]) for d in checkpoints}
    refs = {
        (d["thread_id"], d["checkpoint_ns"], v["channel"], v["version"])
        for d in checkpoints
        for v in d.get("values", ())
    }
    blobs = {
        (d["thread_id"], d["checkpoint_ns"], d["channel"], d["version"])
        for d in await api.docs(BLOBS)
    }
    writes = {
        (d["thread_id"], d["checkpoint_ns"], d["checkpoint_id"]) for d in await api.docs(WRITES)
    }
    assert blobs - refs == set(), "blob documents no checkpoint refers to"
    assert writes - keys == set(), "write documents of deleted checkpoints"
    for logical, fields in ((BLOBS, BLOB_KEY), (WRITES, WRITE_KEY)):
        docs = await api.docs(logical)
        assert not [d for d in docs if "doomed" in d], f"{logical}: marked documents left"
        heads = {key_of(d, fields): d.get("vid") for d in docs if d.get("part", 0) == 0}
        stray = [
            d for d in docs if d.get("part", 0) != 0 and heads.get(key_of(d, fields)) != d["vid"]
        ]
        assert not stray, f"{logical}: parts no head joins"


@asynccontextmanager
async def untouched(api: Api) -> AsyncIterator[None]:
    """The block makes no database call and leaves every collection as it was."""
    before = await api.counts()
    counter = count_calls(api.saver.collections)
    yield
    assert total(counter) == 0, counter
    assert await api.counts() == before


async def refuses(api: Api, attempts: Iterable[Attempt], error: type, text: str) -> None:
    """Each attempt raises ``error`` with ``text`` in its message and touches nothing."""
    for attempt in attempts:
        async with untouched(api):
            with pytest.raises(error, match=re.escape(text)):
                await attempt()


class _Uncompressed(CheckpointOperations):
    __slots__ = ()
    compressing = False


def stop_compressing(saver: Any) -> None:
    """``saver`` stores every value uncompressed from now on, as a saver under
    ``EncryptedSerializer`` does beside plain ones (a rollout turning encryption on); no
    other saver changes."""
    cls = type(saver)

    def ops(self: Any) -> CheckpointOperations:
        made = cls.ops.fget(self)  # type: ignore[attr-defined]
        made.__class__ = _Uncompressed
        return made

    saver.__class__ = type(f"Uncompressed{cls.__name__}", (cls,), {"ops": property(ops)})
