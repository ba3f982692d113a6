"""A conversation whose latest checkpoint is read back by replay (no tests here)."""

from __future__ import annotations

from langgraph.checkpoint.base import CheckpointTuple

from tests.delta_conversation import FREQUENCY, Conversation
from tests.graphs import thread

CHANNEL = "messages"


async def replaying_latest(talk: Conversation) -> CheckpointTuple:
    """Turns on the first instance until its latest checkpoint replays the channel (holds
    no snapshot of it); that checkpoint, read."""
    api = talk.apis[0]
    for _ in range(2 * FREQUENCY):
        await talk.turn(0)
        latest = await api.get_tuple(thread("t"))
        assert latest is not None
        if CHANNEL not in latest.checkpoint["channel_values"]:
            return latest
    raise AssertionError("no turn left the channel to replay")
