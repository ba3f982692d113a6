"""Other layouts a collection may hold, which the store refuses to set up on.

A collection of the checkpointer (named in a saver's schema document, or holding
checkpoint documents) or of langgraph-store-mongodb (its ``namespace_str`` documents
and unique index, its TTL index on ``updated_at``) would be misread by the store, and
its indexes would refuse or delete the store's items. ``setup()`` looks before it
creates anything on a collection whose store version is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, WRITES
from mongo_ckpt.store import registry

OFFICIAL_FIELD = "namespace_str"  # langgraph-store-mongodb's joined namespace
SAVER_INDEXES = {"checkpoint_key", "blob_key", "write_key"}  # mongo_ckpt.layout
ITEM_FIELDS = {"namespace", "ns", "key"}  # every item document of this store has them
# (the namespace registry's entries, beside the items, have ``registry.LISTED`` instead)


class ForeignCollectionError(MongoCkptError, ValueError):
    """The store's collection holds another layout (the checkpointer's, the official
    store's); nothing was written."""


def saver_query(collection: str) -> dict[str, Any]:
    """Schema documents of savers that name ``collection`` as one of theirs."""
    roles = (CHECKPOINTS, BLOBS, WRITES)
    return {"$or": [{f"collections.{role}": collection} for role in roles]}


def foreign_layout(
    collection: str,
    saver: Mapping[str, Any] | None,
    sample: Mapping[str, Any] | None,
    indexes: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """What other layout ``collection`` holds, from a saver's schema document naming it,
    one of its documents and its indexes; ``None`` when it is empty or the store's."""
    if saver is not None:
        roles = [role for role, name in saver.get("collections", {}).items() if name == collection]
        return f"the {'/'.join(roles)} of the mongo-ckpt checkpointer recorded as {saver['_id']!r}"
    for name, info in indexes.items():
        fields = [field for field, _ in info.get("key", ())]
        if OFFICIAL_FIELD in fields:
            return f"langgraph-store-mongodb's index {name!r} on {', '.join(fields)}"
        if "expireAfterSeconds" in info and fields not in (["expires_at"], [registry.UNTIL]):
            return (
                f"a TTL index {name!r} on {', '.join(fields)} (langgraph-store-mongodb's "
                "expires items by updated_at), which would delete this store's items"
            )
        if name in SAVER_INDEXES:
            return f"the checkpointer's index {name!r}"
    if sample is None:
        return None
    if OFFICIAL_FIELD in sample:
        return f"langgraph-store-mongodb items (documents with {OFFICIAL_FIELD})"
    if "thread_id" in sample or "checkpoint_id" in sample:
        return "checkpoint documents (a checkpointer's collection)"
    if not sample.keys() >= ITEM_FIELDS and registry.LISTED not in sample:
        return f"documents of another layout (without the store's fields {sorted(ITEM_FIELDS)})"
    return None


def refusal(db_name: str, collection: str, found: str) -> ForeignCollectionError:
    """The error for ``collection`` holding ``found``."""
    hint = (
        " (convert langgraph-store-mongodb items into it with mongo-ckpt migrate "
        "--from-official-store: see docs/store.md)"
        if "langgraph-store-mongodb" in found
        else ""
    )
    return ForeignCollectionError(
        f"collection {collection!r} of database {db_name!r} holds {found}, not mongo-ckpt "
        "store items: the store would misread it, or its indexes would refuse or delete the "
        f"store's items. Give the store a collection of its own with collection_name= "
        f"(default 'store'){hint}; nothing was written"
    )
