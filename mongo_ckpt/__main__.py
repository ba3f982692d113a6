"""Command line: ``python -m mongo_ckpt demo`` (also installed as ``mongo-ckpt demo``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    from mongo_ckpt.demo import DEFAULT_DB_NAME

    parser = argparse.ArgumentParser(
        prog="mongo-ckpt", description="mongo-ckpt: LangGraph checkpoints and memory on MongoDB."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a deterministic agent showing memory, interrupt/resume and time travel",
        description=(
            "Run a rule-based agent graph (no LLM, no network) on AsyncMongoDBSaver: memory "
            "across turns, an interrupt and Command(resume=...), replay and fork from earlier "
            "checkpoints, then what was stored. Uses the MongoDB server at MONGODB_URI if set, "
            "otherwise an in-process backend (mongomock-motor)."
        ),
    )
    demo.add_argument(
        "--uri",
        default=os.environ.get("MONGODB_URI") or None,
        help="MongoDB connection string (default: $MONGODB_URI; unset means in-process)",
    )
    demo.add_argument(
        "--db",
        default=DEFAULT_DB_NAME,
        help=f"database to use; it is emptied first (default: {DEFAULT_DB_NAME})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mongo-ckpt``; returns the process exit code."""
    from mongo_ckpt.demo import MissingBackendError, run_demo

    args = _parser().parse_args(argv)
    try:
        asyncio.run(run_demo(args.uri, args.db, sys.stdout))
    except MissingBackendError as exc:
        print(exc, file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
