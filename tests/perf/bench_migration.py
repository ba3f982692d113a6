"""Migration benchmark: a generated langgraph-checkpoint-mongodb dataset converted with
``mongo-ckpt migrate --from-official --verify``.

The official 0.5.1 saver writes ``--threads`` chat threads of ``--turns`` turns each
(three checkpoints per turn, through a real graph); the command then migrates and
verifies them, and the script prints threads, checkpoints, seconds and mismatches.

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_migration.py [--backend wire|mock|mongodb] [--threads 200]
        [--turns 7] [--batch 100]
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from click.testing import CliRunner  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.mongodb import MongoDBSaver as OfficialSaver  # noqa: E402

from mongo_ckpt.cli import CliState, cli  # noqa: E402
from tests.backends import stop_wire, sync_client  # noqa: E402
from tests.graphs import chat_builder, thread  # noqa: E402

SOURCE_DB, TARGET_DB = "bench_migration_src", "bench_migration"


def generate(client: Any, threads: int, turns: int) -> tuple[int, float]:
    """Write the dataset with the official saver; return its checkpoint count and seconds."""
    client.drop_database(SOURCE_DB)
    official = OfficialSaver(client, SOURCE_DB)
    graph = chat_builder().compile(checkpointer=official)
    started = time.perf_counter()
    for t in range(threads):
        for turn in range(turns):
            text = f"thread {t} turn {turn}: " + "lorem ipsum " * 40
            graph.invoke({"messages": [HumanMessage(text)]}, thread(f"thread-{t:05}"))
    return official.checkpoint_collection.count_documents({}), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="wire", choices=["wire", "mock", "mongodb"])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=7)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    client = sync_client(args.backend)
    try:
        checkpoints, written = generate(client, args.threads, args.turns)
        print(f"official saver wrote {args.threads} threads, {checkpoints} checkpoints "
              f"in {written:.1f} s ({args.backend})")
        client.drop_database(TARGET_DB)
        command = ["migrate", "--from-official", "--source-db", SOURCE_DB, "--db", TARGET_DB,
                   "--batch", str(args.batch), "--verify", "--json"]
        started = time.perf_counter()
        result = CliRunner().invoke(cli, command, obj=CliState(client=client))
        elapsed = time.perf_counter() - started
        if result.exit_code not in (0, 1):
            raise SystemExit(result.output)
        report = json.loads(result.output[result.output.index("{") :])
        migrated, verified = report["migrated"], report["verified"]
        print("| threads | checkpoints | writes | migrate s | verify s | total s | mismatches |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {migrated['threads']} | {migrated['checkpoints']} | {migrated['writes']} | "
              f"{migrated['seconds']} | {verified['seconds']} | {elapsed:.1f} | "
              f"{len(verified['mismatches'])} |")
    finally:
        for db in (SOURCE_DB, TARGET_DB):
            client.drop_database(db)
        client.close()
        stop_wire()


if __name__ == "__main__":
    main()
