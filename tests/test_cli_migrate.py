"""``mongo-ckpt migrate --from-official`` and ``mongo-ckpt upgrade`` on mock and wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.schema import SAVER_SCHEMA_VERSION, SCHEMA_COLLECTION, read_version, saver_key
from tests.cli_support import invoke
from tests.graphs import chat_builder, contents, thread

OfficialSaver = pytest.importorskip(
    "langgraph.checkpoint.mongodb",
    reason="migrates data of langgraph-checkpoint-mongodb: pip install -e '.[test,bench]'",
).MongoDBSaver


AES_KEY = "0123456789abcdef"


@pytest.fixture
def dbs(client: Any, db_name: str) -> Iterator[tuple[str, str]]:
    yield f"{db_name}_src", db_name
    client.drop_database(f"{db_name}_src")
    client.drop_database(db_name)


def chat_threads(official: OfficialSaver, threads: int) -> None:
    graph = chat_builder().compile(checkpointer=official)
    for i in range(threads):
        for text in ("hi", "again"):
            graph.invoke({"messages": [HumanMessage(f"{text} {i}")]}, thread(f"t{i}"))


def test_migrate_verify_and_continue(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    official = OfficialSaver(client, source, "agent_checkpoints", "agent_writes")
    chat_threads(official, 5)
    args = ["migrate", "--from-official", "--source-db", source, "--db", target]
    args += ["--source-collections", "agent_checkpoints,agent_writes", "--batch", "2"]
    result = invoke(client, *args, "--verify", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    checkpoints = official.checkpoint_collection.count_documents({})
    assert report["migrated"]["threads"] == 5
    assert report["migrated"]["checkpoints"] == checkpoints
    assert report["verified"]["checkpoints"] == checkpoints
    assert report["verified"]["mismatches"] == []

    # A second run has nothing left to do; its table says so.
    again = invoke(client, *args, "--verify")
    assert again.exit_code == 0, again.output
    assert "migrate" in again.output and "verify" in again.output
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, target))
    result = graph.invoke({"messages": [HumanMessage("more")]}, thread("t3"))
    assert contents(result["messages"])[-2:] == [("human", "more"), ("ai", "#5: more")]


def test_migrate_encrypted_data_with_the_applications_key(
    client: Any, dbs: tuple[str, str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("LANGGRAPH_AES_KEY", AES_KEY)
    source, target = dbs
    official = OfficialSaver(client, source, serde=EncryptedSerializer.from_pycryptodome_aes())
    chat_threads(official, 2)
    result = invoke(
        client, "migrate", "--from-official", "--source-db", source, "--db", target, "--verify"
    )
    assert result.exit_code == 0, result.output
    for name in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        for doc in client[target][name].find({}):
            assert b"again 1" not in repr(doc).encode()
    saver = MongoDBSaver(client, target, serde=EncryptedSerializer.from_pycryptodome_aes())
    latest = saver.get_tuple(thread("t1"))
    assert contents(latest.checkpoint["channel_values"]["messages"])[-1] == ("ai", "#3: again 1")


def test_migrate_refuses_what_it_cannot_do(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    result = invoke(client, "migrate", "--source-db", source, "--db", target)
    assert result.exit_code == 2 and "--from-official" in result.output
    same = invoke(client, "migrate", "--from-official", "--source-db", target, "--db", target)
    assert same.exit_code == 2 and "migrate into another database" in same.output
    bad = invoke(client, "migrate", "--from-official", "--source-collections", "only_one")
    assert bad.exit_code == 2 and "CHECKPOINTS,WRITES" in bad.output


def test_upgrade_keeps_a_current_database_and_refuses_a_pre_release_one(
    client: Any, db_name: str
) -> None:
    names = {"checkpoint_collection_name": "ck", "blobs_collection_name": "bl"}
    saver = MongoDBSaver(client, db_name, **names)
    graph = chat_builder().compile(checkpointer=saver)
    for text in ("one", "two"):
        graph.invoke({"messages": [HumanMessage(text)]}, thread("t"))
    command = ["upgrade", "--db", db_name, "--checkpoints", "ck", "--blobs", "bl"]
    try:
        result = invoke(client, *command, "--json")
        assert result.exit_code == 0, result.output
        current = SAVER_SCHEMA_VERSION
        assert json.loads(result.output) == {
            "command": "upgrade", "db": db_name, "status": "done", "before": current,
            "after": current,
        }
        again = invoke(client, *command)
        assert again.output.strip() == f"{db_name}: layout version {current} -> version {current}"
        # Data a development build recorded below the current version: refused, untouched.
        client[db_name][SCHEMA_COLLECTION].update_one(
            {"_id": saver_key("ck")}, {"$set": {"version": current - 1}}
        )
        before = {name: list(client[db_name][name].find()) for name in ("ck", "bl")}
        refused = invoke(client, *command)
        assert refused.exit_code == 1
        assert f"layout version {current - 1}, written by a development build" in refused.output
        assert read_version(client[db_name], saver_key("ck")) == current - 1
        assert {name: list(client[db_name][name].find()) for name in ("ck", "bl")} == before
    finally:
        client.drop_database(db_name)


def test_mismatches_are_listed_and_fail_the_command(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    chat_threads(OfficialSaver(client, source), 2)
    args = ["migrate", "--from-official", "--source-db", source, "--db", target]
    assert invoke(client, *args).exit_code == 0
    # The metadata of a slim checkpoint document is its plain copy alone.
    client[target]["checkpoints"].update_many(
        {"thread_id": "t1"}, {"$set": {"metadata": {"x": "[red]"}}}
    )
    checkpoints = client[target]["checkpoints"].find({"thread_id": "t0"}, sort=[("_id", 1)])
    client[target]["checkpoints"].delete_one({"_id": next(iter(checkpoints))["_id"]})
    result = invoke(client, *args, "--verify")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("mismatch")]
    assert any("thread 't0'" in line and "missing after migration" in line for line in lines)
    assert any("thread 't1'" in line and "metadata: source {" in line for line in lines)


def test_skipped_threads_are_listed_and_fail_the_command(client: Any, dbs: tuple[str, str]) -> None:
    source, target = dbs
    official = OfficialSaver(client, source)
    chat_threads(official, 3)
    # 8 MiB of metadata: valid for the official saver, stored twice (plain BSON would give
    # the int64 back as ``bson.Int64``) it is over 15 MiB.
    big = {**thread("t1-big"), "metadata": {"note": "x" * (8 * 2**20), "wide": 2**40}}
    chat_builder().compile(checkpointer=official).invoke({"messages": [HumanMessage("hi")]}, big)
    args = ["migrate", "--from-official", "--source-db", source, "--db", target, "--batch", "1"]
    result = invoke(client, *args, "--verify")
    assert result.exit_code == 3, result.output
    lines = result.output.splitlines()
    assert any("1 thread(s) not migrated" in line for line in lines)
    [skipped] = [line for line in lines if line.startswith("skipped")]
    assert "thread 't1-big'" in skipped and "15 MiB" in skipped
    assert not [line for line in lines if line.startswith("mismatch")]
    # Every other thread was migrated, and goes on.
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, target))
    assert graph.get_state(thread("t2")).values["messages"]
    assert not graph.get_state(thread("t1-big")).values
    # A rerun reports the same skip, in JSON too.
    again = invoke(client, *args, "--verify", "--json")
    assert again.exit_code == 3
    report = json.loads(again.output[again.output.index("{") :])
    for step in ("migrated", "verified"):
        assert [s["thread_id"] for s in report[step]["skipped"]] == ["t1-big"]
    assert report["migrated"]["threads"] == 3 and report["verified"]["mismatches"] == []
    usage = " ".join(invoke(client, "migrate", "--help").output.split())
    assert "3 when threads were skipped" in usage


def test_doctor_names_the_migration_for_official_data_and_fixes_nothing_there(
    client: Any, dbs: tuple[str, str]
) -> None:
    """``doctor`` on langgraph-checkpoint-mongodb's collections: a failure whose fix is the
    migration (as setup says), and ``--fix`` creates no index there."""
    source, _ = dbs
    chat_threads(OfficialSaver(client, source), 1)
    indexes = {name: client[source][name].index_information() for name in ("checkpoints",)}
    report = invoke(client, "doctor", "--db", source, "--fix", "--json")
    assert report.exit_code == 1, report.output
    findings = json.loads(report.output)["findings"]
    schema = next(f for f in findings if f["check"] == "schema version")
    assert schema["status"] == "fail" and "langgraph-checkpoint-mongodb" in schema["detail"]
    assert f"mongo-ckpt migrate --from-official --source-db {source}" in schema["fix"]
    assert {name: client[source][name].index_information() for name in indexes} == indexes
    assert "checkpoint_blobs" not in client[source].list_collection_names()


def test_doctor_fix_creates_no_index_on_a_pre_release_layout(client: Any, db_name: str) -> None:
    saver = MongoDBSaver(client, db_name)
    chat_builder().compile(checkpointer=saver).invoke({"messages": [HumanMessage("hi")]},
                                                      thread("t"))
    client[db_name]["checkpoint_writes"].drop_index("join")
    client[db_name][SCHEMA_COLLECTION].update_one({"_id": saver_key("checkpoints")},
                                                  {"$set": {"version": 3}})
    try:
        report = invoke(client, "doctor", "--db", db_name, "--fix")
        assert report.exit_code == 1
        assert "join" not in client[db_name]["checkpoint_writes"].index_information()
        after = invoke(client, "doctor", "--db", db_name)
        assert "version 3, a pre-release layout" in after.output
    finally:
        client.drop_database(db_name)


def test_upgrade_of_a_database_without_data_is_refused_unless_new(
    client: Any, db_name: str
) -> None:
    """``upgrade --db`` with a typo: exit 3 naming the databases with data, nothing created;
    ``--new-database`` sets it up."""
    MongoDBSaver(client, f"{db_name}_data").setup()
    try:
        typo = invoke(client, "upgrade", "--db", db_name)
        assert typo.exit_code == 3, typo.output
        assert f"{db_name}_data" in typo.output and "--new-database" in typo.output
        assert db_name not in client.list_database_names()
        new = invoke(client, "upgrade", "--db", db_name, "--new-database")
        assert new.exit_code == 0, new.output
        assert read_version(client[db_name], saver_key("checkpoints")) == SAVER_SCHEMA_VERSION
    finally:
        client.drop_database(db_name)
        client.drop_database(f"{db_name}_data")
