"""The layout ladder (``schema.LADDERS``, ``schema.climb``) that the saver's and the store's
``setup()`` and ``upgrade()`` run, driven through a made-up ladder of four versions: 5 and
6 with nothing to rewrite, 7 with a step setup takes by itself, 8 with a step only an
upgrade takes. Below 5 is a pre-release layout, above 8 a newer release's."""

from __future__ import annotations

from typing import Any

import pytest

from mongo_ckpt import MongoDBSaver, SchemaTooNewError, SchemaUpgradeRequired, health, schema
from mongo_ckpt.calls import Operation, find_one
from mongo_ckpt.operations import CheckpointOperations
from mongo_ckpt.schema import SCHEMA, SCHEMA_COLLECTION, Ladder, Rung, read_version
from mongo_ckpt.store import MongoDBStore
from mongo_ckpt.store.operations import StoreOperations
from tests.backends import count_calls, total
from tests.layout_support import recorded_meanwhile

LADDER = Ladder((Rung(5), Rung(6), Rung(7, "_test_step"), Rung(8, "_upgrade_step", by_setup=False)))
KINDS = {
    "saver": (MongoDBSaver, CheckpointOperations, "create_indexes", "checkpoints"),
    "store": (MongoDBStore, StoreOperations, "_refuse_foreign", "store"),
}


@pytest.fixture
def ran(monkeypatch: Any) -> list[str]:
    """The steps run, in order, with the made-up ladder in place for both kinds."""
    steps: list[str] = []

    def step(name: str) -> Any:
        def run(self: Any) -> Operation[None]:
            steps.append(name)
            yield from find_one(SCHEMA, {"_id": "a rewrite's round trip"})

        return run

    for _, owner, _, _ in KINDS.values():
        monkeypatch.setattr(owner, "_test_step", step("setup step"), raising=False)
        monkeypatch.setattr(owner, "_upgrade_step", step("upgrade step"), raising=False)
    for kind in KINDS:
        monkeypatch.setitem(schema.LADDERS, kind, LADDER)
    return steps


def _key(kind: str) -> str:
    name = KINDS[kind][3]
    return schema.saver_key(name) if kind == "saver" else schema.store_key(name)


def _at(kind: str, client: Any, db_name: str, version: int) -> None:
    """Data of ``kind`` recorded at ``version``, as a release on that layout left it."""
    first = KINDS[kind][0](client, db_name)
    first.setup()
    client[db_name][SCHEMA_COLLECTION].update_one(
        {"_id": _key(kind)}, {"$set": {"version": version}}
    )


def _stored(client: Any, db_name: str) -> dict[str, list[Any]]:
    db = client[db_name]
    return {name: list(db[name].find({})) for name in sorted(db.list_collection_names())}


@pytest.mark.parametrize("kind", KINDS)
def test_setup_takes_the_rungs_setup_may_and_then_costs_one_read(
    kind: str, client: Any, db_name: str, ran: list[str]
) -> None:
    _at(kind, client, db_name, 6)
    KINDS[kind][0](client, db_name).setup()
    assert (ran, read_version(client[db_name], _key(kind))) == (["setup step"], 7)
    later = KINDS[kind][0](client, db_name)
    calls = count_calls(later.collections)
    later.setup()
    assert total(calls) == 1 and ran == ["setup step"]
    assert read_version(client[db_name], _key(kind)) == 7


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("start", [6, 7])
def test_upgrade_takes_every_rung_once(
    kind: str, start: int, client: Any, db_name: str, ran: list[str]
) -> None:
    _at(kind, client, db_name, start)
    made = KINDS[kind][0](client, db_name)
    made.upgrade()
    expected = ["setup step", "upgrade step"] if start == 6 else ["upgrade step"]
    assert (ran, read_version(client[db_name], _key(kind))) == (expected, 8)
    made.upgrade()
    KINDS[kind][0](client, db_name).setup()
    assert (ran, read_version(client[db_name], _key(kind))) == (expected, 8)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("version", [4, 9], ids=["below the oldest", "newer"])
def test_a_version_off_the_ladder_is_refused_and_nothing_written(
    kind: str, version: int, client: Any, db_name: str, ran: list[str]
) -> None:
    _at(kind, client, db_name, version)
    before = _stored(client, db_name)
    refusal, says = (
        (SchemaUpgradeRequired, "reads layout versions 5 to 8")
        if version < 5
        else (SchemaTooNewError, "layout version 9")
    )
    made = KINDS[kind][0](client, db_name)
    for call in (made.setup, made.upgrade):
        with pytest.raises(refusal, match=says):
            call()
    assert ran == [] and _stored(client, db_name) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_database_starts_where_setup_may_take_data_and_upgrades_from_there(
    kind: str, client: Any, db_name: str, ran: list[str]
) -> None:
    """New collections get 7, not 8: a process of the release before 8, still running
    beside this one, sets the same new database up without refusing it."""
    KINDS[kind][0](client, db_name).setup()
    assert (ran, read_version(client[db_name], _key(kind))) == ([], 7)
    KINDS[kind][0](client, db_name).upgrade()
    assert (ran, read_version(client[db_name], _key(kind))) == (["upgrade step"], 8)


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_database_another_release_recorded_first_is_climbed_from_its_version(
    kind: str, client: Any, db_name: str, ran: list[str], monkeypatch: Any
) -> None:
    """A process of a release on layout 6 sets up the same new database at the same moment
    and records first: this one takes the data from 6 as far as setup may."""
    maker, owner, step, _ = KINDS[kind]
    recorded_meanwhile(monkeypatch, owner, step, client[db_name], _key(kind), 6)
    maker(client, db_name).setup()
    assert (ran, read_version(client[db_name], _key(kind))) == (["setup step"], 7)


@pytest.mark.parametrize(
    ("found", "status", "says"),
    [
        (8, "ok", "version 8 (current)"),
        (7, "warn", "`mongo-ckpt upgrade --db agents` once no process of an earlier release"),
        (9, "fail", "newer than version 8"),
        (4, "fail", "development build"),
    ],
)
def test_doctor_reports_where_the_data_is_on_the_ladder(found: int, status: str, says: str) -> None:
    finding = health.schema_version(found, LADDER, None, "agents")
    assert finding.status == status and says in f"{finding.detail} {finding.fix}"
    by_setup = health.schema_version(5, Ladder((Rung(5), Rung(6, "_test_step"))), None, "a")
    assert by_setup.status == "warn" and "the next setup() takes it there" in str(by_setup.fix)
