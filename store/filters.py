"""Search filters, translated into a server-side query on the stored value.

``{"color": "red"}`` and ``{"size": {"$gte": 3}}`` become conditions on
``value.color`` and ``value.size``. Keys may name nested fields either with dots
(``"author.name"``) or by nesting (``{"author": {"name": ...}}``, which matches
the given sub-keys only, as in ``InMemoryStore``). Path parts, nested keys and the keys
inside literals are escaped as stored values' keys are (``documents.escaped_key``), so a
filter names the keys as they were put. No user key that MongoDB would read as syntax
reaches the query.

Where values are stored encrypted the server cannot read them: ``matches``
evaluates the same translated clauses in Python on the decrypted value, with
MongoDB's semantics for them (arrays matched by their elements, ``None``
matching a missing field, range operators comparing only values of one BSON
type, documents compared in field order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from operator import ge, gt, le, lt
from typing import Any

from mongo_ckpt.identifiers import check_field_name, check_filter_value
from mongo_ckpt.store.documents import escaped_key, stored_value

COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
OPERATORS = (*COMPARISONS, "$in", "$nin", "$exists")


def value_clauses(filter: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Query clauses (all must hold) for a ``search`` filter; ``ValueError`` on bad input."""
    if filter is None:
        return []
    if not isinstance(filter, Mapping):
        raise TypeError(f"search filter must be a dict, got {type(filter).__name__}")
    clauses: list[dict[str, Any]] = []
    for key, expected in filter.items():
        _translate(key, expected, f"value.{_path(key)}", clauses)
    return clauses


def _path(key: Any) -> str:
    """A top-level filter key, a dotted path, as the stored field path."""
    check_field_name(key, "search filter")
    parts = key.split(".")
    for part in parts:
        if not part:
            raise ValueError(
                f"search filter key {key!r} names an empty field: a dotted path needs a "
                "name before, between and after its dots"
            )
        check_field_name(part, "search filter")
    return ".".join(escaped_key(part) for part in parts)


def _translate(key: str, expected: Any, path: str, clauses: list[dict[str, Any]]) -> None:
    if isinstance(expected, Mapping) and any(_is_operator(k) for k in expected):
        clauses.append({path: _operators(key, expected)})
    elif isinstance(expected, Mapping) and expected:
        for sub_key, sub_expected in expected.items():
            check_field_name(sub_key, "search filter")
            _translate(sub_key, sub_expected, f"{path}.{escaped_key(sub_key)}", clauses)
    elif isinstance(expected, Mapping):  # ``{}`` matches any sub-document
        clauses.append({path: {"$type": "object"}})
    else:
        check_filter_value(expected, "search filter value")
        clauses.append({path: stored_value(expected)})


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
        check_filter_value(operand, "search filter value")
        translated[operator] = stored_value(operand)
    return translated


# -- evaluation in Python, for values the server cannot read ---------------------

_MISSING = object()
_RANGES: dict[str, Callable[[int, int], bool]] = {
    "$gt": gt,
    "$gte": ge,
    "$lt": lt,
    "$lte": le,
}
Reached = list[tuple[Any, bool]]
# Rank in BSON's order of types (tested in this order: bool before int, which it subclasses).
_BRACKETS: list[tuple[int, Any]] = [
    (1, type(None)),
    (8, bool),
    (2, (int, float)),
    (3, str),
    (4, Mapping),
    (5, (list, tuple)),
    (6, (bytes, bytearray)),
    (9, datetime),
]


