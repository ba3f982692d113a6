"""Graphs compiled with the checkpointer and the store on one client: a fact remembered
across threads, and many memories saved per step as LangGraph's in-memory store keeps them."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import Op, PutOp
from langgraph.store.memory import InMemoryStore

from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from mongo_ckpt.store import AsyncMongoDBStore, MongoDBStore
from mongo_ckpt.store import documents as store_documents
from tests.backends import FirstArguments
from tests.store_support import DIMS, FakeEmbeddings


class Turn(TypedDict, total=False):
    user: str
    text: str
    answer: str
    turns: int


def remember(state: Turn) -> dict[str, Any]:
    """Sync node: stores a fact said as 'remember: ...' (the store from ``get_store()``)."""
    text = state["text"]
    if text.startswith("remember:"):
        fact = text.removeprefix("remember:").strip()
        get_store().put(("users", state["user"], "facts"), fact, {"fact": fact})
    return {"turns": state.get("turns", 0) + 1}


async def recall(state: Turn, runtime: Runtime) -> dict[str, Any]:
    """Async node: answers with the user's most relevant fact (the store from the runtime)."""
    assert runtime.store is not None
    found = await runtime.store.asearch(("users", state["user"], "facts"), query=state["text"])
    return {"answer": found[0].value["fact"] if found else "I don't know"}


