"""The benchmark conversation on a ``DeltaChannel`` thread, played on one or more saver
instances and, turn by turn, on ``InMemorySaver`` as the reference."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from mongo_ckpt.layout import CHECKPOINTS
from tests.backends import count_calls
from tests.delta_graphs import message_summary
from tests.graphs import thread
from tests.perf.conversation import DELTA, chat_graph, human_message
from tests.saver_support import Api

FREQUENCY = 4  # a snapshot every 4 updates: most loads replay, some find a snapshot
AGGREGATE = (CHECKPOINTS, "aggregate")


class Conversation:
    """One thread played on the instances ``apis`` (each its own graph, its collection
    calls counted) and on the reference; every turn and state is checked against it."""

    def __init__(self, *apis: Api, frequency: int = FREQUENCY, thread_id: str = "t") -> None:
        self.apis = apis
        self.graphs = [chat_graph(api.saver, DELTA, frequency) for api in apis]
        self.calls = [count_calls(api.saver.collections) for api in apis]
        self.reference = chat_graph(InMemorySaver(), DELTA, frequency)
        self.thread_id = thread_id
        self.turns = 0

    async def turn(self, on: int, **configurable: Any) -> int:
        """One turn on instance ``on``; the aggregations its load took."""
        calls = self.calls[on]
        calls.clear()
        message = {"messages": [human_message(self.turns)]}
        config = thread(self.thread_id, **configurable)
        result = await self.apis[on].invoke(self.graphs[on], message, config)
        expected = self.reference.invoke(message, config)
        assert message_summary(result["messages"]) == message_summary(expected["messages"]), (
            self.turns
        )
        self.turns += 1
        return calls[AGGREGATE]

    async def check_state(self, on: int) -> None:
        config = thread(self.thread_id)
        state = await self.apis[on].state(self.graphs[on], config)
        expected = self.reference.get_state(config).values["messages"]
        assert message_summary(state.values["messages"]) == message_summary(expected)
