"""How a checkpoint document's own fields read back (``documents.checkpoint_document``
leaves out what reads back exactly without them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from mongo_ckpt import places


def stored_checkpoint(serde: SerializerProtocol, doc: Mapping[str, Any]) -> Checkpoint:
    """The checkpoint of checkpoint document ``doc``, without its channel values (the
    reader's to add)."""
    with places.at("checkpoint", doc):
        checkpoint: Checkpoint = serde.loads_typed(_typed(doc["checkpoint"]))
    checkpoint.setdefault("id", doc["checkpoint_id"])  # a slim document keeps it once
    return checkpoint


def stored_metadata(serde: SerializerProtocol, doc: Mapping[str, Any]) -> CheckpointMetadata:
    """The metadata of checkpoint document ``doc``: the serialized copy, or the plain one
    when that reads back exactly (a slim document then keeps only it)."""
    if "metadata_typed" in doc:
        with places.at("metadata", doc):
            metadata: CheckpointMetadata = serde.loads_typed(_typed(doc["metadata_typed"]))
        return metadata
    return cast(CheckpointMetadata, dict(doc["metadata"]))


def _typed(field: Mapping[str, Any]) -> tuple[str, bytes]:
    return field["type"], bytes(field["data"])