def recall_sync(state: Turn, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    found = runtime.store.search(("users", state["user"], "facts"), query=state["text"])
    return {"answer": found[0].value["fact"] if found else "I don't know"}


def _graph(recall_node: Any) -> StateGraph:
    builder = StateGraph(Turn)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall_node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder


INDEX = {"dims": DIMS, "fields": ["fact"]}


async def test_graph_remembers_a_user_fact_across_threads(asaver: AsyncMongoDBSaver) -> None:
    store = AsyncMongoDBStore.from_saver(
        asaver, index={**INDEX, "embed": FakeEmbeddings()}, exact_search=True
    )
    assert store.client is asaver.client and store.db.name == asaver.db.name
    graph = _graph(recall).compile(checkpointer=asaver, store=store)

    one = {"configurable": {"thread_id": "thread-1"}}
    two = {"configurable": {"thread_id": "thread-2"}}
    await graph.ainvoke({"user": "ada", "text": "remember: my favourite colour is teal"}, one)
    await graph.ainvoke({"user": "ada", "text": "remember: I live in Lisbon"}, one)
    other_user = await graph.ainvoke({"user": "bob", "text": "what is my favourite colour"}, two)
    assert other_user["answer"] == "I don't know"
    answer = await graph.ainvoke({"user": "ada", "text": "what is my favourite colour"}, two)
    assert answer["answer"] == "my favourite colour is teal"

    # the threads' state lives in the checkpointer, the fact in the store
    assert (await graph.aget_state(one)).values["turns"] == 2
    assert (await graph.aget_state(two)).values["turns"] == 2
    assert await store.alist_namespaces() == [("users", "ada", "facts")]


def test_sync_graph_remembers_a_user_fact_across_threads(saver: MongoDBSaver) -> None:
    store = MongoDBStore.from_saver(
        saver, index={**INDEX, "embed": FakeEmbeddings()}, exact_search=True
    )
    graph = _graph(recall_sync).compile(checkpointer=saver, store=store)
    graph.invoke(
        {"user": "ada", "text": "remember: my cat is called Miso"},
        {"configurable": {"thread_id": "a"}},
    )
    answer = graph.invoke(
        {"user": "ada", "text": "what is my cat called"}, {"configurable": {"thread_id": "b"}}
    )
    assert answer["answer"] == "my cat is called Miso"
    assert graph.get_state({"configurable": {"thread_id": "a"}}).values["turns"] == 1


def test_from_saver_refuses_a_mismatched_saver(saver: MongoDBSaver) -> None:
    with pytest.raises(TypeError, match="expects AsyncMongoDBSaver, got MongoDBSaver"):
        AsyncMongoDBStore.from_saver(saver)


class Notes(TypedDict, total=False):
    user: str
    notes: list[str]
    forget: list[str]
    namespaces: list[str]
    found: list[str]


async def import_notes(state: Notes, runtime: Runtime) -> dict[str, Any]:
    """Saves what the agent took from a document, and forgets what it was told to, in one
    batch (as an agent storing many memories at once does)."""
    assert runtime.store is not None
    ns = ("users", state["user"], "notes")
    ops: list[Op] = [
        PutOp(ns, note.split(":")[0], {"text": note}) for note in state.get("notes", [])
    ]
    ops += [PutOp(ns, key, None) for key in state.get("forget", [])]
    await runtime.store.abatch(ops)
    return {}


async def review(state: Notes, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None
    listed = await runtime.store.alist_namespaces(prefix=("users",))
    found = await runtime.store.asearch(("users", state["user"]), limit=100)
    return {
        "namespaces": ["/".join(ns) for ns in listed],
        "found": sorted(f"{item.key}={item.value['text']}" for item in found),
    }


def _notes_graph() -> StateGraph:
    builder = StateGraph(Notes)
    builder.add_node("import_notes", import_notes)
    builder.add_node("review", review)
    builder.add_edge(START, "import_notes")
    builder.add_edge("import_notes", "review")
    builder.add_edge("review", END)
    return builder


def _turns() -> list[tuple[str, Notes]]:
    """Batches past ``INSERTS_FROM`` puts: new notes (inserted), then notes half stored
    already (an insert refused, the rest sent as upserts) with deletes, on two threads."""
    many = store_documents.INSERTS_FROM + 4
    return [
        ("a", {"user": "ada", "notes": [f"n{i}: first {i}" for i in range(many)]}),
        ("b", {"user": "bob", "notes": [f"n{i}: bob {i}" for i in range(many - 3)]}),
        (
            "a",
            {
                "user": "ada",
                "notes": [f"n{i}: second {i}" for i in range(many // 2, many + many // 2)],
                "forget": ["n0", "n1"],
            },
        ),
        ("b", {"user": "bob", "notes": [], "forget": [f"n{i}" for i in range(many - 4)]}),
        ("c", {"user": "cyd", "notes": [f"n{i}: cyd {i}" for i in range(many)]}),
    ]


async def _run_notes(graph: Any, sent: list[Any]) -> tuple[list[Any], list[list[set[str]]]]:
    """Each turn's answers and state, and the kinds of requests of each bulk write it sent
    (``sent`` fills with the requests of every ``bulk_write``)."""
    outputs, writes = [], []
    for thread, turn in _turns():
        config = {"configurable": {"thread_id": thread}}
        before = len(sent)
        result = await graph.ainvoke(turn, config)
        writes.append([{type(r).__name__ for r in requests} for requests in sent[before:]])
        outputs.append((result["namespaces"], result["found"]))
        outputs.append((await graph.aget_state(config)).values)
    return outputs, writes


async def test_a_graph_storing_many_memories_per_step_matches_in_memory_store(
    asaver: AsyncMongoDBSaver,
) -> None:
    """A node that saves a batch of memories and one that lists and searches them: the
    same answers and states as LangGraph's in-memory checkpointer and store, with the
    batches sent insert-first (and once as upserts after a refused insert)."""
    # The items' own bulk writes, to read their requests (the one-command path sends the
    # same requests: tests/test_store_commands.py).
    store = AsyncMongoDBStore.from_saver(asaver, client_bulk_write=False)
    await store.setup()
    sent: list[Any] = []
    store.collections["store"] = FirstArguments(store.collections["store"], "bulk_write", sent)
    graph = _notes_graph().compile(checkpointer=asaver, store=store)
    ours, writes = await _run_notes(graph, sent)
    reference, _ = await _run_notes(
        _notes_graph().compile(checkpointer=InMemorySaver(), store=InMemoryStore()), []
    )
    assert ours == reference
    # Each turn's batch is its first bulk write (then the listing's settled entries): the
    # batches of many puts insert; ada's second meets n6 stored and sends the rest again.
    inserting = [bool(turn) and "InsertOne" in turn[0] for turn in writes]
    assert inserting == [True, True, True, False, True], writes
    assert "InsertOne" not in writes[2][1] and "UpdateOne" in writes[2][1], writes
    assert ours[-2] == (
        ["users/ada/notes", "users/bob/notes", "users/cyd/notes"],
        sorted(f"n{i}=n{i}: cyd {i}" for i in range(store_documents.INSERTS_FROM + 4)),
    )
