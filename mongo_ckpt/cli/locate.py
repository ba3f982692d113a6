"""Where the mongo-ckpt data is: whether ``--db`` holds the checkpointer's collections, and
which databases on the server hold mongo-ckpt data (they have a schema document,
``saver:<checkpoints>`` or ``store:<collection>``, in ``mongo_ckpt_schema``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.errors import PyMongoError

from mongo_ckpt.layout import SCHEMA_COLLECTION, Layout

SCHEMA_KEYS = {"_id": {"$regex": "^(saver|store):"}}


def holds_data(client: Any, db: str, layout: Layout) -> bool:
    """Whether database ``db`` has any of ``layout``'s three collections."""
    names = set(client[db].list_collection_names())
    return not names.isdisjoint(layout.by_logical().values())


def databases_with_data(client: Any) -> dict[str, list[str]] | None:
    """The schema document ids per database holding mongo-ckpt data; ``None`` when the
    server does not let this user list databases."""
    try:
        found = {}
        for db in client.list_database_names():
            ids = [d["_id"] for d in client[db][SCHEMA_COLLECTION].find(SCHEMA_KEYS, {"_id": 1})]
            if ids:
                found[db] = sorted(ids)
        return found
    except PyMongoError:
        return None


def no_data_message(db: str, layout: Layout, found: Mapping[str, list[str]] | None) -> str:
    """What to tell an operator whose ``--db`` holds no checkpointer data: where there is."""
    names = ", ".join(layout.by_logical().values())
    head = f"database {db!r} holds no mongo-ckpt checkpoints (no collection {names})"
    if found is None:
        return f"{head}; this user may not list the server's databases: pass --db NAME"
    if not found:
        return f"{head}, and no database on this server holds mongo-ckpt data: pass --db NAME"
    where = "; ".join(f"{name} ({', '.join(keys)})" for name, keys in sorted(found.items()))
    return f"{head}. Databases with mongo-ckpt data: {where}: pass --db NAME"

