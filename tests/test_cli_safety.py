"""What the ``mongo-ckpt`` commands print is safe: stored strings cannot style, move or
reorder the terminal's output; credentials in ``--uri`` never appear; an invalid argument
or encrypted data without the key is a message (no traceback) and changes nothing.

On ``mock`` and ``wire`` (``client`` fixture); the ``--uri`` paths connect to no server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner, Result
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.cli import cli, main
from mongo_ckpt.cli.output import visible
from mongo_ckpt.clock import CLOCK_ID
from mongo_ckpt.redaction import redacted
from tests.cli_support import invoke
from tests.graphs import chat_builder, thread

# Markup that closes nothing (rich's MarkupError), markup that would style, CSI and OSC
# sequences, NUL, a C1 CSI, a right-to-left override and an isolate.
HOSTILE = "[/]x[bold red]SPOOF[/bold red]\x1b[2J\x1b]0;pwned\x07\x00nul\x9b\u202eevil\u2066"
THREAD = f"t{HOSTILE}"
OTHER = "plain-thread"
NS = f"ns{HOSTILE}"
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
AES_KEY = "0123456789abcdef" * 2


def write_hostile(saver: MongoDBSaver) -> list[str]:
    """Threads THREAD (root graph: a hostile message and metadata) and namespace NS of it;
    returns THREAD's root checkpoint ids, oldest first."""
    graph = chat_builder().compile(checkpointer=saver)
    for text in (HOSTILE, f"again {HOSTILE}"):
        graph.invoke({"messages": [HumanMessage(text)]}, thread(THREAD, note=HOSTILE))
    graph.invoke({"messages": [HumanMessage("hi")]}, thread(OTHER))
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {HOSTILE: [HumanMessage(HOSTILE)]}
    checkpoint["channel_versions"] = {HOSTILE: saver.get_next_version(None, None)}
    config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": NS}}
    saver.put(config, checkpoint, {"source": HOSTILE, "step": 0}, checkpoint["channel_versions"])
    return checkpoint_ids(graph, THREAD)[::-1]


def checkpoint_ids(graph: Any, thread_id: str) -> list[str]:
    """The root checkpoint ids of ``thread_id``, newest first."""
    return [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(
        thread(thread_id)
    )]


def database(client: Any, db: str) -> dict[str, list[Any]]:
    """Every document of ``db``, by collection: to show that a command changed nothing
    (but the server-clock document, which reading the server's time sets)."""
    return {
        name: sorted(map(repr, client[db][name].find({"_id": {"$ne": CLOCK_ID}})))
        for name in sorted(client[db].list_collection_names())
    }


@pytest.fixture
def hostile(client: Any, db_name: str) -> Iterator[tuple[str, list[str]]]:
    ids = write_hostile(MongoDBSaver(client, db_name))
    # Idle for a year, for --idle-days.
    idle = {"$set": {"created_at": datetime.now(timezone.utc) - timedelta(days=365)}}
    client[db_name]["checkpoints"].update_many({}, idle)
    yield db_name, ids
    client.drop_database(db_name)


def commands(db: str, ids: list[str]) -> dict[str, list[str]]:
    """Every data command, printing for people, on the hostile data."""
    first, last = ids[0], ids[-1]
    target = ["--db", db]
    return {
        "threads": ["threads", *target],
        "history": ["history", THREAD, *target],
        "history --ns": ["history", THREAD, "--ns", NS, *target],
        "show": ["show", THREAD, *target],
        "show --internal": ["show", THREAD, "--internal", "--checkpoint", ids[1], *target],
        "show --ns": ["show", THREAD, "--ns", NS, *target],
        "diff": ["diff", THREAD, first, last, "--all", *target],
        "stats": ["stats", *target],
        "doctor": ["doctor", *target],
        "delete": ["delete", THREAD, "--dry-run", *target],
        "copy": ["copy", THREAD, f"copy{HOSTILE}", "--dry-run", *target],
        "prune": ["prune", THREAD, "--dry-run", *target],
        "prune --idle-days": ["prune", "--idle-days", "30", "--dry-run", *target],
    }


