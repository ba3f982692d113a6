"""The ``mongo-ckpt demo`` command: what it shows, that it is deterministic, and that it is true."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from mongo_ckpt.__main__ import main
from mongo_ckpt.demo import open_client
from tests.backends import MONGODB_URI, wire_uri

ROOT = Path(__file__).resolve().parents[1]
TABLE_ROW = re.compile(r"^  (checkpoints|checkpoint_blobs|checkpoint_writes) +(\d+) +(\d+)$", re.M)


def run_in_process(capsys: Any, monkeypatch: Any, *args: str) -> str:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    assert main(["demo", *args]) == 0
    return capsys.readouterr().out


def section(output: str, number: int) -> str:
    """The text of the demo's section ``== <number>. ... ==``."""
    start = output.index(f"== {number}. ")
    end = output.find("\n== ", start + 1)
    return output[start:] if end < 0 else output[start:end]


def stored_table(output: str) -> dict[str, tuple[int, int]]:
    return {name: (int(docs), int(size)) for name, docs, size in TABLE_ROW.findall(output)}


def without_sizes(output: str) -> str:
    # Version strings end in a random fraction of varying length, so sizes move by a few bytes.
    return TABLE_ROW.sub(lambda m: f"  {m[1]} {m[2]} <bytes>", output)


def test_demo_runs_in_process_and_says_so(capsys: Any, monkeypatch: Any) -> None:
    output = run_in_process(capsys, monkeypatch)
    assert output.startswith("Backend: in-process (mongomock-motor). MONGODB_URI is not set")

    memory = section(output, 1)
    assert memory.count("user> What do you know about me?") == 2
    first, other = memory.split("another thread")
    assert "assistant> Your name is Ada and you like tea." in first
    assert "assistant> I don't know anything about you yet." in other

    interrupted = section(output, 2)
    assert "[interrupted] paused before node 'approval'" in interrupted
    assert "'action': 'book a table for two'" in interrupted
    assert interrupted.rstrip().endswith("assistant> Booked a table for two.")

    travel = section(output, 3)
    assert "newest first (13 checkpoints)" in travel
    assert "step 11  loop   next=-          last=ai: Booked a table for two." in travel
    assert "step -1  input  next=__start__  last=-" in travel
    replay = travel[travel.index("-- replay from step 6") : travel.index("-- fork at step 3")]
    assert "assistant> Your name is Ada and you like tea." in replay
    assert "nodes run by the replay: assistant (" in replay
    assert "the new branch: step 8 (loop) <- step 7 (fork) <- step 6 (loop)" in replay
    fork = travel[travel.index("-- fork at step 3") :]
    assert "assistant> Noted: you like coffee." in fork
    assert "assistant> Your name is Ada and you like coffee." in fork
    assert "(step 11) the assistant knows: Your name is Ada and you like tea." in fork

    stored = section(output, 4)
    table = stored_table(stored)
    assert set(table) == {"checkpoints", "checkpoint_blobs", "checkpoint_writes"}
    assert "saver.alist(thread 'demo'): 20 checkpoints" in stored
    assert "saver.alist(thread 'demo-other'): 3 checkpoints" in stored
    assert table["checkpoints"][0] == 20 + 3
    assert all(size > 0 for _, size in table.values())
    refs, values = map(
        int, re.search(r"refer to (\d+) channel values, stored as (\d+)", stored).groups()
    )
    assert values == table["checkpoint_blobs"][0] < refs
    assert "step 7, parent step 6, last message: 'What do you know about me?'" in stored
    assert "step 4, parent step 3, last message: 'I like coffee.'" in stored

    long_term = section(output, 5)
    assert "AsyncMongoDBStore.from_saver(saver): same client (True)" in long_term
    other_thread = long_term[long_term.index("thread 'memory-2'") :]
    assert "assistant> From long-term memory: Your name is Ada and you like green tea." in (
        other_thread
    )
    assert (
        "namespace=('users', 'ada') key='profile' value={'name': 'Ada', 'likes': ['green tea']}"
        in long_term
    )

    cached = section(output, 6)
    assert "AsyncMongoDBCache.from_saver(saver): same client (True)" in cached
    assert "call 1: 'sunny in Lisbon' (the node ran; its result written to the cache)" in cached
    assert "call 2: 'sunny in Lisbon' (the node did not run; served from MongoDB)" in cached
    assert "the node ran 1 time for 2 calls" in cached
    assert cached.count("node 'forecast', key ") == 1 and "(with expires_at)" in cached


def test_demo_says_it_drops_its_database_and_where_its_source_is(
    capsys: Any, monkeypatch: Any
) -> None:
    output = run_in_process(capsys, monkeypatch, "--db", "t_named")
    assert "The demo drops database 't_named' first" in output
    assert "Its source: mongo_ckpt/demo.py." in output
    assert (ROOT / "mongo_ckpt" / "demo.py").is_file()


