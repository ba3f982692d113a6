"""The in-process backend (mongomock) used by the demo and the test suite."""

from __future__ import annotations

from typing import Any


def patch_mongomock_bulk() -> None:
    """Let mongomock 4.3 accept the ``sort=`` that PyMongo >= 4.11 passes to bulk updates,
    report each upsert under its request's index, as MongoDB does (mongomock numbers
    them by how many upserted before: ``upserted_ids`` pointed at the wrong requests), and
    give ``$currentDate`` MongoDB's millisecond precision (mongomock's microseconds sort a
    date after a later, stored one).

    Touches mongomock only; the library itself speaks plain PyMongo. Idempotent; the
    saver and store constructors run it when they adopt a mongomock client.
    """
    import mongomock
    import mongomock.collection

    if not getattr(mongomock.utcnow, "_milliseconds", False):  # type: ignore[attr-defined]
        mongomock.utcnow = _milliseconds(mongomock.utcnow)  # type: ignore[attr-defined]

    builder = mongomock.collection.BulkOperationBuilder
    if not getattr(builder.execute, "_indexes_upserts", False):
        builder.execute = _indexing_upserts(builder.execute)  # type: ignore[method-assign]
    for name in ("add_update", "add_replace"):
        original = getattr(builder, name)
        if getattr(original, "_ignores_sort", False):
            continue

        def without_sort(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            kw.pop("sort", None)
            return _original(self, *args, **kw)

        without_sort._ignores_sort = True  # type: ignore[attr-defined]
        setattr(builder, name, without_sort)


def _milliseconds(utcnow: Any) -> Any:
    def now() -> Any:
        moment = utcnow()
        return moment.replace(microsecond=moment.microsecond // 1000 * 1000)

    now._milliseconds = True  # type: ignore[attr-defined]
    return now


def _indexing_upserts(execute: Any) -> Any:
    def indexed(position: int, run: Any) -> Any:
        def exec_step() -> Any:
            out = run()
            if out.get("upserted") is not None:
                out = {**out, "upserted": (position, out["upserted"])}
            return out

        exec_step.__name__ = run.__name__  # mongomock dispatches on it
        return exec_step

    def fixed(result: Any) -> Any:
        result["upserted"] = [
            {"index": e["_id"][0], "_id": e["_id"][1]} for e in result.get("upserted", [])
        ]
        return result

    def execute_indexed(self: Any, *args: Any, **kwargs: Any) -> Any:
        from pymongo.errors import BulkWriteError  # what mongomock raises

        self.executors = [indexed(i, run) for i, run in enumerate(self.executors)]
        try:
            return fixed(execute(self, *args, **kwargs))
        except BulkWriteError as error:
            fixed(error.details)
            raise

    execute_indexed._indexes_upserts = True  # type: ignore[attr-defined]
    return execute_indexed
