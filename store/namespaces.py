"""Namespaces: validation, their stored forms, and the queries that match them.

A namespace is stored three ways: ``namespace`` (the labels, as an array),
``ns`` (the labels joined, unique together with ``key``) and ``prefixes``
(the joined form of every leading part, so a prefix search is one indexed
equality). Labels are joined with NUL, which labels may not contain and which
sorts below every other character: joined forms sort exactly like tuples, so
the server can sort and page namespaces the way ``InMemoryStore`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
    validate_op_namespace,
)

SEPARATOR = "\x00"
WILDCARD = "*"
ItemKey = tuple[str, str]
"""An item's identity in a batch: (joined namespace, key)."""


def check_namespace(op: Op) -> None:
    """Raise ``InvalidNamespaceError`` for a namespace ``InMemoryStore`` would refuse."""
    for path in _paths(op):
        if isinstance(path, str):
            raise InvalidNamespaceError(
                f"Namespace must be a tuple of strings, got the string {path!r}: write ({path!r},)"
            )
        check_namespace_shape(path)
    validate_op_namespace(op)
    if isinstance(op, PutOp) and not op.namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


def check_namespace_shape(namespace: Any) -> None:
    """``TypeError`` unless ``namespace`` is a tuple (or list) of exact ``str`` labels
    (a ``bson.Code`` label would be stored as code, not text)."""
    if not isinstance(namespace, (tuple, list)):
        raise TypeError(
            "Namespace must be a tuple of strings such as ('users', 'alice'), "
            f"got {type(namespace).__name__}: {namespace!r}"
        )
    for label in namespace:
        if isinstance(label, str) and type(label) is not str:
            raise TypeError(
                f"Namespace label {label!r} must be a plain str, got the str subclass "
                f"{type(label).__name__}; pass str(label)"
            )


def _paths(op: Op) -> list[Any]:
    if isinstance(op, (GetOp, PutOp)):
        return [op.namespace]
    if isinstance(op, SearchOp):
        return [op.namespace_prefix]
    if isinstance(op, ListNamespacesOp):
        return [condition.path for condition in op.match_conditions or ()]
    raise ValueError(f"Unknown operation type: {type(op)}")


def joined(namespace: Sequence[str]) -> str:
    return SEPARATOR.join(namespace)


def key_for(namespace: Sequence[str], key: str) -> ItemKey:
    return joined(namespace), key


def split(joined_namespace: str) -> tuple[str, ...]:
    return tuple(joined_namespace.split(SEPARATOR))


def prefixes(namespace: Sequence[str]) -> list[str]:
    """The joined form of each leading part: ``("a", "b")`` -> ``["a", "a\\0b"]``."""
    return [joined(namespace[: i + 1]) for i in range(len(namespace))]


def prefix_query(prefix: Sequence[str]) -> dict[str, Any]:
    """Items whose namespace starts with ``prefix`` (every item for ``()``)."""
    return {"prefixes": joined(prefix)} if prefix else {}


def match_clauses(
    conditions: Sequence[MatchCondition], levels: str = "prefixes", labels: str = "namespace"
) -> list[dict[str, Any]]:
    """Query clauses for ``list_namespaces`` prefix/suffix conditions with ``*`` wildcards,
    on documents holding the joined leading parts in ``levels`` and the labels in ``labels``."""
    clauses: list[dict[str, Any]] = []
    for condition in conditions:
        path = tuple(condition.path)
        if not path:
            continue
        if condition.match_type == "prefix":
            clauses.extend(_prefix_clauses(path, levels, labels))
        elif condition.match_type == "suffix":
            clauses.append(_suffix_clause(path, labels))
        else:
            raise ValueError(
                f"match_type must be 'prefix' or 'suffix', got {condition.match_type!r}"
            )
    return clauses


def _prefix_clauses(path: tuple[str, ...], levels: str, labels: str) -> list[dict[str, Any]]:
    # The leading labels before any wildcard are one indexed equality on ``levels``.
    fixed = next((i for i, label in enumerate(path) if label == WILDCARD), len(path))
    clauses: list[dict[str, Any]] = [{levels: joined(path[:fixed])}] if fixed else []
    clauses.extend(
        {f"{labels}.{i}": label} for i, label in enumerate(path) if i >= fixed and label != WILDCARD
    )
    if path[-1] == WILDCARD:  # a trailing wildcard still needs a label there
        clauses.append({f"{labels}.{len(path) - 1}": {"$exists": True}})
    return clauses


def _suffix_clause(path: tuple[str, ...], labels: str) -> dict[str, Any]:
    checks: list[dict[str, Any]] = [{"$gte": [{"$size": f"${labels}"}, len(path)]}]
    checks.extend(
        # A label is data, never a field path or an expression: ``$ns`` is the text "$ns".
        {"$eq": [{"$arrayElemAt": [f"${labels}", i - len(path)]}, {"$literal": label}]}
        for i, label in enumerate(path)
        if label != WILDCARD
    )
    return {"$expr": {"$and": checks}}


def depth_key(max_depth: int | None) -> Any:
    """Aggregation expression for an item's namespace truncated to ``max_depth``, joined."""
    if max_depth is None:
        return "$ns"
    return {"$arrayElemAt": [{"$slice": ["$prefixes", max_depth]}, -1]}