def test_module_command_prints_the_same_as_main(capsys: Any, monkeypatch: Any) -> None:
    in_process = run_in_process(capsys, monkeypatch)
    env = {k: v for k, v in os.environ.items() if k != "MONGODB_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "mongo_ckpt", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Backend: in-process" in done.stdout
    assert without_sizes(done.stdout) == without_sizes(in_process)
    uuid_like = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    assert not uuid_like.search(done.stdout)
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", done.stdout)


def _server_uri(backend: str) -> str:
    if backend == "wire":
        uri = wire_uri()
        return uri + ("&" if "?" in uri else "?") + "directConnection=true"
    assert MONGODB_URI
    return MONGODB_URI


@pytest.mark.parametrize("backend", ["wire", pytest.param("mongodb", marks=pytest.mark.mongodb)])
def test_demo_on_a_server_prints_what_the_server_holds(
    backend: str, capsys: Any, monkeypatch: Any
) -> None:
    uri = _server_uri(backend)
    db_name = f"t_demo_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MONGODB_URI", uri)
    with MongoClient(uri) as client:
        try:
            assert main(["demo", "--db", db_name]) == 0
            output = capsys.readouterr().out
            assert output.startswith("Backend: MongoDB at ")
            assert "Your name is Ada and you like coffee." in output
            assert f"The data stays in database {db_name!r}" in output
            demo_threads = {"thread_id": {"$in": ["demo", "demo-other"]}}
            held = {
                name: client[db_name][name].count_documents(demo_threads)
                for name in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
            }
            assert {name: docs for name, (docs, _) in stored_table(output).items()} == held
            threads = client[db_name]["checkpoints"].distinct("thread_id")
            assert sorted(threads) == ["demo", "demo-other", "memory-1", "memory-2"]
            # One item (beside it, its namespace's registry entry).
            assert client[db_name]["store"].count_documents({}) == 1
            assert client[db_name]["cache"].count_documents({}) == 1
        finally:
            client.drop_database(db_name)


async def test_demo_names_the_server_without_credentials() -> None:
    uri = "mongodb://ada:s3%2Fcr%40t@127.0.0.1:1/app?authSource=admin"
    client, backend = open_client(uri)
    await client.close()
    assert backend == (
        "Backend: MongoDB at mongodb://ada:***@127.0.0.1:1/app (PyMongo AsyncMongoClient)."
    )


def test_demo_explains_how_to_get_the_in_process_backend(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    monkeypatch.setitem(sys.modules, "mongomock_motor", None)  # makes the import fail
    assert main(["demo"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "pip install -e '.[demo]'" in captured.err
    assert "MONGODB_URI=" in captured.err


def test_help_and_missing_command(capsys: Any) -> None:
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out
    assert main(["demo", "--help"]) == 0
    assert "MONGODB_URI" in capsys.readouterr().out
    assert main([]) == 2
    assert "Commands:" in capsys.readouterr().err
    assert main(["nope"]) == 2
    assert "No such command 'nope'" in capsys.readouterr().err


# -- the README's commands and code ---------------------------------------------------


def readme_block(heading: str, language: str) -> str:
    """The first ``language`` code block after the README's ``heading`` line."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n{heading}\n")
    match = re.compile(rf"^```{language}\n(.*?)^```", re.M | re.S).search(text, start)
    assert match, f"no {language} block after {heading!r}"
    return match.group(1)


def test_fresh_machine_commands_are_the_demo_and_the_ci_test_command() -> None:
    """The README's two set-up commands install, then run the demo and the tests; CI
    installs and tests exactly as the second does, then runs the exhaustive tier."""
    demo, tests = readme_block("## Set-up on a fresh machine", "bash").strip().splitlines()
    assert demo.endswith("&& python -m mongo_ckpt demo")
    install, run = (part.strip() for part in tests.split("&&"))
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    steps = [line for line in ci if line.startswith("python ")]
    assert steps == [f"python -m {install}", run, f"{run} --full"]


async def test_readme_quickstart_runs_on_a_server() -> None:
    db_name = f"t_quickstart_{uuid.uuid4().hex[:8]}"
    source = readme_block("## Quickstart", "python")
    assert 'AsyncMongoClient("mongodb://localhost:27017")' in source
    source = source.replace("mongodb://localhost:27017", _server_uri("wire")).replace(
        'db_name="agents"', f'db_name="{db_name}"'
    )
    namespace: dict[str, Any] = {}
    code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    await eval(code, namespace)
    client, graph, config = namespace["client"], namespace["graph"], namespace["config"]
    try:
        state = await graph.aget_state(config)
        assert [m.type for m in state.values["messages"]] == ["human", "ai"]
        assert await client[db_name]["checkpoints"].count_documents({}) == len(
            [s async for s in graph.aget_state_history(config)]
        )
    finally:
        await client.drop_database(db_name)
        await client.close()


def test_relative_links_in_readme_and_docs_resolve() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "links to missing files: " + ", ".join(broken)
