"""The namespace registry behind ``list_namespaces``: what it lists after deletes, shorter
TTLs and expiry, the upgrade that builds it, and races between the writes of the last item
of a namespace and the listing that settles its entry.

The race test steps two writers (a delete and a put of the last item of one namespace) and
a lister call by call, each bulk write split into its requests, on mock, through random
interleavings (``length``: the same ones every time, or more drawn anew); with batch
documents (one for every put) and with entry statements. After each run every unflagged
entry is exact (unless folding a batch document naming it flags it), the listing equals
the items, and the lister's own answer was true at some moment while it ran. A threaded
stress does the same on the wire server.
"""

from __future__ import annotations

import itertools
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from langgraph.store.base import GetOp, Op, PutOp

from mongo_ckpt import SchemaUpgradeRequired, schema
from mongo_ckpt.store import MongoDBStore, documents, registry
from tests.backends import maybe_await, sync_client, uri_for
from tests.clock_skew import skewed_client_clock
from tests.faults import Interleave
from tests.lengths import Length
from tests.store_stepping import LISTING, Stepper, listed, operation, truth
from tests.store_support import StoreApi, assert_entry_fields, keep_expired

NS = ("users", "u1", "memories")


async def test_deleting_the_last_item_unlists_its_namespace(store_api: Any) -> None:
    await store_api.put(NS, "a", {"v": 1})
    await store_api.put(NS, "b", {"v": 1})
    await store_api.put(("other",), "a", {"v": 1})
    await store_api.delete(NS, "a")
    assert await store_api.list_namespaces() == [("other",), NS]
    await store_api.delete(NS, "b")
    assert await store_api.list_namespaces() == [("other",)]
    assert await store_api.list_namespaces(prefix=("users",)) == []
    await store_api.put(NS, "c", {"v": 1})
    assert await store_api.list_namespaces(prefix=("users",), max_depth=2) == [("users", "u1")]


async def test_pages_skip_emptied_namespaces(store_api: Any) -> None:
    names = [("n", f"{i:02}") for i in range(12)]
    await store_api.batch([PutOp(ns, "k", {"v": 1}) for ns in names])
    await store_api.batch([PutOp(ns, "k", None) for ns in names[1:9]])
    assert await store_api.list_namespaces(limit=2) == [names[0], names[9]]
    assert await store_api.list_namespaces(limit=2, offset=1) == [names[9], names[10]]
    assert await store_api.list_namespaces(max_depth=1) == [("n",)]


async def test_one_batch_of_many_items_duplicates_and_deletes_lists_what_is_stored(
    store_api: Any,
) -> None:
    """Several items of one namespace, one item put twice, one put then deleted and one
    namespace whose only item is put then deleted, all in one batch: one registry write
    per namespace, and the listing is the items."""
    gone = ("users", "u2", "memories")
    ops: list[Op] = [PutOp(NS, f"k{i}", {"v": i}) for i in range(5)]
    ops += [PutOp(NS, "k0", {"v": "again"}), PutOp(NS, "k4", None)]
    ops += [PutOp(gone, "only", {"v": 1}), PutOp(gone, "only", None)]
    await store_api.batch(ops)
    assert await store_api.list_namespaces() == [NS]
    assert (await store_api.get(NS, "k0")).value == {"v": "again"}
    assert await store_api.get(NS, "k4") is None
    assert len(await store_api.search(NS, limit=10)) == 4
    await store_api.batch([PutOp(NS, f"k{i}", None) for i in range(4)] + [PutOp(gone, "a", {})])
    assert await store_api.list_namespaces() == [gone]


def _expire_now(store: Any, key: str) -> None:
    """Move an item's expiry into the past as the clock would (its entry is left alone:
    the overwrite with a shorter TTL flagged it)."""
    past = documents.utc_now() - timedelta(seconds=1)
    store.collections["store"].update_one({"key": key}, {"$set": {"expires_at": past}})


def test_a_shorter_ttl_on_the_last_item_is_noticed(make_store: Any) -> None:
    store = make_store()
    store.setup()
    keep_expired(store)
    store.put(NS, "k", {"v": 1})  # never expires
    store.put(NS, "k", {"v": 2}, ttl=5)  # now it does: the entry is flagged
    _expire_now(store, "k")
    assert listed(store) == []
    # Still stored, the item may be live on a clock behind: the entry stays, exact.
    entry = store.collections["registry"].find_one(
        {"_id": registry.entry_id("users\x00u1\x00memories")}
    )
    item = store.collections["store"].find_one({"key": "k"})
    assert entry[registry.UNTIL] == item["expires_at"] and entry["recheck"] is False
    store.sweep_ttl()
    assert store.collections["store"].count_documents({}) == 0
    assert store.collections["registry"].count_documents({}) == 0


