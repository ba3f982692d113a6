"""mongo-ckpt: durable LangGraph checkpoints and memory on MongoDB."""

from pathlib import Path

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.client_bulk import ClientBulkWriteUnavailable
from mongo_ckpt.connection import UnacknowledgedWritesError
from mongo_ckpt.copying import ThreadExistsError
from mongo_ckpt.delta import MissingHistoryError
from mongo_ckpt.documents import ConflictingValueError
from mongo_ckpt.drivers import ClientClosedError
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.keyring import BoundValueError, KeyRing, MissingKeyError, keyring_serializer
from mongo_ckpt.leases import ThreadLeaseHeld, ThreadLeaseLost
from mongo_ckpt.maintenance import StaleParentError
from mongo_ckpt.reading import MissingValueError
from mongo_ckpt.rekeying import Rekeyed
from mongo_ckpt.saver import MongoDBSaver
from mongo_ckpt.schema import SchemaTooNewError, SchemaUpgradeRequired, library_version
from mongo_ckpt.source_tree import find_store_beside

find_store_beside(Path(__file__).resolve().parent)

# The installed distribution's version (its metadata); "(source)" in a tree not installed.
__version__ = library_version()

__all__ = [
    "AsyncMongoDBSaver",
    "BoundValueError",
    "ClientBulkWriteUnavailable",
    "ClientClosedError",
    "ConflictingValueError",
    "KeyRing",
    "MissingHistoryError",
    "MissingKeyError",
    "MissingValueError",
    "MongoCkptError",
    "MongoDBSaver",
    "Rekeyed",
    "SchemaTooNewError",
    "SchemaUpgradeRequired",
    "StaleParentError",
    "ThreadExistsError",
    "ThreadLeaseHeld",
    "ThreadLeaseLost",
    "UnacknowledgedWritesError",
    "__version__",
    "keyring_serializer",
]
