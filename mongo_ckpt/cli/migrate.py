"""``mongo-ckpt migrate --from-official`` and ``mongo-ckpt upgrade``: moving data into
the current layout (library side: ``mongo_ckpt.migration`` and ``saver.setup``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from mongo_ckpt.cli.options import (
    Target,
    collection_name,
    database_name,
    open_client,
    optional_collection_name,
    require_data,
    saver_on,
    target_options,
)
from mongo_ckpt.cli.output import (
    DONE,
    ERROR,
    NOTHING_MATCHED,
    NothingMatched,
    console,
    emit_json,
    timed,
)
from mongo_ckpt.cli.store_migrate import migrate_store
from mongo_ckpt.connection import DEFAULT_DB_NAME
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.migration import (
    DEFAULT_BATCH,
    Source,
    migrate_from_official,
    verify_migration,
)
from mongo_ckpt.migration import Progress as Counts
from mongo_ckpt.official import DEFAULT_CHECKPOINTS, DEFAULT_WRITES
from mongo_ckpt.schema import read_version, saver_key, store_key
from mongo_ckpt.store import MongoDBStore

SHOWN_MISMATCHES = 20
UNIT = "checkpoints, {task.fields[threads]} threads"
# Exit statuses besides 0 (and 2 for a usage error): output.py's ERROR and NOTHING_MATCHED.
MISMATCHES_FOUND, THREADS_SKIPPED = ERROR, NOTHING_MATCHED


def _counted(counts: Counts) -> dict[str, Any]:
    """The progress bar's position: source checkpoints done or skipped, of all; threads."""
    done = counts.checkpoints + counts.skipped_checkpoints
    return {"total": counts.total_checkpoints, "completed": done, "threads": counts.threads}


def _source_collections(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, str]:
    names = [n.strip() for n in value.split(",")]
    if len(names) != 2 or not all(names):
        raise click.BadParameter(
            f"expected CHECKPOINTS,WRITES (two collection names), got {value!r}"
        )
    checkpoints, writes = (collection_name(ctx, param, name) for name in names)
    return checkpoints, writes


@click.command(
    short_help="convert langgraph-checkpoint-mongodb data into mongo-ckpt's layout",
    help=(
        "Convert the collections of langgraph-checkpoint-mongodb (0.5.x, and the metadata "
        "format of releases before 0.2.2) into mongo-ckpt's layout in --db. The source is "
        "only read. Resumable: a rerun continues after the last finished thread, with the "
        "same result (--restart goes over every thread again). With --verify, every thread "
        "is then read back through mongo-ckpt and compared with the source. Encrypted data "
        "needs LANGGRAPH_AES_KEY, as for the application. A thread that cannot be converted "
        "(e.g. a checkpoint over mongo-ckpt's 15 MiB document limit) is skipped whole, the "
        "others are migrated, and every skipped thread is listed at the end with the reason; "
        "a rerun tries the skipped threads again. Exit status: 0 when everything was "
        "migrated (and matched), 1 when --verify found mismatches, 3 when threads were "
        "skipped, 2 on a usage error."
    ),
)
@click.option(
    "--from-official",
    is_flag=True,
    help="Source: langgraph-checkpoint-mongodb's collections (required).",
)
@click.option(
    "--source-db",
    default=DEFAULT_DB_NAME,
    show_default=True,
    callback=database_name,
    help="Database of the official collections.",
)
@click.option(
    "--source-collections",
    default=f"{DEFAULT_CHECKPOINTS},{DEFAULT_WRITES}",
    show_default=True,
    callback=_source_collections,
    help="The official checkpoints and writes collections, comma-separated.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Threads per batch (one bulk write per collection each).",
)
@click.option("--verify", is_flag=True, help="Compare every migrated thread with the source.")
@click.option("--restart", is_flag=True, help="Ignore the progress of an earlier run.")
@click.option(
    "--from-official-store",
    is_flag=True,
    help="Source: a langgraph-store-mongodb collection (--source-store), into the store.",
)
@click.option(
    "--source-store", default="store", show_default=True, help="Official store collection."
)
@click.option(
    "--store-collection", default="store", show_default=True, help="Target store collection."
)
@click.option("--vector-field", help="Copy vectors: the one indexed field of both stores.")
@click.option("--vector-dims", type=click.IntRange(min=1), help="Copy vectors of these dimensions.")
@target_options
def migrate(
    target: Target,
    from_official: bool,
    source_db: str,
    source_collections: tuple[str, str],
    batch: int,
    verify: bool,
    restart: bool,
    from_official_store: bool,
    source_store: str,
    store_collection: str,
    vector_field: str | None,
    vector_dims: int | None,
) -> None:
    """Run the migration, then the verification if asked; exit status 1 on mismatches,
    3 when threads were skipped."""
    if from_official_store:
        if from_official:
            raise click.UsageError(
                "migrate one source at a time: --from-official or --from-official-store"
            )
        code = migrate_store(
            target,
            source_db=source_db,
            source_collection=source_store,
            store_collection=store_collection,
            vector_field=vector_field,
            vector_dims=vector_dims,
            batch=batch,
            verify=verify,
            restart=restart,
        )
        raise click.exceptions.Exit(code)
    if not from_official:  # required so the command says what it migrates from
        raise click.UsageError("say what to migrate from: --from-official or --from-official-store")
    source = Source(source_db, *source_collections)
    report: dict[str, Any] = {"source": vars(source), "target": {"db": target.db}}
    bar = partial(timed, shown=not target.json, unit=UNIT, counted=_counted, threads=0)
    with open_client(target) as client:
        saver = saver_on(client, target)
        try:
            done, seconds = bar(
                "migrating",
                partial(migrate_from_official, saver, source, batch=batch, restart=restart),
            )
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        report["migrated"] = {
            "threads": done.threads,
            "checkpoints": done.checkpoints,
            "writes": done.writes,
            "seconds": seconds,
            "skipped": [vars(skip) for skip in done.skipped],
        }
        if verify:
            checked, seconds = bar(
                "verifying", partial(verify_migration, saver, source, batch=batch)
            )
            report["verified"] = {
                "threads": checked.threads,
                "checkpoints": checked.checkpoints,
                "seconds": seconds,
                "mismatches": [vars(m) for m in checked.mismatches],
                "skipped": [vars(skip) for skip in checked.skipped],
            }
    status = DONE
    if report["migrated"]["skipped"]:
        status = THREADS_SKIPPED
    if report.get("verified", {}).get("mismatches"):
        status = MISMATCHES_FOUND
    _print(report, target.json, status)
    raise click.exceptions.Exit(status)