def _clock(seconds: float) -> Any:
    return skewed_client_clock(timedelta(seconds=seconds))


def test_a_listing_on_a_clock_ahead_keeps_namespaces_live_on_other_clocks(
    make_store: Any,
) -> None:
    """A clock 10 minutes ahead sees an item expiring in 2 minutes as expired; settling
    the flagged entry, it must not remove it: on the true clock the item is live."""
    store = make_store()
    with _clock(600):
        store.put(NS, "k", {"v": 1}, ttl=2)  # expires in 12 minutes
    store.put(NS, "k", {"v": 2}, ttl=2)  # in 2: the entry is flagged
    with _clock(600):
        assert listed(store) == []
    assert store.get(NS, "k", refresh_ttl=False) is not None
    assert listed(store) == [NS]


def test_an_item_put_during_a_sweep_is_swept_or_listed(make_store: Any) -> None:
    """A sweep on a clock ahead deletes what expired on it: an item put between its two
    deletes (expiring before the sweeper's now) is either deleted or keeps its entry."""
    sweeper, writer = make_store(), make_store()
    sweeper.setup()
    landed: list[bool] = []

    def put() -> None:
        if not landed:
            landed.append(True)
            with _clock(0):
                writer.put(NS, "k", {"v": 1}, ttl=2)

    interleave = Interleave(sweeper.collections, put)
    try:
        with _clock(600):
            sweeper.sweep_ttl()
    finally:
        interleave.restore()
    assert landed
    found = writer.get(NS, "k", refresh_ttl=False) is not None
    assert listed(writer) == ([NS] if found else [])


def test_omit_expired_false_lists_expired_items_still_stored(make_store: Any) -> None:
    store = make_store(ttl={"omit_expired": False})
    store.setup()
    store.collections["store"].drop_index("expires_at")
    store.put(NS, "k", {"v": 1}, ttl=5)
    _expire_now(store, "k")
    assert listed(store) == [NS]


@pytest.mark.parametrize(
    "recorded",
    [None, 1, schema.STORE_SCHEMA_VERSION - 1],
    ids=["unrecorded", "version 1", "the version before"],
)
async def test_items_of_a_pre_release_layout_are_refused(
    store_api: Any, recorded: int | None
) -> None:
    """Items of a development build's layout (without a registry, recorded or not, or at an
    earlier version): setup refuses them, writing nothing."""
    await store_api.put(NS, "a", {"v": 1})
    collection = store_api.store.collections["store"]
    await maybe_await(store_api.store.collections["registry"].delete_many({}))
    versions = store_api.store.collections[schema.SCHEMA]
    key = {"_id": schema.store_key(collection.name)}
    if recorded is None:
        await maybe_await(versions.delete_one(key))
    else:
        await maybe_await(versions.update_one(key, {"$set": {"version": recorded}}))
    before = await maybe_await(collection.count_documents({}))
    again = StoreApi(type(store_api.store)(store_api.store.client, store_api.store.db.name))
    with pytest.raises(SchemaUpgradeRequired, match="written by a development build"):
        await again.setup()
    only = f"reads layout version {schema.STORE_SCHEMA_VERSION} only"
    with pytest.raises(SchemaUpgradeRequired, match=only):
        await again.put(NS, "b", {"v": 2})
    assert await maybe_await(collection.count_documents({})) == before
    assert schema.version_of(await maybe_await(versions.find_one(key))) == recorded


# -- races, step by step on mock -------------------------------------------------------


SCENARIOS = {
    "delete k, put j": ([PutOp(NS, "k", None)], [PutOp(NS, "j", {"v": 2})]),
    "delete k, put k": ([PutOp(NS, "k", None)], [PutOp(NS, "k", {"v": 2})]),
    "delete k, put j with a ttl": ([PutOp(NS, "k", None)], [PutOp(NS, "j", {"v": 2}, ttl=5)]),
    "put k with a ttl, delete k": ([PutOp(NS, "k", {"v": 2}, ttl=5)], [PutOp(NS, "k", None)]),
}


