"""The value head's "insert or fail" upsert (``documents.blob_requests``): inserted with part
0, never matching a stored head, one head for concurrent puts of one version, multi-part
heads over the client-level bulk write."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_metadata,
)
from pymongo import MongoClient

from mongo_ckpt import (
    ConflictingValueError,
    MongoDBSaver,
)
from mongo_ckpt.layout import BLOBS
from tests.backends import wire_uri
from tests.bulk_write_support import put_one

# -- 4. The head's "insert or fail" upsert -------------------------------------------------


def test_the_head_is_inserted_with_part_0_and_never_matches_a_stored_one(
    wire_client: Any, db_name: str
) -> None:
    saver = MongoDBSaver(wire_client, db_name)
    put_one(saver, "t", "x")
    [head] = saver.collections[BLOBS].find({}, {"_id": 0, "part": 1, "version": 1})
    assert head == {"part": 0, "version": "1"} and type(head["part"]) is int
    # The same version of the channel again, other value: the stored head stops the command
    # before the checkpoint; another checkpoint names the version, so its value is kept.
    other = put_one(saver, "t", "other")
    assert saver.collections[BLOBS].count_documents({}) == 1
    found = saver.get_tuple(other)
    assert found is not None and found.checkpoint["channel_values"] == {"a": "x"}
    # The same checkpoint again with another value (nothing else names it): refused.
    lone = put_one(saver, "u", "x")
    with pytest.raises(ConflictingValueError):
        saver.put(
            lone,
            {
                **generate_checkpoint(channel_values={"a": "y"}, channel_versions={"a": "1"}),
                "id": lone["configurable"]["checkpoint_id"],
            },
            generate_metadata(),
            {"a": "1"},
        )
    assert saver.collections[BLOBS].count_documents({"thread_id": "u"}) == 1
    wire_client.drop_database(db_name)


def test_a_multipart_head_over_the_client_bulk_write(wire_client: Any, db_name: str) -> None:
    saver = MongoDBSaver(wire_client, db_name)
    # Several parts: pseudo-random bytes, which compression cannot shrink.
    big = random.Random(0).randbytes(17 * 1024 * 1024)
    first = put_one(saver, "t", big)
    assert saver.uses_client_bulk_write
    parts = [d["part"] for d in saver.collections[BLOBS].find({}, {"part": 1})]
    assert parts.count(0) == 1 and len(parts) > 1
    found = MongoDBSaver(wire_client, db_name).get_tuple(first)
    assert found is not None and found.checkpoint["channel_values"] == {"a": big}
    # The same version in a new checkpoint: the stored head stops the command, adopted.
    again = put_one(saver, "t", big)
    adopted = MongoDBSaver(wire_client, db_name).get_tuple(again)
    assert adopted is not None and adopted.checkpoint["channel_values"] == {"a": big}
    assert saver.collections[BLOBS].count_documents({"part": 0}) == 1
    wire_client.drop_database(db_name)


def test_concurrent_puts_of_one_version_store_one_head(db_name: str) -> None:
    """Workers on their own clients put the same channel version, different values, at
    once: one head is stored; each put either wins, adopts it or is refused."""
    clients = [MongoClient(wire_uri(), directConnection=True) for _ in range(4)]
    savers = [MongoDBSaver(c, db_name) for c in clients]
    savers[0].setup()
    for s in savers:
        s.setup()
    outcomes: list[Any] = [None] * len(savers)
    barrier = threading.Barrier(len(savers))

    def worker(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = put_one(savers[i], "t", f"value-{i}")
        except ConflictingValueError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(savers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    heads = list(savers[0].collections[BLOBS].find({"part": 0}))
    assert len(heads) == 1
    winner = [i for i, o in enumerate(outcomes) if isinstance(o, dict)]
    assert winner, outcomes
    for cfg in (o for o in outcomes if isinstance(o, dict)):
        found = savers[0].get_tuple(cfg)
        assert found is not None
        assert found.checkpoint["channel_values"]["a"] in {f"value-{i}" for i in winner}
    clients[0].drop_database(db_name)
    for c in clients:
        c.close()
