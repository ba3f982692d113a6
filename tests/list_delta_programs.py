"""Generated list-delta programs and their checks (this module holds no tests)."""

from __future__ import annotations

import math
from itertools import count
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from mongo_ckpt.layout import CHECKPOINTS
from tests.saver_support import Api

CHANNELS = ("messages", "items", "log")


NAMESPACES = ("", "child")


_ids = count()


element = st.one_of(
    st.integers(-3, 3),
    st.text("abcé", max_size=4),
    st.builds(lambda n, t: {"id": n, "text": t}, st.integers(0, 5), st.text("xyz", max_size=3)),
    st.builds(lambda t: HumanMessage(t, id=f"h{t}"), st.text("xyz", max_size=3)),
    st.builds(lambda t: AIMessage(t, id=f"a{t}"), st.text("xyz", max_size=3)),
)


edit = st.one_of(
    st.tuples(st.just("append"), st.lists(element, min_size=1, max_size=4)),
    st.tuples(st.just("replace"), st.integers(0, 50), element),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("remove_all"), st.just(None)),
    st.tuples(st.just("reorder"), st.integers(1, 5)),
    st.tuples(st.just("tuple"), st.just(None)),
    st.tuples(st.just("scalar"), st.text("xyz", max_size=3)),
)


step = st.fixed_dictionaries(
    {
        # 0: continue from the latest checkpoint of the namespace; n: fork n steps back.
        "back": st.sampled_from([0, 0, 0, 0, 1, 2, 5]),
        "ns": st.sampled_from(NAMESPACES),
        "writer": st.sampled_from([0, 0, 0, 1]),
        "edits": st.dictionaries(st.sampled_from(CHANNELS), st.lists(edit, max_size=2)),
    }
)


programs = st.lists(step, min_size=1, max_size=30)


def apply(value: Any, op: str, arg: Any, *rest: Any) -> Any:
    items = list(value) if isinstance(value, (list, tuple)) else []
    if op == "append":
        return items + list(arg)
    if op == "replace" and items:
        items[arg % len(items)] = rest[0]
    elif op == "remove" and items:
        del items[arg % len(items)]
    elif op == "remove_all":
        return []
    elif op == "reorder" and items:
        return items[arg % len(items) :] + items[: arg % len(items)]
    elif op == "tuple":
        return tuple(items)
    elif op == "scalar":
        return arg
    return items


def run_program(savers: list[Api], plain: Api, program: list[dict], thread_id: str) -> list:
    """Put the program's checkpoints through ``savers`` (by writer) and ``plain``; return
    ``(config, expected values)`` per checkpoint."""
    history: dict[str, list[tuple[str, dict, dict]]] = {ns: [] for ns in NAMESPACES}
    done = []
    for n, s in enumerate(program):
        nodes = history[s["ns"]]
        parent = nodes[max(0, len(nodes) - 1 - s["back"])] if nodes else None
        values = dict(parent[1]) if parent else {}
        versions = dict(parent[2]) if parent else {}
        new_versions = {}
        for channel, edits in s["edits"].items():
            value = values.get(channel, [])
            for e in edits:
                value = apply(value, *e)
            values[channel] = value
            new_versions[channel] = savers[0].saver.get_next_version(versions.get(channel), None)
        versions.update(new_versions)
        checkpoint = {
            **empty_checkpoint(),
            "id": f"1ef{n:012d}-{next(_ids):08d}",
            "channel_values": values,
            "channel_versions": versions,
        }
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": s["ns"]}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent[0]
        metadata = {"source": "loop", "step": n, "parents": {}}
        for api in (savers[s["writer"]].saver, plain.saver):
            api.put(config, checkpoint, metadata, new_versions)
        nodes.append((checkpoint["id"], values, versions))
        # What a whole value reads back as (the serializer returns a tuple as a list).
        expected = plain.saver.serde.loads_typed(plain.saver.serde.dumps_typed(values))
        done.append(({**config["configurable"], "checkpoint_id": checkpoint["id"]}, expected))
    return done


def check_reads(apis: list[Api], done: list) -> None:
    for api in apis:
        for configurable, values in done:
            stored = api.saver.get_tuple({"configurable": configurable})
            assert stored.checkpoint["channel_values"] == values
    expected = {c["checkpoint_id"]: v for c, v in done}
    thread_id = done[0][0]["thread_id"]
    for api in apis:
        listed = {
            t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]
            for t in api.saver.list({"configurable": {"thread_id": thread_id}})
        }
        assert listed == expected


def check_bounded_chains(api: Api, thread_id: str, puts: int) -> None:
    bound = math.floor(math.log2(puts)) + 2
    for doc in api.raw(CHECKPOINTS).find({"thread_id": thread_id}):
        per_channel: dict[str, int] = {}
        for entry in doc["values"]:
            per_channel[entry["channel"]] = per_channel.get(entry["channel"], 0) + 1
        assert max(per_channel.values(), default=0) <= bound
