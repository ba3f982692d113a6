"""One put and one chat turn, for tests of the client-level bulk write (no tests here)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from tests.graphs import thread


def put_one(
    saver: Any,
    thread_id: str,
    value: str = "x",
    parent: Any = None,
    checkpoint: Any = None,
    version: str = "1",
) -> Any:
    """A put of channel ``a`` = ``value`` at ``version`` (or of ``checkpoint``)."""
    checkpoint = checkpoint or generate_checkpoint(
        channel_values={"a": value}, channel_versions={"a": version}
    )
    config = parent or generate_config(thread_id)
    return saver.put(config, checkpoint, generate_metadata(), {"a": version})


def chat_turn(graph: Any, thread_id: str, text: str) -> None:
    graph.invoke({"messages": [HumanMessage(text)]}, thread(thread_id))
