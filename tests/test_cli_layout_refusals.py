"""The command line's reading and maintenance commands refuse data in a layout the saver
refuses, as ``setup()`` does, before reading any value; ``doctor`` and ``stats`` report it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from mongo_ckpt import MongoDBSaver
from mongo_ckpt.schema import SAVER_SCHEMA_VERSION, SCHEMA_COLLECTION, saver_key
from tests.cli_support import invoke
from tests.graphs import chat_builder, thread


@pytest.mark.parametrize("recorded", [SAVER_SCHEMA_VERSION - 1, SAVER_SCHEMA_VERSION + 1])
def test_commands_refuse_a_layout_the_saver_refuses(
    client: Any, db_name: str, recorded: int
) -> None:
    graph = chat_builder().compile(checkpointer=MongoDBSaver(client, db_name))
    graph.invoke({"messages": [HumanMessage("x" * 3000)]}, thread("t"))  # a compressed value
    client[db_name][SCHEMA_COLLECTION].update_one(
        {"_id": saver_key("checkpoints")}, {"$set": {"version": recorded}}
    )
    try:
        for command in (["show", "t", "--internal"], ["history", "t"], ["threads"],
                        ["prune", "t", "--dry-run"]):
            result = invoke(client, *command, "--db", db_name)
            assert result.exit_code == 1, (command, result.output)
            assert f"schema version {recorded}" in result.output, (command, result.output)
        stats = invoke(client, "stats", "--db", db_name, "--json")
        assert stats.exit_code == 0, stats.output
        assert json.loads(stats.output)["schema"]["status"] == "fail"
    finally:
        client.drop_database(db_name)