def _entries_are_exact(store: MongoDBStore, schedule: list[int]) -> None:
    """Every unflagged entry lists exactly a namespace with a live item, until the latest
    expiry of its items, unless folding the batch documents naming it flags it; every
    namespace with a live item has an entry, or a batch document names it."""
    now = documents.utc_now()
    live = {registry_key(ns) for ns in truth(store)}
    found = list(store.collections["registry"].find({}))
    entries = [doc for doc in found if doc[registry.LISTED] != registry.BATCHES]
    # Namespaces that batch documents left to the next listing to fold: (latest, earliest).
    named: dict[str, tuple[Any, Any]] = {}
    for doc in found:
        for labels, latest, earliest in doc.get("named", ()):
            key = registry_key(tuple(labels))
            before = named.get(key, (latest, earliest))
            named[key] = (max(before[0], latest), min(before[1], earliest))
    for entry in entries:
        until = entry[registry.UNTIL]
        assert_entry_fields(entry)
        listed = until.replace(tzinfo=now.tzinfo) > now
        pending = named.get(entry[registry.LISTED])
        # The fold of a batch document naming it flags the entry where it differs.
        if not entry.get("recheck") and not (pending and not pending[1] >= until >= pending[0]):
            assert listed == (entry[registry.LISTED] in live), (schedule, entry)
            items = store.collections["store"].find({"ns": entry[registry.LISTED]})
            latest = max(
                (d.get("expires_at") or documents.FOREVER.replace(tzinfo=None) for d in items),
                default=None,
            )
            assert not listed or until == latest, (schedule, entry, latest)
    assert live <= set(named) | {
        e[registry.LISTED] for e in entries if e[registry.UNTIL].replace(tzinfo=now.tzinfo) > now
    }


def registry_key(namespace: tuple[str, ...]) -> str:
    return "\x00".join(namespace)


class Race:
    """Two writers and a lister on one namespace whose last item is ``k``, replayed from
    the start for every schedule."""

    def __init__(
        self, store: MongoDBStore, writers: tuple[list[Op], list[Op]], beside: bool
    ) -> None:
        self.store = store
        store.put(NS, "k", {"v": 1})
        self.beside = {"j"} if beside else set()
        if beside:  # an item expiring in five minutes: the entry must not outlast it
            store.put(NS, "j", {"v": 1}, ttl=5)
        self.start = {
            logical: list(store.collections[logical].find({})) for logical in ("store", "registry")
        }
        self.actors = [*writers, [LISTING]]
        self.schedules = 0
        self.steps = 0

    def replay(self, schedule: list[int]) -> Run:
        """Run ``schedule`` from a fresh start."""
        for logical, docs in self.start.items():
            self.store.collections[logical].delete_many({})
            self.store.collections[logical].insert_many([dict(doc) for doc in docs])
        run = Run([Stepper(operation(self.store, ops)) for ops in self.actors])
        for actor in schedule:
            run.step(actor, self.store.collections)
        return run

    def linearizable(self, spans: list[tuple[int, int]]) -> set[bool]:
        """Whether the namespace is listed, in each order of the three operations that
        respects real time (an operation that ended before another began comes first)."""
        answers = set()
        for order in itertools.permutations(range(3)):
            if any(
                spans[later][1] < spans[earlier][0]
                for i, earlier in enumerate(order)
                for later in order[i + 1 :]
            ):
                continue
            keys = {"k", *self.beside}
            for actor in order[: order.index(2)]:
                (op,) = self.actors[actor]
                assert isinstance(op, PutOp)
                keys = keys - {op.key} if op.value is None else keys | {op.key}
            answers.add(bool(keys))
        return answers

    def sample(self, rng: random.Random, count: int) -> None:
        """``count`` schedules, each step's actor drawn at random."""
        for _ in range(count):
            run = self.replay([])
            while waiting := run.waiting():
                run.step(rng.choice(waiting), self.store.collections)
            self.check(run)

    def check(self, run: Run) -> None:
        self.schedules += 1
        self.steps = max(self.steps, len(run.schedule))
        _entries_are_exact(self.store, run.schedule)
        answer = run.actors[2].result[0]
        assert (answer == [NS]) in self.linearizable(run.spans()), (run.schedule, answer)
        assert listed(self.store) == truth(self.store)
        assert listed(self.store) == truth(self.store)
        # A listing with nothing beside it settles every flagged entry it met.
        assert self.store.collections["registry"].find_one({"recheck": True}) is None


class Run:
    """The actors of one schedule, stepped so far."""

    def __init__(self, actors: list[Stepper]) -> None:
        self.actors = actors
        self.schedule: list[int] = []

    def waiting(self) -> list[int]:
        return [actor for actor, stepper in enumerate(self.actors) if not stepper.done]

    def step(self, actor: int, collections: dict[str, Any]) -> None:
        self.actors[actor].step(collections)
        self.schedule.append(actor)

    def spans(self) -> list[tuple[int, int]]:
        """Each actor's first and last step."""
        positions = [[i for i, a in enumerate(self.schedule) if a == actor] for actor in range(3)]
        return [(p[0], p[-1]) if p else (-1, -1) for p in positions]


