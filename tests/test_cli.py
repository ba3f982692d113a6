"""The ``mongo-ckpt`` inspection and maintenance commands, on data written by real graphs.

Each command runs through click's ``CliRunner`` on ``mock`` (a mongomock client handed in
through ``CliState``) and ``wire`` (the same, on PyMongo against the wire server); the
``--uri`` path is tested on ``wire``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import bson
import click
import pytest
from click.testing import CliRunner, Result
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from pymongo import MongoClient, monitoring

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.cli import CliState, cli, main
from mongo_ckpt.inspection import percentiles
from mongo_ckpt.layout import Layout, index_models
from mongo_ckpt.schema import SAVER_SCHEMA_VERSION, SCHEMA_COLLECTION, saver_key
from mongo_ckpt.snapshots import jsonable
from tests.backends import sync_client, wire_uri
from tests.cli_support import CHAT_TURNS, resume_booking, write_threads
from tests.delta_graphs import Shape
from tests.delta_graphs import builder as delta_builder
from tests.graphs import chat_builder, contents, thread

BACKENDS = ["mock", "wire"]
COLLECTIONS = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
AES_KEY = "0123456789abcdef" * 2


@dataclass
class Written:
    """A database holding the threads of ``write_threads``, and the graphs that wrote them."""

    backend: str
    client: Any
    db: str
    saver: MongoDBSaver
    graphs: dict[str, Any]

    def invoke(self, *args: str, input: str | None = None, env: dict | None = None) -> Result:
        return CliRunner().invoke(
            cli, [*args, "--db", self.db], obj=CliState(client=self.client), input=input, env=env
        )

    def json(self, *args: str) -> Any:
        result = self.invoke(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    def stored(self, thread_id: str, ns: str | None = None) -> tuple[int, int]:
        """Documents and BSON bytes of ``thread_id`` (in namespace ``ns``, if given) in the
        three collections, counted here."""
        query = {"thread_id": thread_id}
        if ns is not None:
            query["checkpoint_ns"] = ns
        docs = [doc for name in COLLECTIONS for doc in self.client[self.db][name].find(query)]
        return len(docs), sum(len(bson.encode(doc)) for doc in docs)

    def count(self, thread_id: str) -> int:
        return self.client[self.db]["checkpoints"].count_documents({"thread_id": thread_id})


def _written(backend: str) -> Iterator[Written]:
    client = sync_client(backend)
    db = f"t_cli_{uuid.uuid4().hex[:8]}"
    saver = MongoDBSaver(client, db)
    try:
        yield Written(backend, client, db, saver, write_threads(saver))
    finally:
        client.drop_database(db)
        client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def written(request: Any) -> Iterator[Written]:
    """Read-only data shared by a module's tests."""
    yield from _written(request.param)


@pytest.fixture(params=BACKENDS)
def fresh(request: Any) -> Iterator[Written]:
    """Data of its own, for the commands that change it."""
    yield from _written(request.param)


# -- threads ------------------------------------------------------------------------


def test_threads_lists_every_thread_with_what_it_stores(written: Written) -> None:
    page = written.json("threads", "--sort", "thread")
    assert page["total"] == 4
    rows = {row["thread_id"]: row for row in page["threads"]}
    assert [row["thread_id"] for row in page["threads"]] == sorted(rows)
    assert rows["chat-ada"]["checkpoints"] == 3 * len(CHAT_TURNS) == written.count("chat-ada")
    assert rows["article"]["namespaces"] == ["", "write"]
    assert rows["booking"]["namespaces"] == [""]
    for thread_id, row in rows.items():
        assert (row["documents"], row["bytes"]) == written.stored(thread_id)
        assert row["last_activity"]


def test_threads_sort_page_and_filter_by_metadata(written: Written) -> None:
    by_size = written.json("threads", "--sort", "size")["threads"]
    sizes = [row["bytes"] for row in by_size]
    assert sizes == sorted(sizes, reverse=True)
    assert by_size[0]["thread_id"] == "chat-ada"
    first = written.json("threads", "--sort", "size", "--limit", "3")
    second = written.json("threads", "--sort", "size", "--limit", "3", "--page", "2")
    assert [r["thread_id"] for r in first["threads"] + second["threads"]] == [
        r["thread_id"] for r in by_size
    ]
    assert first["total"] == second["total"] == 4
    by_activity = written.json("threads")["threads"]
    times = [row["last_activity"] for row in by_activity]
    assert times == sorted(times, reverse=True)
    ada = written.json("threads", "--filter", "user=ada")
    assert [r["thread_id"] for r in ada["threads"]] == ["chat-ada"]
    assert ada["total"] == 1
    steps = written.json("threads", "--filter", "source=input", "--filter", "step=-1")
    assert steps["total"] == 4


