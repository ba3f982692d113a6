"""``mongo-ckpt demo``: a deterministic agent on ``AsyncMongoDBSaver``, end to end.

A rule-based assistant (no LLM, no network) that remembers what the user says
about themselves, asks for approval with ``interrupt()`` before it books
anything, and is then taken back in time: replayed from an earlier checkpoint
and forked with ``update_state``. It prints what the saver stored, then shows
long-term memory: an ``AsyncMongoDBStore`` sharing the saver's client, where a fact told
in one thread is recalled in another; and finally the node cache: an
``AsyncMongoDBCache`` on the same client, which serves a node's second call from MongoDB.

The demo drops its database (``mongo_ckpt_demo`` unless ``--db``) before it starts.

With ``MONGODB_URI`` (or ``--uri``) it runs on that server through PyMongo's
``AsyncMongoClient``; otherwise on mongomock-motor, in process.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Annotated, Any, TextIO

import bson
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.types import CachePolicy, Command, StateSnapshot, interrupt
from typing_extensions import NotRequired, TypedDict

from mongo_ckpt.aio import AsyncMongoDBSaver
from mongo_ckpt.connection import DEFAULT_TIMEOUT_MS
from mongo_ckpt.errors import MongoCkptError
from mongo_ckpt.inprocess import patch_mongomock_bulk
from mongo_ckpt.layout import BLOBS, CHECKPOINTS
from mongo_ckpt.redaction import reason, redacted
from mongo_ckpt.schema import SCHEMA

DEFAULT_DB_NAME = "mongo_ckpt_demo"
THREAD = "demo"
OTHER_THREAD = "demo-other"
QUESTION = "What do you know about me?"
TURNS = ("Hi, my name is Ada.", "I like tea.", QUESTION)
BOOKING = "Please book a table for two."
USER_ID = "ada"
MEMORY_THREADS = ("memory-1", "memory-2")
MEMORY_TURNS = ("My name is Ada.", "I like green tea.")
CACHE_TTL_SECONDS = 600
SOURCE = "mongo_ckpt/demo.py"
IN_PROCESS_MISSING = (
    "The in-process backend needs mongomock-motor, which comes with the demo extra:\n"
    "    pip install -e '.[demo]'      (or: pip install mongomock-motor)\n"
    "or point the demo at a MongoDB server:\n"
    "    MONGODB_URI='mongodb://localhost:27017/?directConnection=true' "
    "python -m mongo_ckpt demo"
)


class MissingBackendError(MongoCkptError, RuntimeError):
    """No MongoDB URI was given and the in-process backend is not installed."""


class UnreachableServerError(MissingBackendError):
    """The server at the given URI did not answer a ``ping`` in time."""


SERVER_SELECTION_TIMEOUT_MS = 3_000


def unreachable_message(where: str, error: BaseException) -> str:
    """One paragraph: what was tried, what to check, how to run without a server."""
    return (
        f"mongo-ckpt demo: could not reach MongoDB at {where} within "
        f"{SERVER_SELECTION_TIMEOUT_MS // 1000} s ({type(error).__name__}: {reason(error)}). "
        "Check that the server is running and reachable at that address (for the bundled "
        "one: docker compose -f docker/compose.yml up -d --wait), and that the URI's host, "
        "port and credentials are right (add ?directConnection=true for a single node). "
        "To run the demo without a server, unset MONGODB_URI (and drop --uri): it then "
        "runs in process on mongomock-motor."
    )


# -- the agent -----------------------------------------------------------------


class DemoState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    pending: NotRequired[str | None]  # what to book once the user approves


def facts_from(messages: Sequence[AnyMessage]) -> tuple[str | None, list[str]]:
    """The user's name and likes, as stated in the human messages of the conversation."""
    name, likes = None, []
    for message in messages:
        if not isinstance(message, HumanMessage):
            continue
        text = str(message.content)
        if match := re.search(r"\bmy name is (\w+)", text, re.IGNORECASE):
            name = match.group(1).capitalize()
        if match := re.search(r"\bi like ([\w\s-]+?)[.!]?$", text, re.IGNORECASE):
            likes.append(match.group(1))
    return name, likes