def test_stored_strings_are_printed_literally_and_visibly(
    client: Any, hostile: tuple[str, list[str]]
) -> None:
    db, ids = hostile
    before = database(client, db)
    shown = visible(HOSTILE)
    for name, args in commands(db, ids).items():
        result = invoke(client, *args)
        assert result.exit_code in (0, 1), (name, result.output)  # doctor: 1 on mongomock
        assert result.exception is None or isinstance(result.exception, SystemExit), name
        assert not UNSAFE.findall(result.output), (name, UNSAFE.findall(result.output))
        if name not in ("stats", "doctor", "delete"):  # these name no stored string
            flat = result.output.replace("\n", "")
            assert "[bold red]SPOOF[/bold red]" in flat or shown[:20] in flat, (name, flat)
            assert "\\x1b" in flat and "\\u202e" in flat, (name, result.output)
        # --json is JSON-escaped (every control character as \\u....), unchanged
        as_json = invoke(client, *args, "--json")
        assert not UNSAFE.findall(as_json.output), name
    assert database(client, db) == before


def test_show_prints_hostile_messages_as_text(client: Any, hostile: tuple[str, list[str]]) -> None:
    db, _ = hostile
    result = invoke(client, "show", THREAD, "--db", db)
    assert result.exit_code == 0, result.output
    assert f"human> {visible(HOSTILE)}" in result.output
    assert f"thread {THREAD!r}" in result.output
    assert "note" not in result.output  # metadata is not printed by show, only its step


def test_migrate_prints_mismatches_literally(client: Any, db_name: str) -> None:
    official_saver = pytest.importorskip("langgraph.checkpoint.mongodb").MongoDBSaver
    source = f"{db_name}_src"
    graph = chat_builder().compile(checkpointer=official_saver(client, source))
    graph.invoke({"messages": [HumanMessage(HOSTILE)]}, thread(THREAD))
    try:
        args = ["migrate", "--from-official", "--source-db", source, "--db", db_name]
        assert invoke(client, *args).exit_code == 0
        client[db_name]["checkpoints"].delete_one({"thread_id": THREAD})
        result = invoke(client, *args, "--verify")  # the marker: nothing migrated again
        assert result.exit_code == 1, result.output
        assert "mismatch" in result.output and "missing after migration" in result.output
        assert not UNSAFE.findall(result.output)
        assert "\\x1b" in result.output.replace("\n", "")
    finally:
        client.drop_database(source)
        client.drop_database(db_name)


# -- credentials ----------------------------------------------------------------------

PASSWORD, TOKEN, KEY_PASSWORD = "s3cr3t-pw", "t0ken-xyz", "k3y-pw"
UNREACHABLE = (
    f"mongodb://admin:{PASSWORD}@127.0.0.1:9/?timeoutMS=200&authSource=admin"
    f"&tlsCertificateKeyFilePassword={KEY_PASSWORD}"
)
URIS = {
    "unreachable": UNREACHABLE,
    "aws token": f"mongodb://AKIA:{PASSWORD}@127.0.0.1:9/?timeoutMS=200&authMechanism="
    f"MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:{TOKEN}",
    "invalid port": f"mongodb://admin:{PASSWORD}@127.0.0.1:notaport/",
    "invalid host list": f"mongodb://admin:{PASSWORD}@a:9,b:9/?directConnection=true",
    "raw @ and /": f"mongodb://admin:{PASSWORD}/@x@127.0.0.1:9/",
}
URI_COMMANDS = {
    "threads": ["threads"], "history": ["history", "t"], "show": ["show", "t"],
    "diff": ["diff", "t", "a", "b"], "stats": ["stats"], "doctor": ["doctor"],
    "delete": ["delete", "t", "--yes"], "copy": ["copy", "t", "u", "--yes"],
    "prune": ["prune", "t", "--yes"], "migrate": ["migrate", "--from-official"],
    "upgrade": ["upgrade"],
}