def test_threads_prints_a_table(written: Written) -> None:
    result = written.invoke("threads", "--sort", "checkpoints")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if "thread" in line and "checkpoints" in line)
    assert "stored" in header and "last activity" in header
    ada = next(line for line in lines if line.split()[:2] == ["chat-ada", "9"])
    assert "kB" in ada
    assert "'', write" in next(line for line in lines if line.split()[:1] == ["article"])
    assert "threads 1-4 of 4, sorted by checkpoints" in result.output


def test_threads_refuses_a_bad_filter(written: Written) -> None:
    result = written.invoke("threads", "--filter", "user")
    assert result.exit_code == 2
    assert "'user' is not KEY=VALUE" in result.output
    result = written.invoke("threads", "--filter", "$where=1")
    assert result.exit_code == 2
    assert "--filter" in result.output


# -- history, show, diff ------------------------------------------------------------


@pytest.mark.parametrize(("thread_id", "ns"), [("chat-ada", ""), ("booking", ""),
                                               ("article", ""), ("article", "write")])
def test_history_is_the_graphs_state_history(written: Written, thread_id: str, ns: str) -> None:
    rows = written.json("history", thread_id, "--ns", ns)["checkpoints"]
    graph = written.graphs[thread_id]
    config = thread(thread_id, checkpoint_ns=ns)
    if ns:  # a subgraph's history: through the saver (get_state_history is the parent's)
        tuples = list(written.saver.list(config))
        assert [r["checkpoint_id"] for r in rows] == [t.config["configurable"]["checkpoint_id"]
                                                      for t in tuples]
        assert [r["step"] for r in rows] == [t.metadata["step"] for t in tuples]
        return
    snapshots = list(graph.get_state_history(config))
    assert [r["checkpoint_id"] for r in rows] == [
        s.config["configurable"]["checkpoint_id"] for s in snapshots
    ]
    assert [r["step"] for r in rows] == [s.metadata["step"] for s in snapshots]
    assert [r["source"] for r in rows] == [s.metadata["source"] for s in snapshots]
    assert [r["next"] for r in rows] == [sorted(s.next) for s in snapshots]
    assert [r["parent_id"] for r in rows] == [
        (s.parent_config or {}).get("configurable", {}).get("checkpoint_id") for s in snapshots
    ]
    tuples = {t.config["configurable"]["checkpoint_id"]: t for t in written.saver.list(config)}
    assert [r["writes"] for r in rows] == [
        len(tuples[r["checkpoint_id"]].pending_writes) for r in rows
    ]
    assert all(r["bytes"] > 0 for r in rows)
    # Every byte of the namespace is counted once: the rows add up to what it stores.
    assert sum(r["bytes"] for r in rows) == written.stored(thread_id, ns)[1]


def test_history_prints_newest_first(written: Written) -> None:
    result = written.invoke("history", "booking")
    assert result.exit_code == 0, result.output
    assert "thread 'booking': 2 checkpoints" in result.output
    lines = [line.split() for line in result.output.splitlines() if line.strip()]
    body = [line for line in lines if len(line) >= 7 and line[1] in ("0", "-1")]
    assert [line[1:4] for line in body] == [["0", "loop", "ask"], ["-1", "input", "__start__"]]
    article = written.invoke("history", "article").output
    assert "namespace" in article and " write " in article


def test_show_prints_the_state_the_graph_has(written: Written) -> None:
    shown = written.json("show", "chat-ada")
    state = written.graphs["chat-ada"].get_state(thread("chat-ada"))
    assert shown["checkpoint_id"] == state.config["configurable"]["checkpoint_id"]
    assert shown["values"] == jsonable(state.values)
    assert [(m["type"], m["content"]) for m in shown["values"]["messages"]] == contents(
        state.values["messages"]
    )
    assert shown["metadata"]["user"] == "ada"
    assert shown["next"] == []
    human = written.invoke("show", "chat-ada").output
    conversation = [line for line in human.splitlines() if line.startswith(("human>", "ai>"))]
    assert conversation == [f"{m.type}> {m.content}" for m in state.values["messages"]]
    assert "branch:to:bot" not in human


