"""Batching: round trips per batch are deterministic, so they are asserted exactly."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import GetOp, PutOp, SearchOp

from mongo_ckpt.client_bulk import has_bulk_write
from tests.backends import count_calls
from tests.store_support import DIMS, FakeEmbeddings, writes


async def test_n_gets_are_one_query(make_astore: Any) -> None:
    store = make_astore()
    await store.abatch([PutOp(("users", str(i)), "profile", {"i": i}) for i in range(20)])
    calls = count_calls(store.collections)
    ops = [GetOp(("users", str(i)), "profile") for i in reversed(range(25))]
    results = await store.abatch(ops)
    assert dict(calls) == {("store", "find"): 1}
    assert [r.value["i"] if r else None for r in results] == [None] * 5 + list(reversed(range(20)))


def test_n_gets_are_one_query_sync(make_store: Any) -> None:
    store = make_store()
    store.batch([PutOp(("users", str(i)), "profile", {"i": i}) for i in range(5)])
    calls = count_calls(store.collections)
    results = store.batch([GetOp(("users", str(i)), "profile") for i in range(5)] * 2)
    assert dict(calls) == {("store", "find"): 1}
    assert [r.value["i"] for r in results] == list(range(5)) * 2


async def test_n_puts_are_one_bulk_write_and_one_embedding_call(make_astore: Any) -> None:
    embeddings = FakeEmbeddings()
    store = make_astore(
        index={"dims": DIMS, "embed": embeddings, "fields": ["text"]}, exact_search=True
    )
    await store.asetup()
    calls = count_calls(store.collections)
    await store.abatch(
        [PutOp(("notes",), f"n{i}", {"text": f"note number {i % 3}"}) for i in range(12)]
    )
    assert dict(calls) == writes(store, inserted=True)
    # identical texts are embedded once
    assert embeddings.document_calls == [["note number 0", "note number 1", "note number 2"]]
    assert len(await store.asearch(("notes",), limit=100)) == 12


async def test_last_write_wins_for_duplicate_puts(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("n",), "deleted-then-put", {"v": 0})
    await store.aput(("n",), "put-then-deleted", {"v": 0})
    await store.abatch(
        [
            PutOp(("n",), "k", {"v": 1}),
            PutOp(("n",), "deleted-then-put", None),
            PutOp(("n",), "k", {"v": 2}),
            PutOp(("n",), "put-then-deleted", {"v": 1}),
            PutOp(("n",), "deleted-then-put", {"v": 1}),
            PutOp(("n",), "k", {"v": 3}),
            PutOp(("n",), "put-then-deleted", None),
        ]
    )
    assert (await store.aget(("n",), "k")).value == {"v": 3}
    assert (await store.aget(("n",), "deleted-then-put")).value == {"v": 1}
    assert await store.aget(("n",), "put-then-deleted") is None


async def test_mixed_batch_round_trips(make_astore: Any) -> None:
    """8 gets + 8 puts + 4 searches: one find for the gets, one per search, and the writes:
    one client-level bulk write, or one bulk write for the items and one for the registry."""
    store = make_astore()
    await store.abatch([PutOp(("m", str(i % 4)), f"k{i}", {"i": i}) for i in range(16)])
    calls = count_calls(store.collections)
    ops: list[Any] = []
    for i in range(8):
        ops.append(GetOp(("m", str(i % 4)), f"k{i}"))
        ops.append(PutOp(("m", "new"), f"p{i}", {"i": i}))
    ops += [SearchOp(("m", str(i)), filter={"i": {"$gte": 8}}) for i in range(4)]
    results = await store.abatch(ops)
    assert dict(calls) == {("store", "find"): 5, **writes(store, inserted=True)}
    assert [r.value["i"] for r in results[0:16:2]] == list(range(8))
    assert results[1:16:2] == [None] * 8
    assert [sorted(i.value["i"] for i in r) for r in results[16:]] == [
        [8, 12], [9, 13], [10, 14], [11, 15]
    ]


async def test_ttl_refresh_rides_in_the_same_bulk_write(make_astore: Any) -> None:
    store = make_astore(ttl={"default_ttl": 10, "refresh_on_read": True})
    await store.abatch([PutOp(("t",), f"k{i}", {"i": i}, ttl=10) for i in range(4)])
    calls = count_calls(store.collections)
    await store.abatch(
        [GetOp(("t",), "k0"), GetOp(("t",), "k1"), SearchOp(("t",)), PutOp(("t",), "k9", {})]
    )
    assert dict(calls) == {("store", "find"): 2, **writes(store)}


async def test_reads_without_ttl_write_nothing(make_astore: Any) -> None:
    store = make_astore()
    await store.aput(("t",), "k", {"v": 1})
    calls = count_calls(store.collections)
    await store.aget(("t",), "k")
    await store.asearch(("t",))
    assert dict(calls) == {("store", "find"): 2}


async def test_setup_runs_once_on_first_use(make_astore: Any) -> None:
    store = make_astore()
    calls = count_calls(store.collections)
    await store.aget(("t",), "k")
    await store.aget(("t",), "k")
    # New collections: ask the server whether it has the client-level bulk write (where
    # the client library has it), read the layout version, check they hold no other
    # layout (another schema record naming them, a sample document and the indexes of
    # each), create the indexes, record the version.
    asked = {("$client", "command"): 1} if has_bulk_write(store.client) else {}
    assert dict(calls) == {
        **asked,
        ("schema", "find_one"): 2,
        **{(logical, "find_one"): 1 for logical in ("store", "registry")},
        **{(logical, "index_information"): 1 for logical in ("store", "registry")},
        **{(logical, "create_indexes"): 1 for logical in ("store", "registry")},
        ("schema", "find_one_and_update"): 1,
        ("store", "find"): 2,
    }
