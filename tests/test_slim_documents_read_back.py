"""Slim checkpoint documents read back what was put: each test reproduces one way they
lost or misreported a value, and asserts what the contract (DESIGN.md §2) or ``InMemorySaver``
gives. Findings 2 and 5 came from values without data held in the checkpoint document
(since removed: every value has a value document); 3 and 4 from the optional fields and
the metadata stored once. (Findings 1 and 6, two instances writing the pre-release and the
slim layout side by side, went with the pre-release layouts.)"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from mongo_ckpt import ConflictingValueError
from mongo_ckpt.layout import CHECKPOINTS
from tests.saver_support import BOTH_PUT_PATHS, Api

pytestmark = BOTH_PUT_PATHS


def _checkpoint(checkpoint_id: str, values: dict[str, Any], versions: dict[str, Any]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    return checkpoint


def _config(thread_id: str, checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def _oracle_and(api: Api, puts: list[tuple[Api, Any, Any, Any]]) -> tuple[Any, Any]:
    """Run ``puts`` (saver, config, checkpoint, new_versions) on the savers and on an
    ``InMemorySaver``; the last checkpoint read back by both."""
    memory = InMemorySaver()
    config = mine = None
    for side, config, checkpoint, new_versions in puts:
        memory.put(config, checkpoint, {"source": "loop", "step": 0, "parents": {}}, new_versions)
        mine = await side.put(
            config, checkpoint, {"source": "loop", "step": 0, "parents": {}}, new_versions
        )
    assert config is not None
    expected = memory.get_tuple(
        _config(config["configurable"]["thread_id"], mine["configurable"]["checkpoint_id"])
    )
    got = await api.get_tuple(mine)
    return got, expected


# -- 2. slim documents: a retried put that gives a version another value is accepted when
#       either value is None (held inline), and changes what reads back ----------------


@pytest.mark.parametrize(
    ("first", "then"), [("x", None), (None, "x")], ids=["x-then-None", "None-then-x"]
)
async def test_retry_with_another_value_of_an_inline_channel_is_refused(
    api: Api, first: Any, then: Any
) -> None:
    """``ConflictingValueError``'s contract: "A version names one value: a retried ``put``
    must pass the same values. Nothing readable was changed". A put whose reply was lost is
    retried with ``ch`` at the same version holding another value. On layout 4 (and for any
    two non-``None`` values) the retry finds the stored head and is refused; on slim
    documents a ``None`` is held in the checkpoint document, no head is ever inserted or
    found, and the retry rewrites the checkpoint: it now reads the second value (and a
    ``"x"`` stored first is left as a value document nothing names)."""
    versions = {"ch": "1", "n": "1"}
    config = _config("t")
    await api.put(config, _checkpoint("1", {"ch": first, "n": 1}, versions), {}, versions)
    before = await api.thread_docs("t")
    with pytest.raises(ConflictingValueError):
        await api.put(config, _checkpoint("1", {"ch": then, "n": 1}, versions), {}, versions)
    after = await api.thread_docs("t")
    assert after[CHECKPOINTS] == before[CHECKPOINTS]
    got = await api.get_tuple(_config("t", "1"))
    assert got.checkpoint["channel_values"]["ch"] == first


# -- 3. slim documents drop a falsy run_id ----------------------------------------------


async def test_delete_for_runs_of_an_empty_run_id(api: Api) -> None:
    """A slim document drops ``run_id`` when it is falsy (``checkpoint_document``: ``k not in
    OPTIONAL_FIELDS or v``), so a checkpoint whose metadata says ``run_id=""`` (a run id
    given in the config, as LangGraph copies it into the metadata) has none stored, and
    ``delete_for_runs([""])`` no longer deletes it: on layout 4 it does (the same database
    before the upgrade step)."""
    versions = {"n": "1"}
    await api.put(_config("t"), _checkpoint("1", {"n": 1}, versions), {"run_id": ""}, versions)
    await api.put(_config("u"), _checkpoint("1", {"n": 1}, versions), {"run_id": "r"}, versions)
    await api.delete_for_runs([""])
    assert await api.get_tuple(_config("u")) is not None
    assert await api.get_tuple(_config("t")) is None


# -- 4. slim metadata: enum members (int/str subclasses) lose their type ------------------


class _Level(enum.IntEnum):
    HIGH = 3


class _Color(str, enum.Enum):
    RED = "red"


async def test_metadata_with_enum_members_reads_back_like_in_memory(api: Api) -> None:
    """Slim documents keep only the plain metadata when ``documents._reads_back`` says BSON
    gives it back exactly. It compares the plain copy with the serializer's round trip by
    ``type(...) is type(...)`` and ``==``, but ``documents.plain`` passes ``str`` and
    ``int`` subclasses through as they are: an ``IntEnum`` (or a ``str`` enum inside a
    list) equals its serialized round trip, the serialized copy is dropped, and BSON gives
    back a bare ``int``/``str`` (on a real server; mongomock keeps the Python object). On
    layout 4, and in ``InMemorySaver``, the members read back."""
    metadata = {"level": _Level.HIGH, "tags": {"colors": [_Color.RED]}}
    versions = {"n": "1"}
    checkpoint = _checkpoint("1", {"n": 1}, versions)
    memory = InMemorySaver()
    memory.put(_config("t"), checkpoint, metadata, versions)
    expected = memory.get_tuple(_config("t")).metadata
    stored = await api.put(_config("t"), checkpoint, metadata, versions)
    got = (await api.get_tuple(stored)).metadata
    assert repr(got) == repr(expected)
    assert type(got["level"]) is _Level


# -- 5. slim documents: an inline None without a channel version reads back ----------------


async def test_a_none_value_without_a_version_is_not_read_back(api: Api) -> None:
    """A checkpoint reads back the values of its ``channel_versions``: ``InMemorySaver``
    loads blobs by version and layout 4 names only channels with a version, so a value in
    ``channel_values`` without one is not returned. ``documents.inline_values`` holds every
    ``None`` value inline whether or not the channel has a version, and the slim document
    reads it back."""
    versions = {"a": "1"}
    checkpoint = _checkpoint("1", {"a": 1, "b": None}, versions)
    memory = InMemorySaver()
    memory.put(_config("t"), checkpoint, {}, versions)
    expected = memory.get_tuple(_config("t")).checkpoint["channel_values"]
    stored = await api.put(_config("t"), checkpoint, {}, versions)
    assert (await api.get_tuple(stored)).checkpoint["channel_values"] == expected