# Schedules per case at the fixed length (from a fixed seed); the long run draws LONG times
# as many from a seed of its own, printed.
SAMPLED = 100


# From how many namespaces a batch sends a batch document: every put does, or none here.
LISTERS = {"batch documents": 1, "entry statements": registry.BATCH_FROM}


@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside an expiring item"])
@pytest.mark.parametrize("put_shape", ["pipeline", "insert"], indirect=True)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("lister", LISTERS)
def test_interleavings_of_the_last_items_writes_and_a_listing(
    lister: str, scenario: str, db_name: str, put_shape: str, beside: bool, length: Length
) -> None:
    """Random interleavings: ``SAMPLED`` the same every time, or (long) more, drawn anew."""
    client = sync_client("mock")
    store = MongoDBStore(client, db_name)
    store.setup()
    store.ops.batch_from = LISTERS[lister]
    race = Race(store, SCENARIOS[scenario], beside)
    seed = random.randrange(2**32) if length.long else f"{scenario} {put_shape} {beside}"
    print(f"seed {seed!r}")
    race.sample(random.Random(seed), length.times(SAMPLED))
    print(f"{scenario}: {race.schedules} interleavings, up to {race.steps} steps")
    client.drop_database(db_name)


def test_threaded_writers_and_listers_on_wire(db_name: str) -> None:
    """Four writers and two listers in threads; two writers' store sends entry statements,
    the others' batch documents (two namespaces at a time)."""
    from pymongo import MongoClient

    client: MongoClient[Any] = MongoClient(uri_for("wire"), directConnection=True)
    store = MongoDBStore(client, db_name)
    store.setup()
    batched = MongoDBStore(client, db_name)
    batched.setup()
    batched.ops.batch_from = 2
    names = [("race", f"n{i}") for i in range(3)]
    errors: list[BaseException] = []
    listings: list[int] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        mine = [store, batched][seed % 2]
        try:
            for _ in range(40):
                ns, other, third = rng.sample(names, 3)
                ttl = rng.choice([None, 5])
                draw = rng.random()
                if draw < 0.4:
                    mine.put(ns, "k", {"v": seed}, ttl=ttl)
                elif draw < 0.7:  # two namespaces: a batch document where the store sends them
                    mine.batch([PutOp(n, "b", {"v": seed}, ttl=ttl) for n in (ns, other)])
                else:
                    deletes = [PutOp(ns, "k", None), PutOp(other, "b", None)]
                    mine.batch([*deletes, PutOp(third, "k", {"v": seed}, ttl=ttl)])
        except BaseException as exc:  # reported below
            errors.append(exc)

    def lister() -> None:
        try:
            for _ in range(40):
                store.list_namespaces(prefix=("race",))
                listings.append(1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(4)]
    threads += [threading.Thread(target=lister) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(listings) == 80
    assert listed(store) == truth(store)
    assert listed(store) == truth(store)
    client.drop_database(db_name)
    client.close()


def test_a_listing_never_settles_an_entry_removed_and_created_again_since_its_claim(
    db_name: str,
) -> None:
    """A listing claims a flagged entry and probes its namespace after the server's TTL
    monitor (its clock ahead) removed the only item; the monitor then removes the entry
    too, and a put creates it again. The listing's settle, conditional on the version of
    its claim, must not remove the new entry: versions never repeat."""
    client = sync_client("mock")
    store = MongoDBStore(client, db_name)
    store.put(NS, "k", {"v": 1}, ttl=2)
    lister = Stepper(operation(store, [LISTING]))
    lister.step(store.collections)  # the page of entries
    lister.step(store.collections)  # the claim of the flagged entry
    store.collections["store"].delete_one({"key": "k"})
    lister.step(store.collections)  # the probe: no item left
    store.collections["registry"].delete_one({"_id": registry.entry_id(registry_key(NS))})
    store.put(NS, "j", {"v": 2})
    while not lister.done:
        lister.step(store.collections)
    assert lister.result[0] == []  # true when it probed
    assert listed(store) == [NS]
    client.drop_database(db_name)


def _monitorless(db_name: str) -> MongoDBStore:
    """A store on mock whose expired documents stay stored until swept (mongomock applies
    TTL indexes on every read)."""
    store = MongoDBStore(sync_client("mock"), db_name)
    store.setup()
    keep_expired(store)
    return store


@pytest.mark.parametrize("ttl", [None, 30])
def test_an_entry_removed_expired_in_the_middle_of_a_put_is_created_again(
    db_name: str, ttl: int | None
) -> None:
    """A namespace whose only item expired: its entry, expired too, is removed (by a sweep
    or the server's TTL monitor) between the put's item and its registry statement, which
    creates the entry again, so the put's live item is listed."""
    store = _monitorless(db_name)
    with _clock(-600):
        store.put(NS, "j", {"v": 1}, ttl=1)  # expired nine minutes ago
    assert listed(store) == []
    collection = store.collections["registry"]
    entry = registry.entry_id(registry_key(NS))
    assert collection.find_one({"_id": entry}) is not None
    put = Stepper(operation(store, [PutOp(NS, "k", {"v": 2}, ttl=ttl)]))
    put.step(store.collections)  # the item
    assert store.sweep_ttl() == 1
    assert collection.find_one({"_id": entry}) is None
    while not put.done:
        put.step(store.collections)
    assert truth(store) == [NS]
    assert listed(store) == [NS]
    store.client.drop_database(db_name)


def test_a_listing_that_probed_before_a_shorter_ttl_never_writes_its_expiry_back(
    db_name: str,
) -> None:
    """A listing claims the flagged entry of a namespace whose item never expires and
    probes it; the item is overwritten with a 5-minute TTL, whose entry statement lands
    before the listing's settle. It finds the claim and sets a new version, so the settle
    (the item never expiring) is not written, and the namespace is unlisted once the item
    expired."""
    store = MongoDBStore(sync_client("mock"), db_name)
    store.put(NS, "k", {"v": 1})
    lister = Stepper(operation(store, [LISTING]))
    for _ in range(3):  # the page, the claim, the probe: k never expires
        lister.step(store.collections)
    put = Stepper(operation(store, [PutOp(NS, "k", {"v": 2}, ttl=5)]))
    put.step(store.collections)  # the item, expiring in 5 minutes
    put.step(store.collections)  # the entry flagged: it may expire earlier now
    while not lister.done:
        lister.step(store.collections)
    while not put.done:
        put.step(store.collections)
    with _clock(360):
        assert store.get(NS, "k", refresh_ttl=False) is None
        assert listed(store) == []
    store.client.drop_database(db_name)


def test_a_refresh_read_before_an_overwrite_without_a_ttl_leaves_it_without_one(
    db_name: str,
) -> None:
    """A get reads an item with a TTL; a put overwrites it without one before the get's
    refresh lands. The refresh applies only to the TTL it read: the item never expires,
    as in ``InMemoryStore`` in either order."""
    store = MongoDBStore(sync_client("mock"), db_name)
    store.put(NS, "k", {"v": 1}, ttl=5)
    reader = Stepper(operation(store, [GetOp(NS, "k", refresh_ttl=True)]))
    reader.step(store.collections)  # the item, with its TTL
    store.put(NS, "k", {"v": 2})
    assert listed(store) == [NS]  # settled: never expires
    while not reader.done:
        reader.step(store.collections)
    assert "expires_at" not in store.collections["store"].find_one({"key": "k"})
    with _clock(360):
        assert store.get(NS, "k", refresh_ttl=False).value == {"v": 2}
        assert listed(store) == [NS]
    store.client.drop_database(db_name)


def test_a_listing_whose_settling_the_server_refuses_still_answers(
    db_name: str, caplog: Any
) -> None:
    """On the wire server, the claim and the write-back of a listing refused (a failing
    ``update``): the listing answers from its probe and logs it; the entry stays flagged
    until the next listing settles it."""
    from pymongo import MongoClient

    client: MongoClient[Any] = MongoClient(uri_for("wire"), directConnection=True)
    store = MongoDBStore(client, db_name)
    store.put(NS, "a", {"v": 1})
    store.put(("gone",), "a", {"v": 1})
    store.delete(("gone",), "a")
    spec = {"failCommands": ["update", "delete"], "errorCode": 2, "errmsg": "refused"}
    client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 3},
                          "data": spec})
    try:
        assert store.list_namespaces() == [NS]
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert "could not settle" in caplog.text
    assert store.collections["registry"].find_one({"recheck": True}) is not None
    assert store.list_namespaces() == [NS]
    assert store.collections["registry"].find_one({"recheck": True}) is None
    client.drop_database(db_name)
    client.close()
