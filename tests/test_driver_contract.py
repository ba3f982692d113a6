"""The driver contract on every target, in the default tier too: every ``calls``
constructor, a streamed ``list`` closed early and an error thrown back into the
operation (a closed client: ``test_saver_input_validation.test_closed_client``).

The rest of the suite runs its backend-parametrized tests on one sync and one async
target by default (``tests/conftest.py``); only ``drivers.py`` differs between the
others, and this file is what covers it on each of them (Motor included).
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import ASCENDING, IndexModel, InsertOne
from pymongo.errors import BulkWriteError

from mongo_ckpt.calls import (
    Operation,
    aggregate,
    bulk_write,
    command,
    count_documents,
    create_collection,
    create_indexes,
    delete_many,
    distinct,
    drop_collection,
    find,
    find_cursor,
    find_one,
    find_one_and_update,
    index_information,
    next_batch,
    update_many,
    update_one,
)
from tests.backends import maybe_await
from tests.saver_support import Api, put_chain

pytestmark = pytest.mark.every_driver

SCRATCH, DATABASE = "contract", "contract_db"


def _with_scratch(api: Api) -> Api:
    """``api`` whose collections also hold a scratch collection and the database."""
    api.saver.collections[SCRATCH] = api.saver.db["contract_scratch"]
    api.saver.collections[DATABASE] = api.saver.db
    return api


def every_call() -> Operation[dict[str, Any]]:
    """One of each ``calls`` constructor, on the scratch collection; what each returned."""
    out: dict[str, Any] = {}
    docs = [InsertOne({"_id": i, "kind": "even" if i % 2 == 0 else "odd"}) for i in range(6)]
    out["bulk_write"] = (yield from bulk_write(SCRATCH, docs, ordered=True)).inserted_count
    out["find"] = [d["_id"] for d in (yield from find(
        SCRATCH, {"kind": "even"}, projection={"_id": 1}, sort=[("_id", -1)], skip=1, limit=2
    ))]
    out["find_one"] = (yield from find_one(SCRATCH, {"_id": 3}))
    out["find_one_and_update"] = (yield from find_one_and_update(
        SCRATCH, {"_id": 9}, {"$set": {"kind": "new"}}, upsert=True
    ))
    out["count_documents"] = (yield from count_documents(SCRATCH, {}, limit=5))
    out["aggregate"] = (yield from aggregate(
        SCRATCH, [{"$group": {"_id": "$kind", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    ))
    out["distinct"] = sorted((yield from distinct(SCRATCH, "kind", {})))
    out["update_one"] = (yield from update_one(
        SCRATCH, {"_id": 10}, {"$set": {"kind": "odd"}}, upsert=True
    )).upserted_id
    out["update_many"] = (yield from update_many(
        SCRATCH, {"kind": "odd"}, {"$set": {"seen": True}}
    )).modified_count
    out["delete_many"] = (yield from delete_many(SCRATCH, {"kind": "new"})).deleted_count
    index = IndexModel([("kind", ASCENDING)], name="kind")
    out["create_indexes"] = (yield from create_indexes(SCRATCH, [index]))
    out["index_information"] = sorted((yield from index_information(SCRATCH)))
    cursor = yield from find_cursor(SCRATCH, {}, sort=[("_id", 1)])
    batches = []
    for _ in range(3):
        batches.append([d["_id"] for d in (yield from next_batch(cursor, 3))])
    out["next_batch"] = batches
    out["command"] = (yield from command(DATABASE, {"ping": 1})).get("ok")
    yield from create_collection(DATABASE, "contract_made")
    yield from drop_collection(DATABASE, "contract_made")
    return out


async def test_every_call_constructor(api: Api) -> None:
    result = await _with_scratch(api).run(every_call())
    assert result == {
        "bulk_write": 6,
        "find": [2, 0],
        "find_one": {"_id": 3, "kind": "odd"},
        "find_one_and_update": {"_id": 9, "kind": "new"},
        "count_documents": 5,
        "aggregate": [{"_id": "even", "n": 3}, {"_id": "new", "n": 1}, {"_id": "odd", "n": 3}],
        "distinct": ["even", "new", "odd"],
        "update_one": 10,
        "update_many": 4,
        "delete_many": 1,
        "create_indexes": ["kind"],
        "index_information": ["_id_", "kind"],
        "next_batch": [[0, 1, 2], [3, 4, 5], [10]],
        "command": 1.0,
    }
    names = await maybe_await(api.saver.db.list_collection_names())
    assert "contract_scratch" in names and "contract_made" not in names


def handles_a_duplicate() -> Operation[str]:
    """Inserts ``_id`` 1 twice: the second error is thrown back at its ``yield`` and handled."""
    yield from bulk_write(SCRATCH, [InsertOne({"_id": 1})], ordered=True)
    try:
        yield from bulk_write(SCRATCH, [InsertOne({"_id": 1})], ordered=True)
    except BulkWriteError as error:
        codes = {e["code"] for e in error.details["writeErrors"]}
        yield from update_one(SCRATCH, {"_id": 1}, {"$set": {"handled": True}}, upsert=False)
        return f"handled {sorted(codes)}"
    return "not raised"


async def test_a_steps_error_is_thrown_back_into_the_operation(api: Api) -> None:
    assert await _with_scratch(api).run(handles_a_duplicate()) == "handled [11000]"
    assert (await api.run(find(SCRATCH, {"_id": 1}))) == [{"_id": 1, "handled": True}]


async def test_a_streamed_list_closed_early_leaves_the_saver_usable(api: Api) -> None:
    configs = await put_chain(api, "t", 30)
    seen = []
    async for item in api.stream({"configurable": {"thread_id": "t"}}):
        seen.append(item.config["configurable"]["checkpoint_id"])
        if len(seen) == 2:
            break
    assert seen == [c["configurable"]["checkpoint_id"] for c in configs[::-1][:2]]
    assert len(await api.list({"configurable": {"thread_id": "t"}})) == 30
    await api.run(update_many(
        "checkpoints", {"thread_id": "t"}, {"$set": {"touched": True}}
    ))
    assert (await api.get_tuple(configs[0])) is not None