def describe(messages: Sequence[AnyMessage]) -> str:
    """What the assistant answers to ``QUESTION``."""
    name, likes = facts_from(messages)
    parts = ([f"your name is {name}"] if name else []) + (
        [f"you like {' and '.join(likes)}"] if likes else []
    )
    if not parts:
        return "I don't know anything about you yet."
    sentence = " and ".join(parts)
    return sentence[0].upper() + sentence[1:] + "."


def assistant(state: DemoState) -> dict[str, Any]:
    """Answer the last user message from what the conversation so far holds."""
    messages = state["messages"]
    text = str(messages[-1].content)
    if match := re.search(r"\bbook ([\w\s-]+?)[.!]?$", text, re.IGNORECASE):
        return {"pending": match.group(1)}
    if re.search(r"what do you know about me", text, re.IGNORECASE):
        reply = describe(messages)
    elif match := re.search(r"\bmy name is (\w+)", text, re.IGNORECASE):
        reply = f"Nice to meet you, {match.group(1).capitalize()}."
    elif match := re.search(r"\bi like ([\w\s-]+?)[.!]?$", text, re.IGNORECASE):
        reply = f"Noted: you like {match.group(1)}."
    else:
        reply = "I remember your name and what you like, and I book things once you approve."
    return {"messages": [AIMessage(reply)]}


def approval(state: DemoState) -> dict[str, Any]:
    """Pause the graph until the user approves or rejects the pending action."""
    booking = state["pending"] or ""
    decision = interrupt({"action": f"book {booking}", "question": "approve or reject?"})
    reply = f"Booked {booking}." if decision == "approve" else f"Not booked: {booking}."
    return {"pending": None, "messages": [AIMessage(reply)]}


def route(state: DemoState) -> str:
    return "approval" if state.get("pending") else END


def build_graph() -> StateGraph[DemoState]:
    """``START -> assistant -> (approval) -> END``."""
    builder = StateGraph(DemoState)
    builder.add_node("assistant", assistant)
    builder.add_node("approval", approval)
    builder.add_edge(START, "assistant")
    builder.add_conditional_edges("assistant", route, ["approval", END])
    builder.add_edge("approval", END)
    return builder


