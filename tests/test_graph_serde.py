"""Typed values in graph state survive the database: equal, and of the same type."""

from __future__ import annotations

import dataclasses
import enum
import threading
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import langgraph._internal._serde as graph_serde
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel
from typing_extensions import TypedDict

from tests.graphs import committed, thread
from tests.saver_support import Api


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    city: str
    zip_code: str


class Customer(BaseModel):
    name: str
    address: Address
    since: datetime


@dataclasses.dataclass
class Order:
    order_id: uuid.UUID
    amount: Decimal
    priority: Priority


class Typed(TypedDict, total=False):
    when: datetime
    customer: Customer
    order: Order
    priority: Priority
    raw: bytes
    tags: set[str]
    ident: uuid.UUID
    amount: Decimal
    nested: dict[str, Any]


IST = timezone(timedelta(hours=5, minutes=30))
INPUT: Typed = {
    "when": datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=IST),
    "customer": Customer(
        name="Ada",
        address=Address(city="London", zip_code="NW1"),
        since=datetime(2020, 1, 1, tzinfo=timezone.utc),
    ),
    "raw": b"\x00\xffbinary\x80",
    "tags": {"vip", "eu"},
    "ident": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "amount": Decimal("1234.5600"),
}


def produced(state: Typed) -> Typed:
    """What the ``produce`` node returns for ``state``."""
    return {
        "order": Order(uuid.uuid5(state["ident"], "order"), state["amount"] * 2, Priority.HIGH),
        "priority": Priority.LOW,
        "tags": state["tags"] | {"ordered"},
        "nested": {
            "when": state["when"].astimezone(timezone(timedelta(hours=-7))),
            "models": [state["customer"].address, Priority.HIGH],
            "bytes": state["raw"][::-1],
            "ids": {state["ident"]},
            "prices": [Decimal("0.1"), Decimal("-7E+3")],
        },
    }


FINAL: Typed = {**INPUT, **produced(INPUT)}


def assert_same(actual: Any, expected: Any) -> None:
    """Equal, of the same types all the way down, and datetimes in the same time zone."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, BaseModel):
        assert_same(actual.model_dump(), expected.model_dump())
    elif dataclasses.is_dataclass(expected):
        assert_same(dataclasses.asdict(actual), dataclasses.asdict(expected))
    elif isinstance(expected, datetime):
        assert (actual, actual.utcoffset()) == (expected, expected.utcoffset())
    else:
        assert actual == expected


def typed_builder(calls: Counter, fail_after: threading.Event | None = None) -> StateGraph:
    """START -> produce -> END; with ``fail_after``, a sibling node fails once, after
    produce's run is committed (``fail_after``, see ``tests.graphs.committed``)."""

    def produce(state: Typed) -> Typed:
        calls["produce"] += 1
        return produced(state)

    def fail_once(state: Typed) -> dict:
        calls["fail_once"] += 1
        if calls["fail_once"] == 1:
            # A failure cancels the tasks still running: let produce's write be committed first.
            assert fail_after is not None and fail_after.wait(timeout=60)
            raise RuntimeError("down")
        return {}

    builder = StateGraph(Typed)
    builder.add_node("produce", produce)
    builder.add_edge(START, "produce")
    builder.add_edge("produce", END)
    if fail_after is not None:
        builder.add_node("fail_once", fail_once)
        builder.add_edge(START, "fail_once")
        builder.add_edge("fail_once", END)
    return builder


async def test_state_round_trip(api: Api) -> None:
    calls: Counter = Counter()
    builder = typed_builder(calls)
    await api.invoke(api.compile(builder), INPUT, thread("t1"))

    api = api.reopened()
    graph = api.compile(builder)
    history = await api.history(graph, thread("t1"))
    assert_same(history[0].values, FINAL)
    assert_same(history[-1].values, {})  # the input checkpoint, before any channel is set
    assert_same(history[-2].values, INPUT)
    assert calls == {"produce": 1}


async def test_pending_write_round_trip(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typed node result kept as a pending write (its step failed) comes back typed."""
    calls: Counter = Counter()
    builder = typed_builder(calls, fail_after=committed(monkeypatch, "produce"))
    with pytest.raises(RuntimeError, match="down"):
        await api.invoke(api.compile(builder), INPUT, thread("t1"))

    api = api.reopened()
    graph = api.compile(builder)
    state = await api.state(graph, thread("t1"))
    (produce,) = [t for t in state.tasks if t.name == "produce"]
    assert_same(produce.result, produced(INPUT))
    assert_same(await api.invoke(graph, None, thread("t1")), FINAL)
    assert calls == {"produce": 1, "fail_once": 2}


async def test_strict_msgpack(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under LangGraph's strict msgpack mode the graph allowlists its state schema's types."""
    # What LANGGRAPH_STRICT_MSGPACK=true does at import time, for this test only.
    monkeypatch.setattr(graph_serde, "STRICT_MSGPACK_ENABLED", True)
    api = api.reopened(serde=JsonPlusSerializer(allowed_msgpack_modules=None))
    graph = api.compile(typed_builder(Counter()))
    await api.invoke(graph, INPUT, thread("t1"))
    assert_same((await api.state(graph, thread("t1"))).values, FINAL)
