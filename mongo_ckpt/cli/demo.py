"""``mongo-ckpt demo``: the guided tour of mongo_ckpt/demo.py."""

from __future__ import annotations

import asyncio
import sys

import click

from mongo_ckpt.demo import DEFAULT_DB_NAME, MissingBackendError, run_demo


@click.command(
    short_help="run a deterministic agent showing memory, interrupt/resume and time travel",
    help=(
        "Run a rule-based agent graph (no LLM, no network) on AsyncMongoDBSaver: memory "
        "across turns, an interrupt and Command(resume=...), replay and fork from earlier "
        "checkpoints, then what was stored. Uses the MongoDB server at MONGODB_URI if set, "
        "otherwise an in-process backend (mongomock-motor)."
    ),
)
@click.option(
    "--uri",
    envvar="MONGODB_URI",
    help="MongoDB connection string (default: $MONGODB_URI; unset means in-process)",
)
@click.option(
    "--db",
    default=DEFAULT_DB_NAME,
    help=f"database to use; it is emptied first (default: {DEFAULT_DB_NAME})",
)
def demo(uri: str | None, db: str) -> int:
    """Run the demo; exit code 2 when no backend is available."""
    try:
        asyncio.run(run_demo(uri or None, db, sys.stdout))
    except MissingBackendError as exc:
        click.echo(str(exc), err=True)
        return 2
    return 0
