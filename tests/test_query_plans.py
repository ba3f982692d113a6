"""Every query the savers and stores send on their hot paths is answered from an index.

The hot paths run through real drivers on every backend whose ``explain`` reports query
plans (``wire`` here, ``mongodb`` when ``MONGODB_URI`` is set). A command listener records
each command; each one is then explained by the query it asks the planner:

- ``find``, ``count``, ``distinct``: its filter and sort;
- ``update``/``delete``: each statement's ``q`` (the server plans it as a find);
- ``aggregate``: the leading ``$match``/``$sort`` (the part the server pushes into the
  query layer), and every ``$lookup``/``$graphLookup`` as the find it runs on the joined
  collection for each input document.

No plan may contain a ``COLLSCAN``, and every declared index is read by some query.

SecantusDB (the ``wire`` tier) plans with an index only when the index covers every
predicate as a contiguous prefix of its fields; MongoDB uses an index for the predicates it
covers and filters the rest after fetching. So on ``wire`` each query is explained as the
predicates that some declared index serves from its first field on (each ``$or`` branch on
its own, as MongoDB plans them); the ``mongodb`` tier explains every query whole.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.store.base import PutOp
from pymongo import MongoClient
from pymongo.monitoring import CommandListener, CommandStartedEvent

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.layout import Layout, index_models
from mongo_ckpt.store import MongoDBStore, registry
from mongo_ckpt.store.documents import index_models as store_index_models
from tests.backends import MONGODB_URI, uri_for
from tests.graphs import chat_builder, thread

PLANNED = (
    "find", "aggregate", "update", "delete", "count", "distinct", "findAndModify", "bulkWrite"
)
STORE_COLLECTION = "store"

BACKENDS = [
    "wire",
    pytest.param(
        "mongodb",
        marks=pytest.mark.skipif(not MONGODB_URI, reason="MONGODB_URI not set"),
    ),
]


class Recorder(CommandListener):
    """Planned commands sent while ``label`` names the operation running.

    ``None`` while setting up: ``setup()``'s one-off probes (the layout version, a sample
    document of an unversioned collection, before its indexes exist) are not hot paths.
    """

    def __init__(self) -> None:
        self.label: str | None = None
        self.commands: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: CommandStartedEvent) -> None:
        if self.label is not None and event.command_name in PLANNED:
            self.commands.append((self.label, copy.deepcopy(dict(event.command))))

    def succeeded(self, event: Any) -> None:
        pass

    def failed(self, event: Any) -> None:
        pass


def probes(command: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """``(collection, filter, sort)`` of each query the server plans for ``command``."""
    name = next(iter(command))
    collection = command[name]
    if name in ("find", "count", "distinct"):
        yield collection, command.get("filter", command.get("query")) or {}, command.get("sort")
    elif name == "findAndModify":
        yield collection, command.get("query") or {}, command.get("sort")
    elif name in ("update", "delete"):
        for statement in command[name + "s"]:
            yield collection, statement["q"], None
    elif name == "bulkWrite":  # the client-level one of a put: each op names its namespace
        namespaces = [info["ns"].split(".", 1)[1] for info in command["nsInfo"]]
        for op in command["ops"]:
            kind = next(iter(op))
            if kind in ("update", "delete"):
                yield namespaces[op[kind]], op["filter"], op.get("sort")
    elif name == "aggregate":
        yield from _pipeline_probes(collection, command["pipeline"])


def _pipeline_probes(
    collection: str, pipeline: list[dict[str, Any]]
) -> Iterator[tuple[str, dict[str, Any], Any]]:
    leading: dict[str, Any] = {"filter": {}, "sort": None}
    pushed = True
    for stage in pipeline:
        (kind, spec), = stage.items()
        if pushed and kind == "$match" and not leading["sort"]:
            # Adjacent $match stages coalesce into one query, as MongoDB plans them.
            if set(leading["filter"]) & set(spec):
                leading["filter"] = {"$and": [leading["filter"], spec]}
            else:
                leading["filter"] = {**leading["filter"], **spec}
        elif pushed and kind == "$sort" and leading["sort"] is None:
            leading["sort"] = spec
        else:
            pushed = False
        if kind == "$lookup":
            assert "pipeline" not in spec, "joins use localField/foreignField (all backends)"
            yield spec["from"], {spec["foreignField"]: "probe"}, None
        elif kind == "$graphLookup":
            restrict = spec.get("restrictSearchWithMatch") or {}
            yield spec["from"], {**restrict, spec["connectToField"]: "probe"}, None
    yield collection, leading["filter"], leading["sort"]


def plan_nodes(plan: Any) -> Iterator[Mapping[str, Any]]:
    """Every stage of an explained plan, classic or slot-based."""
    if isinstance(plan, Mapping):
        if "stage" in plan:
            yield plan
        for key, value in plan.items():
            if key != "slotBasedPlan":
                yield from plan_nodes(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from plan_nodes(item)


def explain(db: Any, collection: str, filter: dict[str, Any], sort: Any) -> list[Mapping]:
    cursor = db[collection].find(filter)
    if sort:
        cursor = cursor.sort(list(sort.items()))
    return list(plan_nodes(cursor.explain()["queryPlanner"]["winningPlan"]))


def served_parts(
    filter: dict[str, Any], sort: Any, indexes: list[list[str]]
) -> Iterator[tuple[dict[str, Any], Any]]:
    """The ``(filter, sort)`` an index serves from its first field on, per ``$or`` branch."""
    branches = filter.get("$or") or [{}]
    rest = {k: v for k, v in filter.items() if k != "$or"}
    for branch in branches:
        query = {**rest, **branch}
        best: tuple[dict[str, Any], Any] = ({}, None)
        for fields in indexes:
            prefix: dict[str, Any] = {}
            for field in fields:
                if field not in query or _unplannable(query[field]):
                    break
                prefix[field] = query[field]
            served_sort = sort if sort and list(sort)[0] in fields else None
            if len(prefix) > len(best[0]) or (not best[0] and served_sort):
                best = (prefix, served_sort)
        yield best


def _unplannable(predicate: Any) -> bool:
    return isinstance(predicate, Mapping) and any(op in predicate for op in ("$not", "$ne"))


@pytest.fixture(params=BACKENDS)
def recorded(request: Any, db_name: str) -> Iterator[tuple[Any, Recorder, bool]]:
    """A database on a backend that explains plans, its command recorder, and whether
    its planner takes whole queries (see the module docstring)."""
    recorder = Recorder()
    client: MongoClient = MongoClient(
        uri_for(request.param),
        directConnection=request.param == "wire",
        event_listeners=[recorder],
    )
    yield client[db_name], recorder, request.param == "mongodb"
    client.drop_database(db_name)
    client.close()


def run_hot_paths(db: Any, recorder: Recorder) -> list[str]:
    """Run each hot path of the saver and the store once, on a thread with some history;
    return their labels."""
    saver = MongoDBSaver(db.client, db.name, ttl=timedelta(days=1).total_seconds())
    saver.setup()
    graph = chat_builder().compile(checkpointer=saver)
    config = thread("t1")
    recorder.label = turn_label = "graph turn (get_tuple, put, put_writes)"
    for turn in range(4):
        graph.invoke({"messages": [HumanMessage(f"hi {turn}")]}, config)

    latest = saver.get_tuple(config)
    assert latest is not None
    steps = {
        "get_tuple latest": lambda: saver.get_tuple(config),
        "get_tuple by id": lambda: saver.get_tuple(latest.parent_config),
        "list": lambda: list(saver.list(config)),
        "list filter": lambda: list(saver.list(config, filter={"source": "loop"})),
        "list before": lambda: list(saver.list(config, before=latest.config, limit=2)),
        "put": lambda: saver.put(
            latest.config,
            {**empty_checkpoint(), "channel_values": {"messages": ["x"]}},
            {"source": "update", "step": 9, "parents": {}},
            {"messages": "99"},
        ),
        "put_writes": lambda: saver.put_writes(latest.config, [("messages", ["y"])], "task"),
        "delta history": lambda: saver.get_delta_channel_history(
            config=latest.config, channels=["messages"]
        ),
        "copy_thread": lambda: saver.copy_thread("t1", "t2"),
        "prune keep_latest": lambda: saver.prune(["t2"], strategy="keep_latest"),
        "delete_for_runs": lambda: saver.delete_for_runs(["no-such-run"]),
        "delete_thread": lambda: saver.delete_thread("t2"),
        "checkpoint TTL sweep": saver.sweep_expired,
    }
    for label, step in steps.items():
        recorder.label = label
        step()

    recorder.label = None
    store = MongoDBStore(db.client, db.name, collection_name=STORE_COLLECTION, ttl={
        "default_ttl": 60, "refresh_on_read": True
    })
    store.setup()
    for user in range(3):
        store.put(("users", str(user), "memories"), "seed", {"kind": "fact", "n": user})
    # Inserts only (nothing planned): a batch document for the next listing to fold.
    store.batch([PutOp(("users", str(u), "notes"), "n", {}) for u in range(registry.BATCH_FROM)])
    store_steps = {
        "store put": lambda: store.put(("users", "1", "memories"), "k", {"kind": "fact"}),
        "store get": lambda: store.get(("users", "1", "memories"), "k"),
        "store search filter": lambda: store.search(("users", "1"), filter={"kind": "fact"}),
        "store list_namespaces folding": lambda: store.list_namespaces(prefix=("users",)),
        "store list_namespaces": lambda: store.list_namespaces(prefix=("users",), max_depth=2),
        "store list_namespaces of all": lambda: store.list_namespaces(),
        "store delete": lambda: store.delete(("users", "1", "memories"), "k"),
        "store TTL sweep": store.sweep_ttl,
    }
    for label, step in store_steps.items():
        recorder.label = label
        step()
    recorder.label = None
    return [turn_label, *steps, *store_steps]


def plans(
    db: Any, recorder: Recorder, whole: bool
) -> dict[str, list[tuple[str, list[Mapping]]]]:
    """Explained plans per operation label; ``whole``: explain each query unreduced."""
    out: dict[str, list[tuple[str, list[Mapping]]]] = defaultdict(list)
    for label, command in recorder.commands:
        for collection, filter, sort in probes(command):
            if whole:
                out[label].append((collection, explain(db, collection, filter, sort)))
                continue
            indexes = [list(i["key"]) for i in db[collection].list_indexes()]
            for part, part_sort in served_parts(filter, sort, indexes):
                out[label].append((collection, explain(db, collection, part, part_sort)))
    return out


def test_every_hot_path_query_uses_an_index(recorded: tuple[Any, Recorder, bool]) -> None:
    db, recorder, whole = recorded
    labels = run_hot_paths(db, recorder)
    explained = plans(db, recorder, whole)

    missing = [label for label in labels if not explained.get(label)]
    assert not missing, f"no query recorded for {missing}"
    scans = [
        (label, collection)
        for label, found in explained.items()
        for collection, nodes in found
        if any(n["stage"] == "COLLSCAN" for n in nodes)
    ]
    assert not scans, f"collection scans: {scans}"
    unplanned = [
        (label, collection)
        for label, found in explained.items()
        for collection, nodes in found
        if not any(n.get("indexName") for n in nodes)
    ]
    assert not unplanned, f"plans naming no index: {unplanned}"


def test_every_declared_index_is_read(recorded: tuple[Any, Recorder, bool]) -> None:
    db, recorder, whole = recorded
    run_hot_paths(db, recorder)
    used = {
        (collection, node["indexName"])
        for found in plans(db, recorder, whole).values()
        for collection, nodes in found
        for node in nodes
        if node.get("indexName")
    }
    declared = {
        (collection, model.document["name"])
        for collection, models in index_models(Layout()).items()
        for model in models
    } | {(STORE_COLLECTION, model.document["name"]) for model in store_index_models()}
    assert declared <= used, f"indexes no hot-path query reads: {declared - used}"
