"""Validation of identifiers and metadata filters before they reach a query."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig


def as_id(value: Any) -> str | None:
    """``value`` as a string identifier (strings as they are, ints coerced), else ``None``."""
    if isinstance(value, str):
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
    if result is None:
        raise TypeError(
            f"{field} must be a string (or an int), got {type(value).__name__}: {value!r}"
        )
    return result


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
    if not key or key.startswith("$") or "\x00" in key:
        raise ValueError(
            f"{where} key {key!r} is not allowed: keys must be non-empty, must not start "
            "with '$' and must not contain a NUL character"
        )
    return key


def check_literal(value: Any, where: str) -> None:
    """Refuse nested documents whose keys would be read as query operators."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_field_name(k, where)
            check_literal(v, where)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_literal(v, where)