@pytest.mark.parametrize("uri", list(URIS.values()), ids=list(URIS))
def test_no_command_prints_the_credentials_of_its_uri(uri: str) -> None:
    for name, args in URI_COMMANDS.items():
        result = CliRunner().invoke(cli, [*args, "--uri", uri, "--db", "nowhere"])
        assert result.exit_code in (1, 2), (name, result.output, result.exception)
        assert isinstance(result.exception, SystemExit), (name, result.exception)
        assert "Traceback" not in result.output
        for secret in (PASSWORD, TOKEN, KEY_PASSWORD):
            assert secret not in result.output, (name, result.output)
        assert "Error" in result.output, (name, result.output)
        # The driver's own words only: no timeouts, no topology description.
        assert "Topology" not in result.output and "configured timeouts" not in result.output


def test_the_demo_names_an_unreachable_server_without_credentials(capsys: Any) -> None:
    assert main(["demo", "--uri", UNREACHABLE, "--db", "nowhere"]) == 2
    output = capsys.readouterr().err
    assert "could not reach MongoDB at mongodb://admin:***@127.0.0.1:9" in output
    assert PASSWORD not in output and KEY_PASSWORD not in output


def test_redaction_of_uris_in_any_text() -> None:
    text = f"failed: {URIS['aws token']}, then {UNREACHABLE!r}"
    assert redacted(text) == (
        "failed: mongodb://AKIA:***@127.0.0.1:9/?timeoutMS=200&authMechanism=MONGODB-AWS"
        "&authMechanismProperties=AWS_SESSION_TOKEN:***, then 'mongodb://admin:***@127.0.0.1:9/"
        "?timeoutMS=200&authSource=admin&tlsCertificateKeyFilePassword=***'"
    )
    # the secrets of a known URI go wherever they appear, even outside a URI
    assert redacted(f"user admin, password {PASSWORD}", UNREACHABLE) == "user admin, password ***"
    assert redacted("mongodb://host:1/db?appName=a@b") == "mongodb://host:1/db?appName=a@b"


# -- invalid arguments and encrypted data -------------------------------------------

BAD_TARGETS = {
    "--db ''": ["--db", ""],
    "--db 'a b'": ["--db", "a b"],
    "--db a/b": ["--db", "a/b"],
    "--db a.b": ["--db", "a.b"],
    "--db NUL": ["--db", "a\x00"],
    "--db 64 bytes": ["--db", "d" * 64],
    "--checkpoints ''": ["--checkpoints", ""],
    "--blobs $": ["--blobs", "a$b"],
    "--writes system.": ["--writes", "system.writes"],
    "--writes NUL": ["--writes", "w\x00"],
}
BAD_ARGUMENTS = {
    "threads --limit -1": ["threads", "--limit", "-1"],
    "threads --page 0": ["threads", "--page", "0"],
    "threads --sort nope": ["threads", "--sort", "nope"],
    "threads --filter x": ["threads", "--filter", "x"],
    "stats --top -1": ["stats", "--top", "-1"],
    "stats --plot into a missing directory": ["stats", "--plot", "/nonexistent/dir/x.png"],
    "delete --idle-days nan": ["delete", "--idle-days", "nan", "--yes"],
    "delete --idle-days inf": ["delete", "--idle-days", "inf", "--yes"],
    "delete --idle-days -inf": ["delete", "--idle-days", "-inf", "--yes"],
    "delete --idle-days -1": ["delete", "--idle-days", "-1", "--yes"],
    "delete --idle-days 0": ["delete", "--idle-days", "0", "--yes"],
    "delete --idle-days x": ["delete", "--idle-days", "x", "--yes"],
    "delete no threads": ["delete", "--yes"],
    "prune --idle-days nan": ["prune", "--idle-days", "nan", "--yes"],
    "prune --idle-days 1e400": ["prune", "--idle-days", "1e400", "--yes"],
    "copy a a": ["copy", OTHER, OTHER, "--yes"],
    "show --channel none": ["show", OTHER, "--channel", "none"],
    "show --channel ''": ["show", OTHER, "--channel", ""],
    "migrate": ["migrate"],
    "migrate --batch 0": ["migrate", "--from-official", "--batch", "0"],
    "migrate --source-db ''": ["migrate", "--from-official", "--source-db", ""],
    "migrate --source-db a.b": ["migrate", "--from-official", "--source-db", "a.b"],
    "migrate --source-collections ,": ["migrate", "--from-official", "--source-collections", ","],
    "migrate --source-collections a$,b": [
        "migrate", "--from-official", "--source-collections", "a$,b"
    ],
}
TARGETED = ("threads", "history", "show", "diff", "stats", "doctor", "delete", "copy", "prune",
            "migrate", "upgrade")
