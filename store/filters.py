"""Search filters, translated into a server-side query on the stored value.

``{"color": "red"}`` and ``{"size": {"$gte": 3}}`` become conditions on
``value.color`` and ``value.size``. Keys may name nested fields either with dots
(``"author.name"``) or by nesting (``{"author": {"name": ...}}``, which matches
the given sub-keys only, as in ``InMemoryStore``). No user key that MongoDB
would read as syntax reaches the query.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mongo_ckpt.identifiers import check_field_name, check_literal

COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
OPERATORS = (*COMPARISONS, "$in", "$nin", "$exists")


def value_clauses(filter: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Query clauses (all must hold) for a ``search`` filter; ``ValueError`` on bad input."""
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        raise TypeError(f"search filter must be a dict, got {type(filter).__name__}")
    clauses: list[dict[str, Any]] = []
    _translate(filter, "value", clauses)
    return clauses


def _translate(filter: Mapping[str, Any], parent: str, clauses: list[dict[str, Any]]) -> None:
    for key, expected in filter.items():
        check_field_name(key, "search filter")
        path = f"{parent}.{key}"
        if isinstance(expected, Mapping) and any(_is_operator(k) for k in expected):
            clauses.append({path: _operators(key, expected)})
        elif isinstance(expected, Mapping) and expected:
            _translate(expected, path, clauses)
        elif isinstance(expected, Mapping):  # ``{}`` matches any sub-document
            clauses.append({path: {"$type": "object"}})
        else:
            check_literal(expected, "search filter value")
            clauses.append({path: expected})


def _is_operator(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("$")


def _operators(key: str, conditions: Mapping[str, Any]) -> dict[str, Any]:
    translated: dict[str, Any] = {}
    for operator, operand in conditions.items():
        if operator not in OPERATORS:
            if not _is_operator(operator):
                raise ValueError(
                    f"search filter on {key!r} mixes operators and field names "
                    f"({list(conditions)}): use either {{'$gt': ...}} or {{'field': ...}}"
                )
            raise ValueError(
                f"search filter operator {operator!r} (on {key!r}) is not supported; "
                f"use one of {', '.join(OPERATORS)}"
            )
        if operator in ("$in", "$nin"):
            if not isinstance(operand, (list, tuple)):
                raise ValueError(
                    f"search filter {operator} on {key!r} needs a list, "
                    f"got {type(operand).__name__}"
                )
            operand = list(operand)
        elif operator == "$exists" and not isinstance(operand, bool):
            raise ValueError(f"search filter $exists on {key!r} needs True or False")
        check_literal(operand, "search filter value")
        translated[operator] = operand
    return translated