def _print(report: dict[str, Any], as_json: bool, status: int) -> None:
    if as_json:
        emit_json(report["target"]["db"], report, status)
        return
    out = console()
    table = Table(
        title=f"langgraph-checkpoint-mongodb {report['source']['db']} -> "
        f"mongo-ckpt {report['target']['db']}"
    )
    columns = ("step", "threads", "checkpoints", "writes", "seconds", "mismatches", "skipped")
    for column in columns:
        table.add_column(column, justify="left" if column == "step" else "right")
    for step, done in (("migrate", report["migrated"]), ("verify", report.get("verified"))):
        if done is not None:  # a list is shown as its length, a count the step lacks as ""
            cells = (done.get(column, "") for column in columns[1:])
            table.add_row(step, *(str(len(c) if isinstance(c, list) else c) for c in cells))
    out.print(table)
    mismatches = report.get("verified", {}).get("mismatches", [])
    for mismatch in mismatches[:SHOWN_MISMATCHES]:
        where = (
            f"thread {mismatch['thread_id']!r} ns {mismatch['checkpoint_ns']!r} "
            f"checkpoint {mismatch['checkpoint_id']!r}: {mismatch['field']}: {mismatch['detail']}"
        )
        out.print(Text("mismatch", style="red"), where, soft_wrap=True)
    if len(mismatches) > SHOWN_MISMATCHES:
        out.print(f"... and {len(mismatches) - SHOWN_MISMATCHES} more (--json lists all)")
    skipped = report["migrated"]["skipped"]
    if skipped:
        checkpoints = sum(skip["checkpoints"] for skip in skipped)
        out.print(
            Text(f"{len(skipped)} thread(s) not migrated", style="yellow"),
            f"({checkpoints} checkpoints); the others were. Fix them in the source and run "
            "the same command again to migrate them:",
        )
    for skip in skipped:  # every one: each is data left behind
        where = (
            f"thread {skip['thread_id']!r} ({skip['checkpoints']} checkpoints): checkpoint "
            f"{skip['checkpoint_id']!r} ns {skip['checkpoint_ns']!r}: {skip['reason']}"
        )
        out.print(Text("skipped", style="yellow"), where, soft_wrap=True)


@click.command(
    short_help="record the current layout version",
    help=(
        "Set the checkpoint collections (with --store, the store collection) up and record "
        "the layout version of this mongo-ckpt. Each has one layout: a database this "
        "release set up is at it already, and data of a pre-release layout is refused, "
        "nothing written. Idempotent."
    ),
)
@click.option(
    "--store",
    "store_collection",
    metavar="COLLECTION",
    callback=optional_collection_name,
    help="Upgrade this store collection (the store's default: store) instead.",
)
@click.option(
    "--new-database",
    is_flag=True,
    help="Set the checkpoint collections up even though --db holds no mongo-ckpt data yet.",
)
@target_options
def upgrade(target: Target, store_collection: str | None, new_database: bool) -> int:
    """Run ``saver.upgrade()`` (or ``store.upgrade()`` on ``store_collection``, which must
    hold a store's data) and report the versions."""
    if store_collection is None:
        key, where, named = saver_key(target.layout.checkpoints), target.db, {}
    else:
        key, where = store_key(store_collection), f"{target.db}.{store_collection}"
        named = {"collection": store_collection}
    with open_client(target) as client:
        db = client[target.db]
        if store_collection is None and not new_database:
            require_data(client, target, f" (or --new-database to set {target.db!r} up)")
        before = read_version(db, key)
        if store_collection is None:
            upgradable: Any = partial(saver_on, client, target)
        elif before is None and db[store_collection].find_one({}, {"_id": 1}) is None:
            raise NothingMatched(
                f"database {target.db!r} has no store collection {store_collection!r}: nothing "
                "to upgrade (a new store records the current layout version when it is set up)",
                target.db,
                target.json,
                named,
            )
        else:
            upgradable = partial(MongoDBStore, client, target.db, collection_name=store_collection)
        try:
            upgradable().upgrade()
        except MongoCkptError as exc:  # a pre-release, newer or official layout, a reserved name
            raise click.ClickException(str(exc)) from None
        after = read_version(db, key)
    if target.json:
        emit_json(target.db, {**named, "before": before, "after": after})
    else:
        was = "unversioned" if before is None else f"version {before}"
        click.echo(f"{where}: layout {was} -> version {after}")
    return 0
