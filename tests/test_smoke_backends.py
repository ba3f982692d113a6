from mongo_ckpt import AsyncMongoDBSaver, MongoDBSaver
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata


async def test_async_roundtrip(asaver: AsyncMongoDBSaver) -> None:
    cfg = generate_config("t1")
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": "1"})
    stored = await asaver.aput(cfg, cp, generate_metadata(), {"a": "1"})
    tup = await asaver.aget_tuple(stored)
    assert tup.checkpoint["channel_values"] == {"a": 1}


def test_sync_roundtrip(saver: MongoDBSaver) -> None:
    cfg = generate_config("t1")
    cp = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": "1"})
    stored = saver.put(cfg, cp, generate_metadata(), {"a": "1"})
    assert saver.get_tuple(stored).checkpoint["channel_values"] == {"a": 1}
