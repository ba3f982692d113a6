"""What the commands say when they find nothing: the right database named, exit status 3
(nothing matched), and every ``--json`` output one object of the same top-level shape."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.cli import CliState, cli
from mongo_ckpt.store import MongoDBStore
from tests.backends import sync_client
from tests.cli_support import write_threads

READ_COMMANDS = [
    ("threads",), ("history", "chat-ada"), ("show", "chat-ada"), ("diff", "chat-ada", "a", "b"),
    ("stats",), ("doctor",), ("doctor", "--fix"), ("delete", "chat-ada", "--dry-run"),
    ("prune", "chat-ada", "--dry-run"), ("copy", "chat-ada", "x", "--dry-run"),
]


class Server:
    def __init__(self, client: Any, db: str) -> None:
        self.client, self.db = client, db

    def invoke(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), obj=CliState(client=self.client))


@pytest.fixture(scope="module", params=["mock", "wire"])
def server(request: Any) -> Iterator[Server]:
    """A server with mongo-ckpt data in one database (a saver's and a store's), none in
    the default database."""
    client = sync_client(request.param)
    db = f"t_results_{uuid.uuid4().hex[:8]}"
    write_threads(MongoDBSaver(client, db))
    MongoDBStore(client, db).put(("users",), "ada", {"likes": "tea"})
    try:
        yield Server(client, db)
    finally:
        for name in (db, f"{db}_empty", f"{db}_new"):
            client.drop_database(name)
        client.close()


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_database_without_data_is_said_and_the_ones_with_data_named(
    server: Server, command: tuple[str, ...]
) -> None:
    empty = f"{server.db}_empty"
    result = server.invoke(*command, "--db", empty)
    assert result.exit_code == 3, result.output
    assert f"database {empty!r} holds no mongo-ckpt checkpoints" in result.output
    assert f"{server.db} (saver:checkpoints, store:store): pass --db NAME" in result.output
    assert empty not in server.client.list_database_names()  # nothing created
    report = json.loads(server.invoke(*command, "--db", empty, "--json").output)
    assert report["status"] == "nothing matched"
    assert report["databases_with_data"][server.db] == ["saver:checkpoints", "store:store"]


def test_doctor_fix_creates_indexes_in_a_new_database_only_when_asked(server: Server) -> None:
    new = f"{server.db}_new"
    refused = server.invoke("doctor", "--fix", "--db", new)
    assert refused.exit_code == 3
    assert f"or --new-database to create the indexes in {new!r}" in refused.output
    alone = server.invoke("doctor", "--new-database", "--db", new)
    assert alone.exit_code == 2 and "--new-database goes with --fix" in alone.output
    created = server.invoke("doctor", "--fix", "--new-database", "--db", new, "--json")
    assert json.loads(created.output)["ok"] is True, created.output
    assert "join" in server.client[new]["checkpoint_blobs"].index_information()
    assert server.invoke("doctor", "--db", new).exit_code == 0


def test_what_matches_nothing_exits_3_and_says_so(server: Server) -> None:
    db = ("--db", server.db)
    before = server.client[server.db]["checkpoints"].count_documents({})
    gone = server.invoke("delete", "no-such-thread", "--yes", *db)
    assert gone.exit_code == 3, gone.output
    assert "delete: 0 threads" in gone.output
    assert "no checkpoints of 'no-such-thread': not found" in gone.output
    assert server.client[server.db]["checkpoints"].count_documents({}) == before
    for args in (("history", "no-such-thread"), ("show", "no-such-thread"),
                 ("prune", "no-such-thread", "--dry-run"), ("copy", "no-such-thread", "x"),
                 ("threads", "--filter", "user=nobody")):
        result = server.invoke(*args, *db)
        assert result.exit_code == 3, (args, result.output)
    some = json.loads(server.invoke("delete", "chat-bob", "nobody", "--dry-run", "--json",
                                    *db).output)
    assert (some["status"], some["threads"], some["not_found"]) == (
        "nothing matched", ["chat-bob"], ["nobody"]
    )


def test_a_page_past_the_end_exits_3_and_says_how_many_there_are(server: Server) -> None:
    total = json.loads(server.invoke("threads", "--json", "--db", server.db).output)["total"]
    result = server.invoke("threads", "--page", "99", "--limit", "20", "--db", server.db)
    assert result.exit_code == 3, result.output
    assert f"page 99 is past the end: {total} threads make 1 page of 20" in result.output
    report = json.loads(
        server.invoke("threads", "--page", "99", "--json", "--db", server.db).output
    )
    assert (report["status"], report["page"], report["total"]) == ("nothing matched", 99, total)


def test_every_json_output_is_an_object_of_the_same_shape(server: Server) -> None:
    db = ("--db", server.db)
    history = json.loads(server.invoke("history", "chat-ada", "--json", *db).output)
    ids = [c["checkpoint_id"] for c in history["checkpoints"]]
    runs = [
        ("threads",), ("history", "chat-ada"), ("show", "chat-ada"),
        ("diff", "chat-ada", ids[1], ids[0]), ("stats",), ("doctor",),
        ("delete", "chat-bob", "--dry-run"), ("prune", "chat-ada", "--dry-run"),
        ("copy", "chat-ada", "chat-zed", "--dry-run"), ("history", "no-such-thread"),
    ]
    for args in runs:
        result = server.invoke(*args, "--json", *db)
        report = json.loads(result.output)
        assert isinstance(report, dict), args
        assert list(report)[:3] == ["command", "db", "status"], args
        assert (report["command"], report["db"]) == (args[0], server.db)
        expected = "nothing matched" if result.exit_code == 3 else "done"
        assert report["status"] == expected, (args, result.exit_code)


def test_migrate_from_a_database_without_official_collections_is_refused(
    server: Server,
) -> None:
    result = server.invoke("migrate", "--from-official", "--source-db", f"{server.db}_empty",
                           "--db", f"{server.db}_new", "--verify")
    assert result.exit_code == 2, result.output
    assert "has no collection 'checkpoints': no langgraph-checkpoint-mongodb data" in (
        result.output
    )
