"""``list_namespaces`` beside writers, on the wire server: pages never exceed ``limit``,
every namespace live throughout a listing is on its page (where the page reaches it), and a
listing's reads stay bounded by its page and the entries it settles, however many writes
land while it runs (threads); without writers, a listing that meets many emptied
namespaces reads on in doubling steps (deterministic, on mock).
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any

from langgraph.store.base import PutOp
from pymongo import MongoClient
from pymongo.monitoring import CommandListener

from mongo_ckpt.store import MongoDBStore
from tests.backends import count_calls, sync_client, uri_for
from tests.store_stepping import listed, truth

NAMES = [("race", f"n{i:03}") for i in range(200)]
STABLE = NAMES[::2]  # each holds an item no writer deletes: live throughout every listing


class Aggregates(CommandListener):
    """The ``aggregate`` commands a client sends (each lister has a client of its own)."""

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: Any) -> None:
        self.count += event.command_name == "aggregate"

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


def most_aggregates(wanted: int, namespaces: int) -> int:
    """A listing's bound: the page read, again after a fold, then on in doubling steps
    until it holds ``wanted`` namespaces; one probe per read."""
    reads = 2 + max(1, math.ceil(math.log2(namespaces / wanted)) + 1)
    return 2 * reads


def test_listings_beside_writers_are_exact_bounded_pages(db_name: str) -> None:
    client: MongoClient[Any] = MongoClient(uri_for("wire"), directConnection=True)
    store = MongoDBStore(client, db_name)
    store.batch([PutOp(ns, "keep", {"v": 0}) for ns in STABLE])
    store.batch([PutOp(ns, "k", {"v": 0}) for ns in NAMES[1::2]])
    assert listed(store) == NAMES
    stop = threading.Event()
    errors: list[BaseException] = []
    pages: list[tuple[int, int, list[tuple[str, ...]], int]] = []

    def writer(seed: int) -> None:
        """Puts with a TTL (raising entries: flagged) and deletes, in every namespace but
        never of a stable one's ``keep``; some batches into many namespaces."""
        rng = random.Random(seed)
        mine = MongoDBStore(client, db_name)
        mine.ops.batch_from = 3 if seed % 2 else mine.ops.batch_from
        try:
            while not stop.is_set():
                spaces = rng.sample(NAMES, rng.choice([1, 4]))
                ops = [
                    PutOp(ns, "k", None if rng.random() < 0.4 else {"v": seed}, ttl=5)
                    for ns in spaces
                ]
                mine.batch(ops)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def lister(seed: int) -> None:
        rng = random.Random(seed)
        counted = Aggregates()
        own: MongoClient[Any] = MongoClient(
            uri_for("wire"), directConnection=True, event_listeners=[counted]
        )
        mine = MongoDBStore(own, db_name)
        mine.setup()
        try:
            for _ in range(25):
                limit, offset = rng.choice([(1, 0), (2, 0), (10, 0), (10, 4), (2, 150)])
                before = counted.count
                page = mine.list_namespaces(prefix=("race",), limit=limit, offset=offset)
                pages.append((limit, offset, page, counted.count - before))
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    writers = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    listers = [threading.Thread(target=lister, args=(s,)) for s in range(2)]
    for thread in [*writers, *listers]:
        thread.start()
    for thread in listers:
        thread.join()
    stop.set()
    for thread in writers:
        thread.join()
    assert not errors, errors
    assert len(pages) == 50
    print(f"aggregates per listing: at most {max(count for *_, count in pages)}")
    for limit, offset, page, aggregates in pages:
        assert len(page) <= limit and page == sorted(set(page)), (limit, offset, page)
        assert set(page) <= set(NAMES), page
        assert aggregates <= most_aggregates(offset + limit, len(NAMES)), (limit, aggregates)
        if offset == 0:  # the stable namespaces up to the page's last one are all on it
            last = page[-1] if len(page) == limit else NAMES[-1]
            assert [ns for ns in STABLE if ns <= last] == [ns for ns in page if ns in STABLE]
    assert listed(store) == truth(store)
    client.drop_database(db_name)
    client.close()


def test_a_listing_over_many_emptied_namespaces_reads_on_in_doubling_steps(
    db_name: str,
) -> None:
    """190 of 200 namespaces emptied (their entries flagged), the 10 live ones last: a
    listing of 10 reads 10, 20, 40, 80, then 160 groups after the last it read, settling
    each read's flagged entries in one claim, one probe and one write-back."""
    client = sync_client("mock")
    store = MongoDBStore(client, db_name)
    store.batch([PutOp(ns, "k", {"v": 0}) for ns in NAMES])
    assert listed(store) == NAMES  # every entry settled
    store.batch([PutOp(ns, "k", None) for ns in NAMES[:190]])
    calls = count_calls(store.collections)
    assert store.list_namespaces(prefix=("race",), limit=10) == NAMES[190:]
    reads = 5  # 10 + 20 + 40 + 80 + 160 groups reach the 200th
    assert calls[("registry", "aggregate")] == reads
    assert calls[("store", "aggregate")] == reads  # one probe a read
    assert calls[("registry", "bulk_write")] == 2 * reads  # a claim and a write-back
    assert listed(store) == NAMES[190:]
    client.drop_database(db_name)