def matches(value: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``value`` passes ``clauses`` (from ``value_clauses``), as the server would decide
    on the value as stored."""
    document = {"value": stored_value(value, strict=False)}
    return all(
        _holds(_reach(document, path), condition)
        for clause in clauses
        for path, condition in clause.items()
    )


def _reach(document: Any, path: str) -> Reached:
    """Every value ``path`` reaches, each with whether an array there also matches by its
    elements: not when an index picked it (``a.0`` over ``[[1]]`` is the array ``[1]``)."""
    reached: Reached = [(document, True)]
    for part in path.split("."):
        step: Reached = []
        for current, _ in reached:
            if isinstance(current, Mapping):
                step.append((current.get(part, _MISSING), True))
            elif _is_array(current):
                # A number names both an element and a field of each element document.
                if part.isascii() and part.isdigit():
                    index = int(part)
                    in_range = index < len(current)
                    step.append((current[index], False) if in_range else (_MISSING, True))
                step.extend(
                    (e.get(part, _MISSING), True) for e in current if isinstance(e, Mapping)
                )
            else:
                step.append((_MISSING, True))
        reached = step
    return reached


def _holds(reached: Reached, condition: Any) -> bool:
    if isinstance(condition, Mapping):  # operators: value_clauses never emits a literal dict
        return all(_operator(reached, op, operand) for op, operand in condition.items())
    return _equal_any(reached, condition)


def _operator(reached: Reached, op: str, operand: Any) -> bool:
    if op in ("$ne", "$nin"):
        return not _operator(reached, {"$ne": "$eq", "$nin": "$in"}[op], operand)
    if op == "$eq":
        return _equal_any(reached, operand)
    if op == "$in":
        return any(_equal_any(reached, candidate) for candidate in operand)
    if op == "$exists":
        return bool(any(v is not _MISSING for v, _ in reached) == operand)
    if op == "$type":  # only {"$type": "object"}, for an empty nested filter
        return _any_value(reached, lambda v: isinstance(v, Mapping))
    if operand is None:  # null is only equal to null (or a missing field), never above or below
        return op in ("$gte", "$lte") and _equal_any(reached, None)
    compare = _RANGES[op]
    return _any_value(
        reached, lambda v: _rank(v) == _rank(operand) and compare(_compare(v, operand), 0)
    )


def _any_value(reached: Reached, test: Callable[[Any], bool]) -> bool:
    """``test`` holds for a value reached or, for an array, one of its elements."""
    return any(
        v is not _MISSING and (test(v) or (expand and _is_array(v) and any(map(test, v))))
        for v, expand in reached
    )


def _equal_any(reached: Reached, expected: Any) -> bool:
    if expected is None and any(v is _MISSING for v, _ in reached):
        return True
    return _any_value(reached, lambda v: _equal(v, expected))


def _is_array(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _rank(value: Any) -> tuple[int, str]:
    """The BSON type bracket of ``value``: values compare only within one (a type BSON does
    not have, which only a serde can store, is a bracket of its own)."""
    for rank, types in _BRACKETS:
        if isinstance(value, types):
            return rank, ""
    return 10, type(value).__name__


def _equal(a: Any, b: Any) -> bool:
    return _rank(a) == _rank(b) and _compare(a, b) == 0


def _compare(a: Any, b: Any) -> int:
    """-1, 0 or 1: BSON order of two values of one type bracket."""
    if isinstance(a, Mapping) or _is_array(a):  # by field: value type, then name, then value
        fields = (lambda v: v.items()) if isinstance(a, Mapping) else enumerate
        for (ka, va), (kb, vb) in zip(fields(a), fields(b)):
            order = _order(_rank(va), _rank(vb)) or _order(ka, kb) or _compare(va, vb)
            if order:
                return order
        return _order(len(a), len(b))
    if _is_nan(a) or _is_nan(b):
        return _order(not _is_nan(a), not _is_nan(b))  # NaN equals NaN, below every number
    if isinstance(a, (bytes, bytearray)):
        return _order((len(a), bytes(a)), (len(b), bytes(b)))
    if isinstance(a, datetime):
        return _order(_utc(a), _utc(b))
    try:
        return _order(a, b)
    except TypeError:
        return 0 if a == b else _order(repr(a), repr(b))


def _order(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _utc(moment: datetime) -> datetime:
    # BSON dates are UTC; drivers hand them back naive.
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment
