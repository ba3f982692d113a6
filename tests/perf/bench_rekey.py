"""Key rotation run: ``rekey`` over a database of chat threads and store items written
under one key, beside a live writer, then everything read back with the new key alone.

``--threads`` threads of ``--turns`` turns (through a real graph) and one store item per
thread are written under key ``k1``. A ring without ``k1`` is refused by ``rekey`` with
``MissingKeyError`` naming it (nothing changes). Every checkpoint is read, then ``rekey``
runs with the ring ``{k1, k2}`` (current ``k2``) while a writer goes on with conversations
on other threads (wire and mongodb backends); then every checkpoint, its pending writes and
every item are read again with a ring holding ``k2`` alone and compared with what was read
before. ``--bind``: the ring of the run binds each value to its place, and the values are
read afterwards with a strict one (``bind="strict"``: unbound values refused). The script
prints the report, seconds and mismatches (``--write``: into docs/benchmarks.md).

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_rekey.py [--backend wire|mock|mongodb] [--threads 300]
        [--turns 3] [--batch 200] [--bind] [--write]
"""

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from langchain_core.messages import HumanMessage  # noqa: E402

from mongo_ckpt import MissingKeyError, MongoDBSaver, keyring_serializer  # noqa: E402
from mongo_ckpt.store import MongoDBStore  # noqa: E402
from tests.backends import stop_wire, sync_client  # noqa: E402
from tests.graphs import chat_builder, thread  # noqa: E402
from tests.perf.report import write_section  # noqa: E402

DB = "bench_rekey"
K1, K2 = b"1" * 32, b"2" * 32
OLD = keyring_serializer({"k1": K1}, "k1")


def say(graph: Any, thread_id: str, turn: int) -> None:
    text = f"{thread_id} turn {turn}: " + "lorem ipsum " * 40
    graph.invoke({"messages": [HumanMessage(text)]}, thread(thread_id))


def read_all(client: Any, serde: Any, threads: list[str]) -> dict[Any, Any]:
    """Every checkpoint of ``threads`` (with its pending writes) and every store item."""
    saver = MongoDBSaver(client, DB, serde=serde)
    found: dict[Any, Any] = {}
    for thread_id in threads:
        for item in saver.list(thread(thread_id)):
            key = item.config["configurable"]["checkpoint_id"]
            found[key] = (item.checkpoint, item.metadata, item.pending_writes)
    for item in MongoDBStore(client, DB, serde=serde).search(("users",), limit=len(threads)):
        found[item.key] = item.value
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="wire", choices=["wire", "mock", "mongodb"])
    parser.add_argument("--threads", type=int, default=300)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--bind", action="store_true", help="the new ring binds")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    both = keyring_serializer({"k1": K1, "k2": K2}, "k2", bind=args.bind)
    new = keyring_serializer({"k2": K2}, "k2", bind="strict" if args.bind else False)
    client = sync_client(args.backend)
    client.drop_database(DB)
    threads = [f"thread-{t:05}" for t in range(args.threads)]
    try:
        graph = chat_builder().compile(checkpointer=MongoDBSaver(client, DB, serde=OLD))
        store = MongoDBStore(client, DB, serde=OLD)
        for thread_id in threads:
            for turn in range(args.turns):
                say(graph, thread_id, turn)
            store.put(("users",), thread_id, {"notes": f"{thread_id} " * 20})

        try:
            MongoDBSaver(client, DB, serde=new).rekey()
            raise SystemExit("a ring without k1 re-encrypted values of k1")
        except MissingKeyError as exc:
            refused = str(exc)
        before = read_all(client, both, threads)

        # A writer goes on with conversations on threads of its own, with the new ring.
        live = chat_builder().compile(checkpointer=MongoDBSaver(client, DB, serde=both))
        stop, written = threading.Event(), [0]

        def write() -> None:
            while not stop.is_set():
                say(live, f"live-{written[0] % 10}", written[0])
                written[0] += 1

        writer = threading.Thread(target=write)
        if args.backend != "mock":  # mongomock is not thread-safe
            writer.start()
        started = time.perf_counter()
        report = MongoDBSaver(client, DB, serde=both).rekey(batch_size=args.batch)
        items = MongoDBStore(client, DB, serde=both).rekey(batch_size=args.batch)
        elapsed = time.perf_counter() - started
        stop.set()
        if writer.is_alive():
            writer.join()

        after = read_all(client, new, threads)
        mismatches = sum(after.get(key) != value for key, value in before.items())
        rekeyed = report.rekeyed + items.rekeyed
        left = sum((report.left + items.left).values())
        print(f"refused without k1: {refused}")
        rows = [
            "| threads | checkpoints | values, writes, items re-encrypted | changed by the "
            "writer | left | seconds | turns written meanwhile | mismatches |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {args.threads} | {rekeyed['checkpoints.checkpoint']} | "
            f"{rekeyed['blobs.value']}, {rekeyed['writes.value']}, "
            f"{rekeyed['store.value_typed']} | {sum((report.changed + items.changed).values())} "
            f"| {left} | {elapsed:.1f} | {written[0]} | {mismatches} |",
        ]
        print("\n".join(rows))
        if mismatches or left or not report.done:
            raise SystemExit("values were lost, changed or left under k1")
        if args.write:
            flag = " --bind" if args.bind else ""
            section = (
                f"`python tests/perf/bench_rekey.py --backend {args.backend} --threads "
                f"{args.threads} --turns {args.turns}{flag} --write`:\n\n" + "\n".join(rows)
            )
            write_section(REPO / "docs" / "benchmarks.md", "rekey", section)
    finally:
        client.drop_database(DB)
        client.close()
        stop_wire()


if __name__ == "__main__":
    main()