def test_show_an_interrupted_thread(written: Written) -> None:
    shown = written.json("show", "booking")
    assert shown["next"] == ["ask"]
    assert shown["values"] == {"request": "table for two"}
    (write,) = shown["pending_writes"]
    assert write["channel"] == "__interrupt__"
    assert "table for two" in json.dumps(write["value"])
    human = written.invoke("show", "booking").output
    assert "next ask" in human and "__interrupt__" in human
    internal = written.json("show", "booking", "--internal")
    assert "branch:to:ask" in internal["values"]


def test_show_an_earlier_checkpoint_one_channel_and_a_subgraph(written: Written) -> None:
    snapshots = list(written.graphs["chat-ada"].get_state_history(thread("chat-ada")))
    older = snapshots[3]
    shown = written.json(
        "show", "chat-ada", "--checkpoint", older.config["configurable"]["checkpoint_id"],
        "--channel", "messages",
    )
    assert shown["values"] == jsonable({"messages": older.values["messages"]})
    assert shown["metadata"]["step"] == older.metadata["step"]
    inner = written.json("show", "article", "--ns", "write")
    assert inner["values"] == {"topic": "tea", "draft": "outline of tea, polished"}


def test_show_says_what_is_wrong(written: Written) -> None:
    missing = written.invoke("show", "no-such-thread")
    assert missing.exit_code == 3
    assert "thread 'no-such-thread' (namespace '') has no checkpoint" in missing.output
    assert "see `mongo-ckpt history no-such-thread`" in missing.output
    unknown = written.invoke("show", "chat-ada", "--checkpoint", "nope")
    assert unknown.exit_code == 3
    assert "thread 'chat-ada' (namespace '') has no checkpoint 'nope'" in unknown.output
    channel = written.invoke("show", "chat-ada", "--channel", "nope")
    assert channel.exit_code == 2
    assert "no channel 'nope'; this checkpoint has" in channel.output
    assert "'messages'" in channel.output


def test_diff_lists_what_changed_channel_by_channel(written: Written) -> None:
    snapshots = list(written.graphs["chat-ada"].get_state_history(thread("chat-ada")))
    newest, before_last_turn = snapshots[0], snapshots[3]
    ids = [s.config["configurable"]["checkpoint_id"] for s in (before_last_turn, newest)]
    (change,) = written.json("diff", "chat-ada", *ids)["changes"]
    added = newest.values["messages"][len(before_last_turn.values["messages"]) :]
    assert change["channel"] == "messages" and change["status"] == "appended"
    assert change["appended"] == jsonable(added)
    human = written.invoke("diff", "chat-ada", *ids).output
    assert f"{ids[0]} -> {ids[1]}, 1 differing" in human
    assert "messages: appended" in human
    assert [line for line in human.splitlines() if line.startswith("+ ")] == [
        f"+ {m.type}> {m.content}" for m in added
    ]
    same = written.json("diff", "chat-ada", ids[1], ids[1], "--all")["changes"]
    assert {c["status"] for c in same} == {"unchanged"}
    booking = [
        s.config["configurable"]["checkpoint_id"]
        for s in written.graphs["booking"].get_state_history(thread("booking"))
    ]
    added_request = written.json("diff", "booking", booking[1], booking[0])["changes"]
    assert {c["channel"]: c["status"] for c in added_request} == {
        "request": "added", "branch:to:ask": "added", "__start__": "removed"
    }


# -- stats ----------------------------------------------------------------------


