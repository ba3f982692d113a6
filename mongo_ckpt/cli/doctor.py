"""``doctor``: is the server and the stored layout fit for mongo-ckpt."""

from __future__ import annotations

import click

from mongo_ckpt import health, inspection
from mongo_ckpt.cli.options import (
    Session,
    Target,
    open_session,
    schema_status,
    target_options,
)
from mongo_ckpt.cli.output import DONE, ERROR, console, emit_json, table

PROBE_COLLECTION = "mongo_ckpt_doctor_probe"
MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


def findings(session: Session, schema: health.Finding) -> list[health.Finding]:
    """Every doctor check on the session's target (``schema``: ``schema_status``'s)."""
    layout = session.saver.layout
    by_logical = layout.by_logical()
    found = session.run(inspection.indexes())
    by_name = {by_logical[logical]: info for logical, info in found.items()}
    return [
        health.server_version(session.run(inspection.server_reply({"buildInfo": 1}))),
        health.topology(session.run(inspection.server_reply({"hello": 1}))),
        *health.indexes(layout, by_name),
        *health.ttl(by_name),
        schema,
        health.writable(session.run(inspection.write_probe(PROBE_COLLECTION))),
    ]


@click.command()
@target_options
@click.option("--fix", is_flag=True, help="Create the missing indexes first.")
@click.option(
    "--new-database",
    is_flag=True,
    help="With --fix: create them even though --db holds no mongo-ckpt data yet.",
)
def doctor(target: Target, fix: bool, new_database: bool) -> None:
    """Check the server, the indexes, TTL settings, the schema version and write access;
    each problem comes with its fix. Exit code 1 when a check fails, 3 when --db holds no
    mongo-ckpt data (the message names the databases that do)."""
    if new_database and not fix:
        raise click.UsageError("--new-database goes with --fix")
    hint = f" (or --new-database to create the indexes in {target.db!r})" if fix else ""
    with open_session(
        target, data_required=not new_database, hint=hint, layout_checked=False
    ) as session:
        schema = schema_status(session)
        # Indexes only on data the saver reads (setup() refuses the rest, and so does this).
        if fix and schema.status != "fail":
            session.run(session.saver.ops.create_indexes())
        result = findings(session, schema)
    failed = any(f.status == "fail" for f in result)
    if target.json:
        emit_json(target.db, {"ok": not failed, "findings": [vars(f) for f in result]},
                  ERROR if failed else DONE)
    else:
        out = console()
        rows = [(MARK[f.status], f.check, f.detail) for f in result]
        out.print(table(None, ("status", "check", "found"), rows))
        problems = [f for f in result if f.fix]
        for f in problems:
            out.print(f"{MARK[f.status]} {f.check}: {f.fix}")
        out.print("no problems found" if not problems else f"{len(problems)} problems")
    if failed:
        raise click.exceptions.Exit(ERROR)
