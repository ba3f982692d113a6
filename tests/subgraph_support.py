"""A parent graph with a subgraph that interrupts (no tests here)."""

from __future__ import annotations

from collections import Counter

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Article(TypedDict, total=False):
    topic: str
    text: str
    published: bool


def parent_builder(calls: Counter) -> StateGraph:
    """START -> plan -> child [draft -> review (interrupts)] -> publish -> END."""

    def plan(state: Article) -> dict:
        calls["plan"] += 1
        return {}

    def draft(state: Article) -> dict:
        calls["draft"] += 1
        return {"text": f"draft about {state['topic']}"}

    def review(state: Article) -> dict:
        calls["review"] += 1
        verdict = interrupt({"review": state["text"]})
        return {"text": f"{state['text']} ({verdict})"}

    def publish(state: Article) -> dict:
        calls["publish"] += 1
        return {"published": True}

    child = StateGraph(Article)
    child.add_node("draft", draft)
    child.add_node("review", review)
    child.add_edge(START, "draft")
    child.add_edge("draft", "review")
    child.add_edge("review", END)

    parent = StateGraph(Article)
    parent.add_node("plan", plan)
    parent.add_node("child", child.compile())
    parent.add_node("publish", publish)
    parent.add_edge(START, "plan")
    parent.add_edge("plan", "child")
    parent.add_edge("child", "publish")
    parent.add_edge("publish", END)
    return parent
