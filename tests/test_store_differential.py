"""Random op sequences give the same answers as LangGraph's ``InMemoryStore``."""

from __future__ import annotations

import uuid
from typing import Any

import mongomock
from hypothesis import given
from hypothesis import strategies as st

from mongo_ckpt.store import MongoDBStore
from tests.lengths import Length
from tests.store_programs import (
    OPS,
    _check,
)


def test_same_answers_as_in_memory_store_on_mongomock(put_shape: str, length: Length) -> None:
    @length.settings(60)
    @given(ops=st.lists(OPS, max_size=25))
    def check(ops: list[tuple]) -> None:
        _check(MongoDBStore(mongomock.MongoClient(), "differential"), ops)

    check()


def test_same_answers_as_in_memory_store_over_the_wire(wire_client: Any, length: Length) -> None:
    @length.settings(10)
    @given(ops=st.lists(OPS, max_size=25))
    def check(ops: list[tuple]) -> None:
        db = f"t_diff_{uuid.uuid4().hex[:8]}"
        try:
            _check(MongoDBStore(wire_client, db), ops)
        finally:
            wire_client.drop_database(db)

    check()
