"""The in-process backend (mongomock) used by the demo and the test suite."""

from __future__ import annotations

from typing import Any


def patch_mongomock_bulk() -> None:
    """Let mongomock 4.3 accept the ``sort=`` that PyMongo >= 4.11 passes to bulk updates.

    Touches mongomock only; the library itself speaks plain PyMongo. Idempotent; the
    saver and store constructors run it when they adopt a mongomock client.
    """
    import mongomock.collection

    builder = mongomock.collection.BulkOperationBuilder
    for name in ("add_update", "add_replace"):
        original = getattr(builder, name)
        if getattr(original, "_ignores_sort", False):
            continue

        def without_sort(self: Any, *args: Any, _original: Any = original, **kw: Any) -> Any:
            kw.pop("sort", None)
            return _original(self, *args, **kw)

        without_sort._ignores_sort = True  # type: ignore[attr-defined]
        setattr(builder, name, without_sort)
