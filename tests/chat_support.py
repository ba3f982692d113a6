"""A chat graph over a state class, and human turns for it (no tests here)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.prose import prose


def chat(state: type = MessagesState) -> StateGraph:
    def reply(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(prose(n, 3000), id=f"ai-{n}")]}

    builder = StateGraph(state)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


def human(turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(prose(1000 + turn, 3000), id=f"human-{turn}")]}
