"""Checkpoint data written by real LangGraph graphs, for the command-line tests."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner, Result
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.cli import CliState, cli
from tests.graphs import chat_builder, thread

CHAT_TURNS = ("Hi, I am Ada.", "I like tea.", "What do I like?")


class Booking(TypedDict, total=False):
    request: str
    approved: bool
    outcome: str


def booking_builder() -> StateGraph:
    """START -> ask (interrupts for approval) -> book -> END."""

    def ask(state: Booking) -> dict:
        return {"approved": interrupt({"confirm": state["request"]}) == "yes"}

    def book(state: Booking) -> dict:
        return {"outcome": "booked" if state["approved"] else "declined"}

    builder = StateGraph(Booking)
    builder.add_node("ask", ask)
    builder.add_node("book", book)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "book")
    builder.add_edge("book", END)
    return builder


class Outer(TypedDict, total=False):
    topic: str
    draft: str


def nested_builder() -> StateGraph:
    """A parent whose ``write`` node is a compiled subgraph: checkpoints in two namespaces."""
    inner = StateGraph(Outer)
    inner.add_node("outline", lambda s: {"draft": f"outline of {s['topic']}"})
    inner.add_node("polish", lambda s: {"draft": s["draft"] + ", polished"})
    inner.add_edge(START, "outline")
    inner.add_edge("outline", "polish")
    inner.add_edge("polish", END)
    outer = StateGraph(Outer)
    outer.add_node("write", inner.compile(checkpointer=True))
    outer.add_edge(START, "write")
    outer.add_edge("write", END)
    return outer


def write_threads(saver: MongoDBSaver) -> dict[str, Any]:
    """Threads ``chat-ada`` (three turns), ``chat-bob`` (one turn), ``booking`` (stopped at
    an interrupt) and ``article`` (a subgraph); returns the compiled graphs by thread."""
    chat = chat_builder().compile(checkpointer=saver)
    for text in CHAT_TURNS:
        chat.invoke({"messages": [HumanMessage(text)]}, thread("chat-ada", user="ada"))
    chat.invoke({"messages": [HumanMessage("Hello")]}, thread("chat-bob", user="bob"))
    booking = booking_builder().compile(checkpointer=saver)
    booking.invoke({"request": "table for two"}, thread("booking"))
    article = nested_builder().compile(checkpointer=saver)
    article.invoke({"topic": "tea"}, thread("article"))
    return {"chat-ada": chat, "chat-bob": chat, "booking": booking, "article": article}


def resume_booking(graph: Any) -> None:
    graph.invoke(Command(resume="yes"), thread("booking"))


def invoke(client: Any, *args: str, env: dict[str, Any] | None = None) -> Result:
    """``mongo-ckpt *args`` on ``client`` (the CLI's own client otherwise)."""
    return CliRunner().invoke(cli, list(args), obj=CliState(client=client), env=env)
