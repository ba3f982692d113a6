"""``mongo-ckpt migrate --from-official-store``: the terminal side of
``mongo_ckpt.store.migration`` (options are wired in ``cli/migrate.py``)."""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Any

import click

from mongo_ckpt.cli.options import Target, open_client
from mongo_ckpt.cli.output import NothingMatched, timed
from mongo_ckpt.schema import SCHEMA_COLLECTION
from mongo_ckpt.store import MongoDBStore
from mongo_ckpt.store.migration import (
    Vectors,
    migrate_official_store,
    official_store_collections,
    progress_key,
    verify_official_store,
)


def migrate_store(
    target: Target,
    *,
    source_db: str,
    source_collection: str,
    store_collection: str,
    vector_field: str | None,
    vector_dims: int | None,
    batch: int,
    verify: bool,
    restart: bool,
) -> int:
    """Run the store migration (and ``--verify``); exit code 1 on mismatches."""
    if (vector_field is None) != (vector_dims is None):
        raise click.UsageError("--vector-field and --vector-dims go together")
    vectors = Vectors(vector_field, vector_dims) if vector_field and vector_dims else None
    bar = partial(
        timed,
        shown=not target.json and sys.stderr.isatty(),
        unit="items",
        counted=lambda counts: {"total": counts.total, "completed": counts.items + counts.expired},
    )
    report: dict[str, Any] = {
        "source": {"db": source_db, "collection": source_collection},
        "target": {"db": target.db, "collection": store_collection},
    }
    with open_client(target) as client:
        source = client[source_db][source_collection]
        same = (source_db, source_collection) == (target.db, store_collection)  # refused below
        marker = {"_id": progress_key(source, client[target.db][store_collection])}
        done_before = client[target.db][SCHEMA_COLLECTION].find_one(marker) is not None
        if not same and not done_before and source.find_one({}, {"_id": 1}) is None:
            found = official_store_collections(client[source_db])
            named = (
                f"its collections with langgraph-store-mongodb items: {', '.join(found)}: "
                "pass --source-store NAME"
                if found
                else "no collection of it holds langgraph-store-mongodb items"
            )
            raise NothingMatched(
                f"collection {source_db}.{source_collection} holds no items: nothing to "
                f"migrate, nothing written; database {source_db!r}: {named}",
                target.db,
                target.json,
                {"source": report["source"], "official_store_collections": found},
            )
        store = MongoDBStore(client, target.db, collection_name=store_collection)
        try:
            done, seconds = bar(
                "migrating",
                partial(
                    migrate_official_store,
                    source,
                    store,
                    vectors=vectors,
                    batch=batch,
                    restart=restart,
                ),
            )
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        report["migrated"] = {
            "items": done.items,
            "expired_skipped": done.expired,
            "vectors": done.vectors,
            "seconds": seconds,
        }
        if verify:
            checked, seconds = bar("verifying", partial(verify_official_store, source, store))
            report["verified"] = {
                "items": checked.items,
                "seconds": seconds,
                "mismatches": checked.mismatches,
            }
    if target.json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        m = report["migrated"]
        click.echo(
            f"store {source_db}.{source_collection} -> {target.db}.{store_collection}: "
            f"{m['items']} items ({m['vectors']} with vectors), {m['expired_skipped']} expired "
            f"left out, {m['seconds']} s"
        )
        if verify:
            v = report["verified"]
            click.echo(f"verified {v['items']} items: {len(v['mismatches'])} mismatches")
            for mismatch in v["mismatches"][:20]:
                click.echo(f"mismatch {json.dumps(mismatch, default=str)}")
    return 1 if report.get("verified", {}).get("mismatches") else 0
