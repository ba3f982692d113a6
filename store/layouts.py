"""Other layouts a collection may hold, which the store refuses to set up on.

A collection of the checkpointer (named in a saver's schema document, or holding
checkpoint documents), of another store (named in its schema document) or of
langgraph-store-mongodb (its ``namespace_str`` documents and unique index, its TTL index
on ``updated_at``) would be misread by the store, and its indexes would refuse or delete
the store's documents. ``setup()`` looks at both of the store's collections (items and
namespace registry) before it creates anything, when its version is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, REGISTRY, STORE, WRITES
from mongo_ckpt.schema import store_key
from mongo_ckpt.store import registry

OFFICIAL_FIELD = "namespace_str"  # langgraph-store-mongodb's joined namespace
SAVER_INDEXES = {"checkpoint_key", "blob_key", "write_key"}  # mongo_ckpt.layout
# Fields every document of the store's collections has, by logical name.
OWN_FIELDS = {STORE: {"namespace", "ns", "key"}, REGISTRY: {registry.LISTED}}
OWN_TTL_FIELDS = (["expires_at"], [registry.UNTIL])
ARGUMENTS = {STORE: "collection_name", REGISTRY: "registry_collection_name"}
"""How the store's constructor names each collection."""


class ForeignCollectionError(MongoCkptError, ValueError):
    """One of the store's collections holds another layout (the checkpointer's, the
    official store's, another store's); nothing was written."""


def owner_query(names: Mapping[str, str]) -> dict[str, Any]:
    """Schema documents, other than the store's, that name one of its collections
    (``names``, by logical name) as one of theirs (a saver's, another store's)."""
    roles = (CHECKPOINTS, BLOBS, WRITES, STORE, REGISTRY)
    return {
        "_id": {"$ne": store_key(names[STORE])},
        "$or": [{f"collections.{role}": name} for role in roles for name in names.values()],
    }


def foreign_layout(
    logical: str,
    collection: str,
    owner: Mapping[str, Any] | None,
    sample: Mapping[str, Any] | None,
    indexes: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """What other layout ``collection`` (the store's ``logical`` one) holds, from another
    schema document naming one of the store's collections, one of its documents and its
    indexes; ``None`` when it is empty or the store's."""
    owned = (owner or {}).get("collections", {})
    roles = [role for role, name in owned.items() if name == collection]
    if owner is not None and roles:
        kind = "store" if owner["_id"].startswith("store:") else "checkpointer"
        return f"the {'/'.join(roles)} of the mongo-ckpt {kind} recorded as {owner['_id']!r}"
    for name, info in indexes.items():
        fields = [field for field, _ in info.get("key", ())]
        if OFFICIAL_FIELD in fields:
            return f"langgraph-store-mongodb's index {name!r} on {', '.join(fields)}"
        if "expireAfterSeconds" in info and fields not in OWN_TTL_FIELDS:
            return (
                f"a TTL index {name!r} on {', '.join(fields)} (langgraph-store-mongodb's "
                "expires items by updated_at), which would delete this store's documents"
            )
        if name in SAVER_INDEXES:
            return f"the checkpointer's index {name!r}"
    if sample is None:
        return None
    if OFFICIAL_FIELD in sample:
        return f"langgraph-store-mongodb items (documents with {OFFICIAL_FIELD})"
    if "thread_id" in sample or "checkpoint_id" in sample:
        return "checkpoint documents (a checkpointer's collection)"
    if not sample.keys() >= OWN_FIELDS[logical]:
        return f"documents of another layout (without the fields {sorted(OWN_FIELDS[logical])})"
    return None


def check_recorded(db_name: str, names: Mapping[str, str], recorded: Mapping[str, str]) -> None:
    """``ForeignCollectionError`` when the store's layout record names another registry
    collection than ``names`` does: its entries are there, and the one given may hold
    anything."""
    kept = recorded.get(REGISTRY)
    if kept is not None and kept != names[REGISTRY]:
        raise ForeignCollectionError(
            f"the store on collection {names[STORE]!r} of database {db_name!r} keeps its "
            f"namespace registry in {kept!r} (recorded when it was set up), not "
            f"{names[REGISTRY]!r}: pass registry_collection_name={kept!r}; nothing was written"
        )


def refusal(db_name: str, logical: str, collection: str, found: str) -> ForeignCollectionError:
    """The error for the store's ``logical`` collection, ``collection``, holding ``found``."""
    hint = (
        " (convert langgraph-store-mongodb items into it with mongo-ckpt migrate "
        "--from-official-store: see docs/store.md)"
        if "langgraph-store-mongodb" in found and logical == STORE
        else ""
    )
    what = "items" if logical == STORE else "namespace registry entries"
    default = "'store'" if logical == STORE else "the items collection's name + '_namespaces'"
    return ForeignCollectionError(
        f"collection {collection!r} of database {db_name!r} holds {found}, not mongo-ckpt "
        f"store {what}: the store would misread it, or its indexes would refuse or delete the "
        f"store's {what}. Give the store a collection of its own with {ARGUMENTS[logical]}= "
        f"(default {default}){hint}; nothing was written"
    )
