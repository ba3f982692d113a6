"""List deltas against whole values: random edit programs on several list channels, with
forks, parallel branches, subgraph namespaces and two saver instances on one thread.

Every checkpoint put reads back (``get_tuple`` and ``list``) equal to what was put, and
equal to what a ``list_deltas=False`` saver returns; no blob is left unreferenced and no
value needs more than ``floor(log2(n)) + 2`` blob documents.
"""

from __future__ import annotations

import asyncio

from hypothesis import given

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.layout import BLOBS
from tests.lengths import Length
from tests.list_delta_programs import (
    _ids,
    check_bounded_chains,
    check_reads,
    programs,
    run_program,
)
from tests.prose import prose
from tests.saver_support import Api, assert_no_orphans


def test_every_version_reads_back_like_whole_values(saver: MongoDBSaver, length: Length) -> None:
    @length.settings(40)
    @given(program=programs)
    def check(program: list) -> None:
        delta_api = Api(saver)
        other = delta_api.reopened()  # a second instance with its own memory, same collections
        plain = delta_api.reopened(f"{saver.db.name}_plain", list_deltas=False)
        thread_id = f"t{next(_ids)}"
        done = run_program([delta_api, other], plain, program, thread_id)
        check_reads([delta_api, other, plain], done)
        check_bounded_chains(delta_api, thread_id, len(program))
        asyncio.run(assert_no_orphans(delta_api))
        # One blob document per version written, delta or whole.
        query = {"thread_id": thread_id}
        blobs = delta_api.raw(BLOBS).count_documents(query)
        assert blobs == plain.raw(BLOBS).count_documents(query)

    check()


def test_appends_are_stored_as_deltas(saver: MongoDBSaver) -> None:
    api = Api(saver)
    plain = api.reopened(f"{saver.db.name}_plain", list_deltas=False)
    program = [{"back": 0, "ns": "", "writer": 0, "edits": {}}] + [
        {"back": 0, "ns": "", "writer": 0, "edits": {"messages": [("append", [prose(n, 100)])]}}
        for n in range(32)
    ]
    done = run_program([api], plain, program, "appends")
    check_reads([api, plain], done)
    deltas = api.raw(BLOBS).count_documents({"thread_id": "appends", "base": {"$exists": True}})
    assert deltas == 31  # every version but the first
    ours = sum(len(d["data"]) for d in api.raw(BLOBS).find({"thread_id": "appends"}))
    whole = sum(len(d["data"]) for d in plain.raw(BLOBS).find({"thread_id": "appends"}))
    # 32 appends of 100 bytes: whole values store ~32*33/2 elements, deltas ~32*log2(32)/2.
    assert ours * 4 < whole