TARGET_ARGS = {"history": [OTHER], "show": [OTHER], "diff": [OTHER, "a", "b"],
               "delete": [OTHER, "--yes"], "copy": [OTHER, "u", "--yes"], "prune": [OTHER, "--yes"],
               "migrate": ["--from-official"]}


def _usage_error(result: Result) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Error" in result.output and "Traceback" not in result.output


def test_every_invalid_argument_is_a_usage_error_that_writes_nothing(
    client: Any, db_name: str
) -> None:
    saver = MongoDBSaver(client, db_name)
    chat_builder().compile(checkpointer=saver).invoke({"messages": [HumanMessage("hi")]},
                                                      thread(OTHER))
    try:
        names = sorted(client.list_database_names())
        before = database(client, db_name)
        tried = 0
        for args in BAD_ARGUMENTS.values():
            _usage_error(invoke(client, *args, "--db", db_name))
            tried += 1
        for command in TARGETED:
            for name, bad in BAD_TARGETS.items():
                args = [command, *TARGET_ARGS.get(command, []), *bad]
                if "--db" not in bad:
                    args += ["--db", db_name]
                result = invoke(client, *args)
                _usage_error(result)
                assert name.split()[0] in result.output, (command, name, result.output)
                tried += 1
        assert tried == len(BAD_ARGUMENTS) + len(TARGETED) * len(BAD_TARGETS)
        assert database(client, db_name) == before
        assert sorted(client.list_database_names()) == names
    finally:
        client.drop_database(db_name)


def test_encrypted_data_without_the_key_is_explained_by_every_command(
    client: Any, db_name: str
) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY.encode())
    saver = MongoDBSaver(client, db_name, serde=serde)
    graph = chat_builder().compile(checkpointer=saver)
    for text in ("secret tea", "more"):
        graph.invoke({"messages": [HumanMessage(text)]}, thread("vault"))
    ids = checkpoint_ids(graph, "vault")
    reading = {
        "history": ["history", "vault"],
        "show": ["show", "vault"],
        "diff": ["diff", "vault", ids[-1], ids[0]],
    }
    wrong_key = "fedcba9876543210" * 2
    try:
        before = database(client, db_name)
        for name, args in reading.items():
            for key, says in ((None, "set LANGGRAPH_AES_KEY"), (wrong_key, "not the key")):
                result = invoke(client, *args, "--db", db_name, env={"LANGGRAPH_AES_KEY": key})
                assert result.exit_code == 1, (name, result.output, result.exception)
                assert isinstance(result.exception, SystemExit), (name, result.exception)
                assert says in result.output and "Traceback" not in result.output
                assert "secret tea" not in result.output
        # the commands that decode nothing work without the key
        for args in (["threads"], ["stats"], ["prune", "vault", "--dry-run"],
                     ["delete", "vault", "--dry-run"], ["copy", "vault", "v2", "--dry-run"]):
            result = invoke(client, *args, "--db", db_name, env={"LANGGRAPH_AES_KEY": None})
            assert result.exit_code == 0, (args, result.output, result.exception)
        assert database(client, db_name) == before
    finally:
        client.drop_database(db_name)
