"""Validation of identifiers and metadata filters before they reach a query."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bson.regex import Regex
from langchain_core.runnables import RunnableConfig


def as_id(value: Any) -> str | None:
    """``value`` as a string identifier (strings as they are, ints coerced), else ``None``.

    Only an exact ``str`` counts: a subclass such as ``bson.Code`` would be stored as
    another BSON type and then match nothing (or break reads that expect a string).
    """
    if type(value) is str:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def coerce_id(value: Any, field: str) -> str:
    """Return ``value`` as a string identifier, or raise ``TypeError`` naming ``field``.

    Anything but a string or an int (dicts such as ``{"$ne": None}``, lists,
    ``None``, booleans) is refused so it can never act as a query operator.
    """
    result = as_id(value)
    if result is None and isinstance(value, str):
        raise TypeError(
            f"{field} must be a plain str, got the str subclass {type(value).__name__}: "
            f"{value!r}; pass str(value)"
        )
    if result is None:
        raise TypeError(
            f"{field} must be a string (or an int), got {type(value).__name__}: {value!r}"
        )
    return result


MAX_LIMIT = 2**63 - 1
"""Largest ``limit`` (and ``offset``) a query accepts: MongoDB reads them as 64-bit ints."""


def check_limit(limit: Any, name: str = "limit") -> None:
    """Refuse a page size MongoDB cannot take (a non-int, or beyond ``MAX_LIMIT``)."""
    if limit is None:
        return
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(f"{name} must be an int, got {type(limit).__name__}: {limit!r}")
    if limit > MAX_LIMIT:
        raise ValueError(
            f"{name} must be at most 2**63 - 1 ({MAX_LIMIT}), got {limit}; "
            "pass a smaller number, or limit=None for no limit"
        )


def thread_key(config: RunnableConfig) -> tuple[str, str, str | None]:
    """Extract ``(thread_id, checkpoint_ns, checkpoint_id)`` from a config, validated."""
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is None:
        raise ValueError(
            "config['configurable']['thread_id'] is required: pass "
            "{'configurable': {'thread_id': ...}} when invoking the graph"
        )
    thread_id = coerce_id(configurable["thread_id"], "config['configurable']['thread_id']")
    checkpoint_ns = coerce_id(
        configurable.get("checkpoint_ns") or "", "config['configurable']['checkpoint_ns']"
    )
    checkpoint_id = configurable.get("checkpoint_id")
    if checkpoint_id is not None:
        checkpoint_id = coerce_id(checkpoint_id, "config['configurable']['checkpoint_id']")
    return thread_id, checkpoint_ns, checkpoint_id or None


def coerce_ids(values: Any, field: str) -> list[str]:
    """Validate a sequence of identifiers (``thread_ids``, ``run_ids``)."""
    if isinstance(values, (str, bytes, Mapping)):
        raise TypeError(f"{field} must be a list of strings, got {type(values).__name__}")
    return [coerce_id(v, f"{field}[{i}]") for i, v in enumerate(values)]


def check_field_name(key: Any, where: str) -> str:
    """Refuse a user-supplied document key that MongoDB would read as syntax."""
    if not isinstance(key, str):
        raise TypeError(f"{where} key must be a string, got {type(key).__name__}: {key!r}")
    if key.startswith("$"):
        # The official saver's wording, so code matching on it keeps working.
        raise ValueError(f"MongoDB operator keys are not allowed: {where} key {key!r}")
    if not key or "\x00" in key:
        raise ValueError(
            f"{where} key {key!r} is not allowed: keys must be non-empty, must not start "
            "with '$' and must not contain a NUL character"
        )
    return key


def check_filter_value(value: Any, where: str) -> None:
    """``check_literal``, and refuse regular expressions anywhere in ``value``: in a query
    the server applies them as a pattern match (and an encrypted store, evaluating
    filters in Python, would not), where filters promise equality."""
    check_literal(value, where, regex=False)


def check_literal(value: Any, where: str, *, regex: bool = True) -> None:
    """Refuse nested documents whose keys would be read as query operators (and, without
    ``regex``, regular expressions anywhere in ``value``)."""
    if not regex and isinstance(value, (re.Pattern, Regex)):
        raise TypeError(
            f"{where} must not be a regular expression ({type(value).__name__}: {value!r}): "
            "filters compare values for equality only; pass the exact value to match"
        )
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_field_name(k, where)
            check_literal(v, where, regex=regex)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_literal(v, where, regex=regex)
