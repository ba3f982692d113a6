"""One side of a rolling deployment of the store: ``MongoDBStore`` batches, one per line.

The test runs this file as a process of an earlier mongo-ckpt (its source tree first on
``PYTHONPATH``) beside the current release, on one collection. Usage::

    python tests/rolling_store.py URI DB DIRECT

It sets up the store and prints ``{"ready": <module file>}``; then, for every line read (a
JSON list of ``[namespace, key, value or null]``), it runs them as one batch of puts and
deletes and prints ``{"items": [[namespace, key, value, created_at, updated_at], ...],
"namespaces": [...]}``: every item and namespace it then reads (``items`` and
``namespaces`` below, which the current side calls too).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def items(store: Any) -> list[list[Any]]:
    """Every item under ``("roll",)``, sorted, as JSON can carry it."""
    found = store.search(("roll",), limit=1000)
    return sorted(
        [list(i.namespace), i.key, i.value, i.created_at.isoformat(), i.updated_at.isoformat()]
        for i in found
    )


def namespaces(store: Any) -> list[list[str]]:
    return [list(ns) for ns in store.list_namespaces(prefix=("roll",), limit=1000)]


def main(uri: str, db_name: str, direct: bool) -> None:
    from langgraph.store.base import PutOp
    from pymongo import MongoClient

    import mongo_ckpt
    from mongo_ckpt.store import MongoDBStore

    client: MongoClient[dict[str, Any]] = MongoClient(uri, directConnection=direct)
    store = MongoDBStore(client, db_name)
    store.setup()
    print(json.dumps({"ready": mongo_ckpt.__file__}), flush=True)
    for line in sys.stdin:
        store.batch([PutOp(tuple(ns), key, value) for ns, key, value in json.loads(line)])
        print(json.dumps({"items": items(store), "namespaces": namespaces(store)}), flush=True)
    client.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] == "1")