def test_stats_reports_collections_and_the_spread_over_threads(
    written: Written, tmp_path: Path
) -> None:
    plot = tmp_path / "sizes.png"
    stats = written.json("stats", "--top", "2", "--plot", str(plot))
    db = written.client[written.db]
    per_thread = {t: written.stored(t)[1] for t in ("chat-ada", "chat-bob", "booking", "article")}
    for name in COLLECTIONS:
        entry = stats["collections"][name]
        assert entry["documents"] == db[name].count_documents({})
        assert entry["data_bytes"] == sum(len(bson.encode(d)) for d in db[name].find())
        assert set(entry["indexes"]) == set(db[name].index_information())
        if written.backend == "wire":  # the server reports storage and index sizes
            assert entry["index_bytes"] > 0
    assert stats["threads"] == 4
    assert stats["thread_bytes"] == percentiles(per_thread.values())
    assert stats["thread_bytes"]["max"] == per_thread["chat-ada"]
    assert stats["largest_threads"] == [
        {"thread_id": t, "bytes": b}
        for t, b in sorted(per_thread.items(), key=lambda item: -item[1])[:2]
    ]
    largest = stats["largest_documents"]
    assert len(largest) == 2 and largest[0]["bytes"] >= largest[1]["bytes"]
    biggest = max(
        (len(bson.encode(d)), name) for name in COLLECTIONS for d in db[name].find()
    )
    assert (largest[0]["bytes"], largest[0]["collection"]) == biggest
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    human = written.invoke("stats").output
    assert "4 threads; stored bytes per thread: p50 " in human
    assert "largest threads" in human and "largest documents" in human
    assert "schema version:" in human


