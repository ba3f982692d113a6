"""``mongo-ckpt ttl`` shows and sets a thread's own ttl (what ``set_thread_ttl`` sets), and
``prune --idle-days`` judges the threads it selected again before it prunes them: one
active since the selection, or kept by its own ttl, is spared whole."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import pytest

from mongo_ckpt import MongoDBSaver
from tests.backends import sync_client
from tests.cli_support import invoke, resume_booking, write_threads

DAY = 24 * 3600.0


@pytest.fixture(params=["mock", "wire"])
def written(request: Any) -> Iterator[tuple[Any, str, dict[str, Any]]]:
    client = sync_client(request.param)
    db = f"t_cli_{uuid.uuid4().hex[:8]}"
    try:
        yield client, db, write_threads(MongoDBSaver(client, db))
    finally:
        client.drop_database(db)
        client.close()


def ttl_of(client: Any, db: str, thread_id: str) -> Any:
    result = invoke(client, "ttl", thread_id, "--db", db, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["ttl"]


def test_ttl_shows_and_sets_a_threads_own_ttl(written: tuple[Any, str, Any]) -> None:
    client, db, _ = written
    assert ttl_of(client, db, "chat-ada") == "default"
    for value, shown in (("never", "never"), ("3600", 3600.0), ("default", "default")):
        result = invoke(client, "ttl", "chat-ada", value, "--db", db)
        assert result.exit_code == 0, result.output
        assert f"thread 'chat-ada': ttl {shown}" in result.output
        assert ttl_of(client, db, "chat-ada") == shown


@pytest.mark.parametrize("value", ["forever", "0", "-5", "inf", "nan"])
def test_ttl_refuses_a_bad_value_and_changes_nothing(
    written: tuple[Any, str, Any], value: str
) -> None:
    client, db, _ = written
    assert invoke(client, "ttl", "chat-ada", "never", "--db", db).exit_code == 0
    result = invoke(client, "ttl", "chat-ada", value, "--db", db)
    assert result.exit_code == 2 and "TTL" in result.output, result.output
    assert ttl_of(client, db, "chat-ada") == "never"


def test_prune_idle_spares_threads_active_or_kept_since_the_selection(
    written: tuple[Any, str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, db, graphs = written
    checkpoints = client[db]["checkpoints"]
    old = datetime.now(timezone.utc) - timedelta(days=3)
    checkpoints.update_many({}, {"$set": {"created_at": old}})
    before = {t: checkpoints.count_documents({"thread_id": t}) for t in ("chat-ada", "booking")}

    def changed_while_asking(*args: Any, **kwargs: Any) -> bool:
        resume_booking(graphs["booking"])  # the user comes back during the prompt
        assert invoke(client, "ttl", "chat-ada", "never", "--db", db).exit_code == 0
        return True

    monkeypatch.setattr(click, "confirm", changed_while_asking)
    result = invoke(client, "prune", "--idle-days", "2", "--db", db)
    assert result.exit_code == 0, result.output

    assert checkpoints.count_documents({"thread_id": "chat-ada"}) == before["chat-ada"]
    assert checkpoints.count_documents({"thread_id": "booking"}) > before["booking"]
    assert checkpoints.count_documents({"thread_id": "chat-bob"}) == 1  # pruned to its latest


def test_prune_idle_reports_what_it_pruned_and_spared(written: tuple[Any, str, Any]) -> None:
    client, db, _ = written
    checkpoints = client[db]["checkpoints"]
    old = datetime.now(timezone.utc) - timedelta(days=3)
    checkpoints.update_many({}, {"$set": {"created_at": old}})
    assert invoke(client, "ttl", "chat-ada", "never", "--db", db).exit_code == 0
    result = invoke(client, "prune", "--idle-days", "2", "--yes", "--json", "--db", db)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["spared"] == ["chat-ada"] and "chat-ada" not in report["pruned_per_thread"]
    assert report["pruned"] == sum(report["pruned_per_thread"].values()) > 0
    left = {t: checkpoints.count_documents({"thread_id": t}) for t in report["pruned_per_thread"]}
    assert all(count >= 1 for count in left.values()), left
