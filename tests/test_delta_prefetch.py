"""A DeltaChannel state load in one read: the history ``get_tuple`` reads along.

When the saver expects the checkpoint a ``get_tuple`` finds (the latest: the one it wrote
or found last) to replay DeltaChannels, the same aggregation reads their history
(``delta.range_history_pipeline(whole=True)``), and the ``get_delta_channel_history``
LangGraph makes next takes it. Real graphs (the benchmark conversation) against
``InMemorySaver`` fed the same turns: the loads must be right whichever instance wrote
last, with a put in flight, and with another instance deleting or pruning the thread
between the two calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6
from pymongo import MongoClient, monitoring

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.layout import CHECKPOINTS, PENDING
from mongo_ckpt.maintenance import StaleParentError
from tests.backends import maybe_await, uri_for
from tests.delta_conversation import AGGREGATE, FREQUENCY, Conversation
from tests.delta_graphs import HistoryWalks, Recorder
from tests.graphs import thread
from tests.perf.conversation import DELTA, converse
from tests.prefetch_support import CHANNEL, replaying_latest
from tests.saver_support import LOGICAL, Api


async def test_a_turn_after_its_own_reads_its_state_in_one_aggregation(api: Api) -> None:
    talk = Conversation(api)
    reads = [await talk.turn(0) for _ in range(3 * FREQUENCY)]
    # Every load (the first turn's included: nothing stored yet) is one aggregation,
    # whether the latest checkpoint replays the channel or holds its snapshot.
    assert reads == [1] * len(reads)
    talk.calls[0].clear()
    await talk.check_state(0)
    assert dict(talk.calls[0]) == {AGGREGATE: 1}


async def test_instances_taking_turns_load_right(api: Api) -> None:
    other = api.reopened()
    talk = Conversation(api, other)
    first = await talk.turn(0)
    alternating = [await talk.turn(n % 2) for n in range(1, 2 * FREQUENCY + 1)]
    # The instance that did not write the latest checkpoint cannot know what it replays
    # before reading it: its load is the tuple, then the history (then, if the range its
    # counters allow misses the seed, a walk).
    assert first == 1 and all(1 <= n <= 3 for n in alternating), alternating
    # Two turns in a row on one instance: the second load is one aggregation again.
    await talk.turn(1)
    assert await talk.turn(1) == 1
    await talk.check_state(0)
    await talk.check_state(1)


async def test_an_instance_that_only_reads_polls_the_state_in_one_aggregation(
    api: Api,
) -> None:
    """A reader (an API worker answering ``get_state`` while another instance runs the
    graph): once it has read the latest checkpoint, it expects that one next time."""
    reader = api.reopened()
    talk = Conversation(api, reader)
    for _ in range(FREQUENCY + 1):
        await talk.turn(0)
    polls = []
    for _ in range(3):
        talk.calls[1].clear()
        await talk.check_state(1)
        polls.append(talk.calls[1][AGGREGATE])
    assert polls == [2, 1, 1]  # the first: the tuple, then the history
    for _ in range(FREQUENCY):  # the writer goes on; the reader's polls stay right
        await talk.turn(0)
        talk.calls[1].clear()
        await talk.check_state(1)
        assert 1 <= talk.calls[1][AGGREGATE] <= 3
    talk.calls[1].clear()
    await talk.check_state(1)
    assert talk.calls[1][AGGREGATE] == 1
    # Deleted meanwhile by another instance: nothing stale comes back.
    await api.delete_thread(talk.thread_id)
    assert (await reader.get_tuple(thread(talk.thread_id))) is None


async def test_a_put_in_flight_makes_the_tuple_read_alone(api: Api) -> None:
    talk = Conversation(api)
    latest = await replaying_latest(talk)
    expected = await cold_history(api, latest.config)
    # What LangGraph does after a get_tuple: the history read along is taken.
    assert await api.get_delta_channel_history(config=latest.config, channels=[CHANNEL]) == (
        expected
    )
    # Another writer's put of a newer checkpoint, inserted pending and not yet confirmed:
    # the newest document of the range, which no read may return.
    doc = await _newest(api)
    newer = {k: v for k, v in doc.items() if k != "_id"}
    newer.update(checkpoint_id=str(uuid6()), parent_checkpoint_id=doc["checkpoint_id"])
    await maybe_await(api.raw(CHECKPOINTS).insert_one({**newer, PENDING: True}))
    calls = talk.calls[0]
    calls.clear()
    found = await api.get_tuple(thread("t"))
    assert found is not None and found.config == latest.config
    assert calls[AGGREGATE] == 2  # the read with the history found a pending head: alone
    walks = HistoryWalks(api.saver)
    history = await api.get_delta_channel_history(config=found.config, channels=[CHANNEL])
    # Nothing was kept for it (not even "refused": the range read did not happen): one
    # range read, bounded by the counters, no walk.
    assert calls[AGGREGATE] == 3 and (len(walks.ranges), walks.max_depths) == (1, [])
    walks.restore()
    assert history == expected
    await talk.check_state(0)


async def test_a_thread_deleted_between_the_tuple_and_the_history(api: Api) -> None:
    talk = Conversation(api)
    latest = await replaying_latest(talk)
    expected = await cold_history(api, latest.config)
    await api.reopened().delete_thread("t")
    # The history read with the tuple is the one of the checkpoint that tuple returned:
    # one state, as read before the deletion.
    history = await api.get_delta_channel_history(config=latest.config, channels=[CHANNEL])
    assert history == expected
    # The run that loaded it cannot store on the deleted parent: nothing is written.
    checkpoint = {**latest.checkpoint, "id": str(uuid6())}
    with pytest.raises(StaleParentError):
        await api.put(latest.config, checkpoint, latest.metadata, {})
    assert [await api.count(name, {"thread_id": "t"}) for name in LOGICAL] == [0] * len(LOGICAL)
    assert await api.get_tuple(thread("t")) is None


async def test_a_prune_between_the_tuple_and_the_history(api: Api) -> None:
    talk = Conversation(api)
    latest = await replaying_latest(talk)
    expected = await cold_history(api, latest.config)
    await api.reopened().prune(["t"], strategy="keep_latest")
    history = await api.get_delta_channel_history(config=latest.config, channels=[CHANNEL])
    assert history == expected
    # The prune kept what the latest checkpoint replays from: a read that was not made
    # with the tuple (another instance's) finds the same history, and the next turn is right.
    assert await cold_history(api, latest.config) == expected
    await talk.turn(0)
    await talk.check_state(0)


async def cold_history(api: Api, config: Any) -> Any:
    """The history at ``config`` as an instance that read nothing before finds it."""
    return await api.reopened().get_delta_channel_history(config=config, channels=[CHANNEL])


async def _newest(api: Api) -> dict[str, Any]:
    docs = await api.docs(CHECKPOINTS, {"thread_id": "t", "checkpoint_ns": ""})
    return max(docs, key=lambda d: d["checkpoint_id"])


class Commands(monitoring.CommandListener):
    """The commands a client sent, with the number of documents of each first reply."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.first_batches: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor")
        if event.command_name == "aggregate" and cursor is not None:
            self.first_batches.append(len(cursor.get("firstBatch", ())))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.mark.parametrize(
    "backend",
    ["wire", pytest.param("mongodb", marks=pytest.mark.mongodb)],
)
def test_a_long_history_comes_in_one_reply(backend: str, db_name: str) -> None:
    """A load whose history has more than the 101 documents MongoDB puts in an aggregation's
    first batch by default: the saver asks for the whole output in the first reply, so
    the load is one command, with no ``getMore``."""
    recorder = Recorder()
    turns, frequency = 70, 1000  # no snapshot: every write since the first turn is history
    converse(recorder, turns, DELTA, "long", frequency)
    commands = Commands()
    client: Any = MongoClient(
        uri_for(backend), directConnection=backend == "wire", event_listeners=[commands]
    )
    try:
        saver = MongoDBSaver(client, db_name)
        saver.setup()
        asyncio.run(recorder.replay(Api(saver)))
        commands.sent.clear()
        latest = saver.get_tuple(thread("long"))
        assert latest is not None
        history = saver.get_delta_channel_history(config=latest.config, channels=[CHANNEL])
        expected = recorder.get_delta_channel_history(config=latest.config, channels=[CHANNEL])
        assert history == expected and len(history[CHANNEL]["writes"]) > 101
        assert [name for name, _ in commands.sent] == ["aggregate"]
        assert commands.first_batches[-1] > 101
        assert commands.sent[0][1]["cursor"]["batchSize"] >= commands.first_batches[-1]
    finally:
        client.drop_database(db_name)
        client.close()