def test_stats_plot_needs_matplotlib(written: Written, monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    result = written.invoke("stats", "--plot", str(tmp_path / "x.png"))
    assert result.exit_code == 1
    assert "needs matplotlib: pip install matplotlib" in result.output
    assert not (tmp_path / "x.png").exists()


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles([]) == {}
    assert percentiles(range(1, 101)) == {"p50": 50, "p90": 90, "p99": 99, "max": 100}
    assert percentiles([7]) == {"p50": 7, "p90": 7, "p99": 7, "max": 7}


# -- doctor -----------------------------------------------------------------------


def test_doctor_finds_nothing_wrong_with_a_fresh_saver(written: Written) -> None:
    report = written.json("doctor")
    assert report["ok"] is True
    checks = {f["check"]: f for f in report["findings"]}
    assert {c for c in checks if c.startswith("index ")} == {
        f"index {collection}.{model.document['name']}"
        for collection, models in index_models(Layout()).items()
        for model in models
    }
    assert checks["write access"]["status"] == "ok"
    assert checks["TTL"]["status"] == "ok"
    assert "schema version" in checks
    if written.backend == "wire":
        assert checks["server version"]["detail"].startswith("MongoDB 8.")
        assert checks["topology"]["status"] == "ok"
    else:  # mongomock reports neither
        assert checks["server version"]["status"] == "warn"
    assert "no problems found" in written.invoke("doctor").output


def test_doctor_reports_each_problem_with_its_fix(fresh: Written) -> None:
    db = fresh.client[fresh.db]
    db["checkpoint_blobs"].drop_index("join")
    db["checkpoints"].drop_index("activity")
    db["checkpoints"].create_index([("thread_id", 1), ("created_at", 1)], name="mine")
    db["checkpoint_writes"].create_index("created_at", expireAfterSeconds=3600)
    result = fresh.invoke("doctor", "--json")
    assert result.exit_code == 1
    findings = {f["check"]: f for f in json.loads(result.output)["findings"]}
    assert findings["index checkpoint_blobs.join"]["detail"] == "missing"
    assert "doctor --fix" in findings["index checkpoint_blobs.join"]["fix"]
    assert findings["index checkpoints.activity"]["detail"] == "its keys are indexed as 'mine'"
    assert "dropIndex('mine')" in findings["index checkpoints.activity"]["fix"]
    ttl = findings["TTL checkpoint_writes.created_at_1"]
    assert ttl["status"] == "fail" and "MongoDBSaver(ttl=" in ttl["fix"]
    human = fresh.invoke("doctor")
    assert human.exit_code == 1
    assert "FAIL index checkpoint_blobs.join: run `mongo-ckpt doctor --fix`" in human.output
    db["checkpoints"].drop_index("mine")
    db["checkpoint_writes"].drop_index("created_at_1")
    fixed = fresh.invoke("doctor", "--fix", "--json")
    assert fixed.exit_code == 0, fixed.output
    assert "join" in db["checkpoint_blobs"].index_information()


# -- delete, copy, prune ------------------------------------------------------------


def test_delete_asks_first_and_dry_run_changes_nothing(fresh: Written) -> None:
    before = fresh.stored("chat-bob")
    dry = fresh.json("delete", "chat-bob", "--dry-run")
    assert dry["dry_run"] is True
    assert dry["documents"] == {"checkpoints": 3, "values": 4, "writes": 3, "settings": 0}
    assert sum(dry["documents"].values()) == before[0]
    refused = fresh.invoke("delete", "chat-bob", input="n\n")
    assert refused.exit_code == 1 and "Delete 1 threads (3 checkpoints)?" in refused.output
    assert fresh.stored("chat-bob") == before
    done = fresh.invoke("delete", "chat-bob", "chat-ada", input="y\n")
    assert done.exit_code == 0, done.output
    assert fresh.stored("chat-bob") == fresh.stored("chat-ada") == (0, 0)
    assert fresh.graphs["chat-bob"].get_state(thread("chat-bob")).values == {}
    assert fresh.count("booking") == 2


def test_delete_selects_idle_threads(fresh: Written) -> None:
    none = fresh.invoke("delete", "--idle-days", "1", "--dry-run", "--json")
    assert none.exit_code == 3, none.output
    assert json.loads(none.output)["threads"] == []
    assert json.loads(none.output)["status"] == "nothing matched"
    old = datetime.now(timezone.utc) - timedelta(days=3)
    fresh.client[fresh.db]["checkpoints"].update_many(
        {"thread_id": {"$in": ["booking", "article"]}}, {"$set": {"created_at": old}}
    )
    report = fresh.json("delete", "--idle-days", "2", "--yes")
    assert report["threads"] == ["article", "booking"]
    assert fresh.count("article") == fresh.count("booking") == 0
    assert fresh.count("chat-ada") == 9
    both = fresh.invoke("delete", "chat-ada", "--idle-days", "2")
    assert both.exit_code == 2 and "not both" in both.output


def test_delete_idle_spares_a_thread_active_since_the_selection(
    fresh: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = datetime.now(timezone.utc) - timedelta(days=3)
    checkpoints = fresh.client[fresh.db]["checkpoints"]
    checkpoints.update_many(
        {"thread_id": {"$in": ["booking", "article"]}}, {"$set": {"created_at": old}}
    )
    article = {
        name: fresh.client[fresh.db][name].count_documents({"thread_id": "article"})
        for name in COLLECTIONS
    }
    booking = fresh.count("booking")

    def resumed_while_asking(*args: Any, **kwargs: Any) -> bool:
        resume_booking(fresh.graphs["booking"])  # the user comes back during the prompt
        return True

    monkeypatch.setattr(click, "confirm", resumed_while_asking)
    report = fresh.json("delete", "--idle-days", "2")
    assert report["threads"] == ["article"] and report["spared"] == ["booking"]
    assert report["documents"] == {
        "checkpoints": article["checkpoints"],
        "values": article["checkpoint_blobs"],
        "writes": article["checkpoint_writes"],
        "settings": 0,
    }
    assert fresh.count("article") == 0
    assert fresh.count("booking") > booking  # its history whole, and the resumed run
    state = fresh.graphs["booking"].get_state(thread("booking")).values
    assert state["outcome"] == "booked"
    human = fresh.invoke("delete", "--idle-days", "2", "--yes")
    assert human.exit_code == 3, human.output
    assert "delete: 0 threads" in human.output and "no thread is idle that long" in human.output


def test_delete_reports_what_it_deleted(fresh: Written, monkeypatch: pytest.MonkeyPatch) -> None:
    before = fresh.stored("chat-bob")[0]

    def written_while_asking(*args: Any, **kwargs: Any) -> bool:
        fresh.graphs["chat-bob"].invoke(
            {"messages": [HumanMessage("Still there?")]}, thread("chat-bob")
        )
        return True

    monkeypatch.setattr(click, "confirm", written_while_asking)
    report = fresh.json("delete", "chat-bob")
    assert sum(report["documents"].values()) > before  # the turn written during the prompt too
    assert fresh.stored("chat-bob") == (0, 0)


def test_copy_refuses_a_target_with_checkpoints(fresh: Written) -> None:
    before = {t: fresh.stored(t) for t in ("chat-ada", "chat-bob")}
    for args in (("--yes",), ("--dry-run",)):
        result = fresh.invoke("copy", "chat-ada", "chat-bob", *args)
        assert result.exit_code == 1, result.output
        assert "Error: thread 'chat-bob' already has checkpoints" in result.output
        assert "delete it first" in result.output and "Traceback" not in result.output
    assert {t: fresh.stored(t) for t in before} == before


def test_copy_makes_a_thread_the_graph_can_continue(fresh: Written) -> None:
    assert fresh.json("copy", "chat-ada", "chat-eve", "--dry-run")["documents"]["checkpoints"] == 9
    assert fresh.count("chat-eve") == 0
    result = fresh.invoke("copy", "chat-ada", "chat-eve", "--yes")
    assert result.exit_code == 0, result.output
    graph = fresh.graphs["chat-ada"]
    source = graph.get_state(thread("chat-ada")).values
    assert graph.get_state(thread("chat-eve")).values == source
    graph.invoke({"messages": [HumanMessage("And now?")]}, thread("chat-eve"))
    assert len(graph.get_state(thread("chat-eve")).values["messages"]) == 8
    assert graph.get_state(thread("chat-ada")).values == source
    missing = fresh.invoke("copy", "nobody", "x", "--yes")
    assert missing.exit_code == 3 and "thread 'nobody' has no checkpoints" in missing.output
    same = fresh.invoke("copy", "a", "a", "--yes")
    assert same.exit_code == 2


def test_prune_keeps_the_latest_state(fresh: Written) -> None:
    graph = fresh.graphs["chat-ada"]
    state = graph.get_state(thread("chat-ada")).values
    dry = fresh.json("prune", "chat-ada", "article", "--dry-run")
    assert dry["pruned_per_thread"] == {"chat-ada": 8, "article": 5}
    assert fresh.count("chat-ada") == 9
    result = fresh.invoke("prune", "chat-ada", "article", input="y\n")
    assert result.exit_code == 0, result.output
    assert "Delete 13 of 16 checkpoints?" in result.output
    assert fresh.count("chat-ada") == 1 and fresh.count("article") == 2
    assert graph.get_state(thread("chat-ada")).values == state
    resume_booking(fresh.graphs["booking"])  # other threads are untouched
    assert fresh.graphs["booking"].get_state(thread("booking")).values["outcome"] == "booked"


# -- encryption, connecting by URI ------------------------------------------------


def test_show_decrypts_with_the_key_from_the_environment(fresh: Written) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())
    graph = chat_builder().compile(checkpointer=MongoDBSaver(fresh.client, fresh.db, serde=serde))
    graph.invoke({"messages": [HumanMessage("secret tea")]}, thread("vault"))
    locked = fresh.invoke("show", "vault", env={"LANGGRAPH_AES_KEY": None})
    assert locked.exit_code == 1
    assert "the data is encrypted; set LANGGRAPH_AES_KEY" in locked.output
    opened = fresh.invoke("show", "vault", "--json", env={"LANGGRAPH_AES_KEY": AES_KEY})
    assert opened.exit_code == 0, opened.output
    messages = json.loads(opened.output)["values"]["messages"]
    assert [m["content"] for m in messages] == ["secret tea", "#1: secret tea"]
    wrong = fresh.invoke("show", "vault", env={"LANGGRAPH_AES_KEY": "short"})
    assert wrong.exit_code == 2 and "LANGGRAPH_AES_KEY is set but cannot be used" in wrong.output


def test_commands_connect_to_the_uri(capsys: Any, monkeypatch: Any) -> None:
    uri = wire_uri()
    uri += ("&" if "?" in uri else "?") + "directConnection=true"
    client = sync_client("wire")
    db = f"t_cli_{uuid.uuid4().hex[:8]}"
    try:
        write_threads(MongoDBSaver(client, db))
        assert main(["threads", "--uri", uri, "--db", db, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["total"] == 4
        monkeypatch.setenv("MONGODB_URI", uri)
        assert main(["history", "chat-bob", "--db", db, "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)["checkpoints"]) == 3
        monkeypatch.delenv("MONGODB_URI")
        assert main(["stats", "--db", db]) == 2
        assert "pass --uri or set MONGODB_URI" in capsys.readouterr().err
        nowhere = "mongodb://127.0.0.1:9/?timeoutMS=300"
        assert main(["threads", "--uri", nowhere]) == 1
        assert f"cannot reach MongoDB at {nowhere}" in capsys.readouterr().err
    finally:
        client.drop_database(db)
        client.close()


def test_history_and_show_on_a_delta_channel_thread(fresh: Written) -> None:
    shape = Shape(snapshot_frequency=3, writers=2, subgraph=False, durability="sync")
    graph = delta_builder(shape, delta=True).compile(checkpointer=fresh.saver)
    for turn in range(2):
        graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, thread("delta"))
    snapshots = list(graph.get_state_history(thread("delta")))
    rows = fresh.json("history", "delta")["checkpoints"]
    assert [r["next"] for r in rows] == [sorted(s.next) for s in snapshots]
    kinds: dict[str, str] = {}
    for snapshot in snapshots:
        checkpoint_id = snapshot.config["configurable"]["checkpoint_id"]
        shown = fresh.json("show", "delta", "--checkpoint", checkpoint_id)
        if "messages" in shown["values"]:  # stored at this checkpoint: the whole value
            assert shown["values"]["messages"] == jsonable(snapshot.values["messages"])
            kinds[checkpoint_id] = "stored"
        elif shown["rebuilt_from_history"] == ["messages"]:
            kinds[checkpoint_id] = "rebuilt"
            human = fresh.invoke("show", "delta", "--checkpoint", checkpoint_id).output
            assert "(DeltaChannel: not stored at this checkpoint" in human
    assert set(kinds.values()) == {"stored", "rebuilt"}
    stored = [c for c, kind in kinds.items() if kind == "stored"]
    rebuilt = next(c for c, kind in kinds.items() if kind == "rebuilt")
    (change,) = fresh.json("diff", "delta", stored[-1], stored[0])["changes"]
    assert (change["channel"], change["status"]) == ("messages", "appended")
    changes = fresh.json("diff", "delta", stored[0], rebuilt)["changes"]
    statuses = {d["channel"]: d["status"] for d in changes}
    assert statuses["messages"] == "not compared"


class _Commands(monitoring.CommandListener):
    """Names of the commands a client sends, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_threads_and_stats_round_trips_do_not_grow_with_the_data() -> None:
    """On a server with ``$bsonSize`` the threads page is eight commands however many
    threads there are: the look for the collections, the layout version, the size probe,
    one grouping of checkpoints, one per collection."""
    listener = _Commands()
    client = MongoClient(
        wire_uri(), directConnection=True, event_listeners=[listener]
    )
    db = f"t_cli_{uuid.uuid4().hex[:8]}"
    written = Written("wire", client, db, MongoDBSaver(client, db), {})
    try:
        sent = []
        for turns in (1, 4):
            graph = chat_builder().compile(checkpointer=written.saver)
            for n in range(turns * 3):
                graph.invoke({"messages": [HumanMessage("hi")]}, thread(f"t-{turns}-{n}"))
            listener.names.clear()
            page = written.json("threads", "--sort", "size", "--limit", "2")
            sent.append(list(listener.names))
            assert len(page["threads"]) == 2
        assert sent[0] == sent[1] == ["listCollections", "find"] + ["aggregate"] * 6
        assert page["total"] == 15
    finally:
        client.drop_database(db)
        client.close()


def test_doctor_and_stats_check_the_recorded_layout_version(fresh: Written) -> None:
    versions = fresh.client[fresh.db][SCHEMA_COLLECTION]
    key = {"_id": saver_key("checkpoints")}

    def schema() -> dict[str, Any]:
        report = json.loads(fresh.invoke("doctor", "--json").output)
        return next(f for f in report["findings"] if f["check"] == "schema version")

    assert schema()["detail"] == f"version {SAVER_SCHEMA_VERSION} (current)"
    assert fresh.json("stats")["schema"]["status"] == "ok"
    versions.update_one(key, {"$set": {"version": SAVER_SCHEMA_VERSION + 1}})
    newer = fresh.invoke("doctor")
    assert newer.exit_code == 1
    assert "upgrade mongo-ckpt to a newer release" in newer.output
    for pre_release in (5, 1):
        versions.update_one(key, {"$set": {"version": pre_release}})
        older = schema()
        assert older["status"] == "fail"
        assert older["detail"] == (
            f"version {pre_release}, a pre-release layout (current: {SAVER_SCHEMA_VERSION})"
        )
        assert "set up on a new database" in older["fix"]
        assert fresh.invoke("doctor").exit_code == 1
    versions.delete_one(key)
    unrecorded = schema()
    assert unrecorded["status"] == "fail" and "earlier mongo-ckpt" in unrecorded["detail"]