async def remember(state: DemoState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
    """Keep what the user says about themselves in the store, under their user id, so
    every thread of that user can recall it; answer ``QUESTION`` from the store."""
    namespace = ("users", config["configurable"]["user_id"])
    text = str(state["messages"][-1].content)
    found = await store.aget(namespace, "profile")
    profile: dict[str, Any] = dict(found.value) if found else {"name": None, "likes": []}
    name, likes = facts_from([HumanMessage(text)])
    if name or likes:
        profile["name"] = name or profile["name"]
        profile["likes"] = [*profile["likes"], *likes]
        await store.aput(namespace, "profile", profile)
        return {"messages": [AIMessage("I'll remember that, in every thread.")]}
    told = [HumanMessage(f"my name is {profile['name']}")] if profile["name"] else []
    told += [HumanMessage(f"I like {like}") for like in profile["likes"]]
    return {"messages": [AIMessage(f"From long-term memory: {describe(told)}")]}


def build_memory_graph() -> StateGraph[DemoState]:
    """``START -> remember -> END``, for a graph compiled with ``store=``."""
    builder = StateGraph(DemoState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder


class ForecastState(TypedDict):
    city: str
    forecast: NotRequired[str]


def build_cached_graph(runs: list[str]) -> StateGraph[ForecastState]:
    """``START -> forecast -> END``; ``forecast`` (an expensive call, say) has a
    ``CachePolicy`` and appends its input to ``runs`` each time it really runs."""

    def forecast(state: ForecastState) -> dict[str, Any]:
        runs.append(state["city"])
        return {"forecast": f"sunny in {state['city']}"}

    builder = StateGraph(ForecastState)
    builder.add_node("forecast", forecast, cache_policy=CachePolicy(ttl=CACHE_TTL_SECONDS))
    builder.add_edge(START, "forecast")
    builder.add_edge("forecast", END)
    return builder


# -- the backend ---------------------------------------------------------------


def open_client(uri: str | None) -> tuple[Any, str]:
    """An async client for ``uri`` (in process when ``None``) and a line saying which."""
    if uri:
        from pymongo import AsyncMongoClient

        # Shown without credentials and options.
        where = redacted(uri, uri).split("?")[0].rstrip("/")
        options: dict[str, Any] = {"serverSelectionTimeoutMS": SERVER_SELECTION_TIMEOUT_MS}
        if "timeoutms" not in uri.lower():
            options["timeoutMS"] = DEFAULT_TIMEOUT_MS
        where = f"Backend: MongoDB at {where} (PyMongo AsyncMongoClient)."
        return AsyncMongoClient(uri, **options), where
    try:
        from mongomock_motor import AsyncMongoMockClient
    except ImportError as exc:
        raise MissingBackendError(IN_PROCESS_MISSING) from exc
    patch_mongomock_bulk()
    return AsyncMongoMockClient(), (
        "Backend: in-process (mongomock-motor). MONGODB_URI is not set, so nothing is\n"
        "written to a server and everything is gone when the demo exits. To use a real\n"
        "MongoDB: MONGODB_URI='mongodb://localhost:27017/?directConnection=true' "
        "python -m mongo_ckpt demo"
    )


async def _maybe_await(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


# -- the walk-through ------------------------------------------------------------


class Demo:
    """Runs the scenes of the demo on one graph, printing to ``out``."""

    def __init__(
        self, graph: CompiledStateGraph[DemoState], saver: AsyncMongoDBSaver, out: TextIO
    ) -> None:
        self.graph, self.saver, self.out = graph, saver, out

    def say(self, text: str = "") -> None:
        print(text, file=self.out)

    def heading(self, text: str) -> None:
        self.say()
        self.say(f"== {text} ==")

    async def turn(
        self, thread_id: str, text: str, graph: Any = None, **configurable: str
    ) -> dict[str, Any]:
        self.say(f"  user> {text}")
        config = _thread(thread_id)
        config["configurable"].update(configurable)
        state: DemoState = {"messages": [HumanMessage(text)]}
        result: dict[str, Any] = await (graph or self.graph).ainvoke(state, config)
        if not result.get("__interrupt__"):
            self.say(f"  assistant> {result['messages'][-1].content}")
        return result

    async def memory(self) -> None:
        self.heading(f"1. Memory across turns (thread {THREAD!r})")
        for text in TURNS:
            await self.turn(THREAD, text)
        self.say(f"  -- another thread, {OTHER_THREAD!r}, shares nothing with it:")
        await self.turn(OTHER_THREAD, QUESTION)

    async def interrupt_and_resume(self) -> RunnableConfig:
        self.heading("2. Interrupt and resume")
        result = await self.turn(THREAD, BOOKING)
        (pause,) = result["__interrupt__"]
        state = await self.graph.aget_state(_thread(THREAD))
        self.say(f"  [interrupted] paused before node {state.next[0]!r}, asking: {pause.value}")
        self.say("  [resumed] graph.ainvoke(Command(resume='approve'), config)")
        result = await self.graph.ainvoke(Command(resume="approve"), _thread(THREAD))
        self.say(f"  assistant> {result['messages'][-1].content}")
        return (await self.graph.aget_state(_thread(THREAD))).config

    async def time_travel(self, original: RunnableConfig) -> None:
        self.heading("3. Time travel")
        history = [s async for s in self.graph.aget_state_history(_thread(THREAD))]
        self.say(f"  history of thread {THREAD!r}, newest first ({len(history)} checkpoints):")
        for snapshot in history:
            self.say(f"    {_row(snapshot)}")

        question = _before_assistant(history, QUESTION)
        step = _step(question)
        self.say(f"  -- replay from step {step} (just before the assistant answered {QUESTION!r}):")
        ran: list[str] = []
        async for update in self.graph.astream(None, question.config, stream_mode="updates"):
            ran.extend(update)
            for values in update.values():
                self.say(f"  assistant> {values['messages'][-1].content}")
        self.say(f"  nodes run by the replay: {', '.join(ran)} (steps 0-{step} were not re-run)")
        lineage = await self._lineage(_thread(THREAD), question.config)
        self.say(f"  the new branch: {' <- '.join(lineage)}")

        tea = _before_assistant(history, TURNS[1])
        step = _step(tea)
        changed = HumanMessage("I like coffee.", id=tea.values["messages"][-1].id)
        self.say(
            f"  -- fork at step {step}: update_state replaces {TURNS[1]!r} with "
            f"{changed.content!r}, then the graph continues from there:"
        )
        fork = await self.graph.aupdate_state(
            tea.config, {"messages": [changed]}, as_node="__start__"
        )
        result = await self.graph.ainvoke(None, fork)
        self.say(f"  assistant> {result['messages'][-1].content}")
        await self.turn(THREAD, QUESTION)
        before = await self.graph.aget_state(original)
        self.say(
            f"  the original branch is intact: at its last checkpoint (step "
            f"{_step(before)}) the assistant knows: {describe(before.values['messages'])}"
        )

    async def storage(self, db_name: str) -> None:
        self.heading(f"4. What was stored (database {db_name!r})")
        self.say(f"  {'collection':<20} {'documents':>10} {'BSON bytes':>11}")
        stored = {}
        for logical in (*self.saver.layout.by_logical(), SCHEMA):
            collection = self.saver.collections[logical]
            stored[logical] = docs = [doc async for doc in collection.find({})]
            size = sum(len(bson.encode(doc)) for doc in docs)
            self.say(f"  {collection.name:<20} {len(docs):>10} {size:>11}")
        refs = sum(not v.get("base") for doc in stored[CHECKPOINTS] for v in doc.get("values", ()))
        self.say(
            f"  the {len(stored[CHECKPOINTS])} checkpoints refer to {refs} channel values, stored "
            f"as {len(stored[BLOBS])} documents:"
        )
        self.say("  a value is written once, when its channel changes, and shared after that")
        for thread_id in (THREAD, OTHER_THREAD):
            listed = [t async for t in self.saver.alist(_thread(thread_id))]
            self.say(f"  saver.alist(thread {thread_id!r}): {len(listed)} checkpoints")
        for source in ("fork", "update"):
            found = self.saver.alist(_thread(THREAD), filter={"source": source})
            self.say(f"  saver.alist(thread {THREAD!r}, filter={{'source': {source!r}}}):")
            async for t in found:
                messages = t.checkpoint["channel_values"].get("messages", [])
                self.say(
                    f"    step {t.metadata['step']}, parent step "
                    f"{await self._step_of(t.parent_config)}, "
                    f"last message: {messages[-1].content!r}"
                )

    async def long_term_memory(self) -> None:
        from mongo_ckpt.store import AsyncMongoDBStore

        self.heading("5. Long-term memory: a store shared by threads")
        store = AsyncMongoDBStore.from_saver(self.saver)
        await store.asetup()
        self.say(
            "  store = AsyncMongoDBStore.from_saver(saver): same client "
            f"({store.client is self.saver.client}), same database, collection "
            f"{store.collections['store'].name!r}"
        )
        graph = build_memory_graph().compile(checkpointer=self.saver, store=store)
        first, second = MEMORY_THREADS
        for thread_id, texts in ((first, MEMORY_TURNS), (second, (QUESTION,))):
            self.say(f"  -- thread {thread_id!r}, user_id {USER_ID!r}:")
            for text in texts:
                await self.turn(thread_id, text, graph, user_id=USER_ID)
        self.say("  what the store holds (store.asearch(('users',))):")
        for item in await store.asearch(("users",)):
            self.say(f"    namespace={item.namespace} key={item.key!r} value={item.value}")

    async def node_cache(self) -> None:
        from mongo_ckpt.cache import AsyncMongoDBCache

        self.heading("6. Node cache: a node's result kept in MongoDB")
        cache: AsyncMongoDBCache[Any] = AsyncMongoDBCache.from_saver(self.saver)
        await cache.setup()
        self.say(
            "  cache = AsyncMongoDBCache.from_saver(saver): same client "
            f"({cache.client is self.saver.client}), collection {cache.collection.name!r}"
        )
        self.say(f"  node 'forecast' has CachePolicy(ttl={CACHE_TTL_SECONDS}); two calls:")
        runs: list[str] = []
        graph = build_cached_graph(runs).compile(cache=cache)
        for call in (1, 2):
            before = len(runs)
            chunks = [c async for c in graph.astream({"city": "Lisbon"}, stream_mode="updates")]
            cached = any(c.get("__metadata__", {}).get("cached") for c in chunks)
            ran = "the node ran" if len(runs) > before else "the node did not run"
            where = "served from MongoDB" if cached else "its result written to the cache"
            forecast = chunks[-1]["forecast"]["forecast"]
            self.say(f"  call {call}: {forecast!r} ({ran}; {where})")
        self.say(f"  the node ran {len(runs)} time for 2 calls; the cache holds:")
        async for doc in cache.collection.find({}, {"value": 0}):
            expires = "with expires_at" if "expires_at" in doc else "no expiry"
            self.say(f"    node {doc['namespace'][-1]!r}, key {doc['key'][:8]}... ({expires})")

    async def _step_of(self, config: RunnableConfig | None) -> int | None:
        found = await self.saver.aget_tuple(config) if config else None
        return found.metadata["step"] if found else None

    async def _lineage(self, newest: RunnableConfig, oldest: RunnableConfig) -> list[str]:
        """``step N (source)`` of each checkpoint from ``newest`` back to ``oldest``."""
        stop = oldest["configurable"]["checkpoint_id"]
        chain: list[str] = []
        found = await self.saver.aget_tuple(newest)
        while found is not None:
            chain.append(f"step {found.metadata['step']} ({found.metadata['source']})")
            if found.config["configurable"]["checkpoint_id"] == stop or not found.parent_config:
                break
            found = await self.saver.aget_tuple(found.parent_config)
        return chain


async def run_demo(uri: str | None, db_name: str, out: TextIO) -> None:
    """Run the whole demo on ``uri`` (in process when ``None``), printing to ``out``."""
    client, backend = open_client(uri)
    try:
        print(backend, file=out)
        print(
            f"The demo drops database {db_name!r} first and then fills it. Its source: {SOURCE}.",
            file=out,
        )
        if uri:
            await _ping(client, backend)
        await _maybe_await(client.drop_database(db_name))
        saver = AsyncMongoDBSaver(client, db_name)
        await saver.asetup()
        demo = Demo(build_graph().compile(checkpointer=saver), saver, out)
        await demo.memory()
        original = await demo.interrupt_and_resume()
        await demo.time_travel(original)
        await demo.storage(db_name)
        await demo.long_term_memory()
        await demo.node_cache()
        if uri:
            print(f"\nThe data stays in database {db_name!r} for you to inspect.", file=out)
    finally:
        await _maybe_await(client.close())


async def _ping(client: Any, backend: str) -> None:
    import pymongo
    from pymongo.errors import PyMongoError

    where = backend.removeprefix("Backend: MongoDB at ").split(" (")[0]
    try:
        # timeoutMS, when set, bounds server selection instead of serverSelectionTimeoutMS.
        with pymongo.timeout(SERVER_SELECTION_TIMEOUT_MS / 1000):
            await client.admin.command("ping")
    except PyMongoError as exc:
        raise UnreachableServerError(unreachable_message(where, exc)) from None


def _thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _before_assistant(history: Sequence[StateSnapshot], text: str) -> StateSnapshot:
    """The checkpoint where ``text`` has arrived and the assistant is about to answer it."""
    return next(
        s for s in history if s.next == ("assistant",) and s.values["messages"][-1].content == text
    )


def _step(snapshot: StateSnapshot) -> int | None:
    return (snapshot.metadata or {}).get("step")


def _row(snapshot: StateSnapshot) -> str:
    meta = snapshot.metadata or {}
    messages = snapshot.values.get("messages", [])
    last = f"{messages[-1].type}: {messages[-1].content}" if messages else "-"
    nxt = ",".join(snapshot.next) or "-"
    return f"step {meta.get('step'):>2}  {meta.get('source'):<6} next={nxt:<10} last={last}"
