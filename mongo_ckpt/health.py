"""What ``mongo-ckpt doctor`` checks, as pure functions of what the server reported:
each finding with its fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mongo_ckpt.layout import Layout, index_models
from mongo_ckpt.official import migrate_command
from mongo_ckpt.schema import PRE_RELEASE_FIX, Ladder

Status = Literal["ok", "warn", "fail"]
SETUP_FIX = "run `mongo-ckpt doctor --fix` (it creates the indexes layout.py defines)"
# Index options that change what an index does; the others (v, ns, ...) are bookkeeping.
MEANINGFUL_OPTIONS = ("unique", "sparse", "expireAfterSeconds", "partialFilterExpression")


@dataclass(frozen=True)
class Finding:
    """One check: what was found and, when it is a problem, how to fix it."""

    check: str
    status: Status
    detail: str
    fix: str | None = None


def server_version(build_info: Mapping[str, Any] | None) -> Finding:
    """The server's version (``None``: it does not report one)."""
    if build_info is None:
        return Finding("server version", "warn", "not reported by this server (mongomock?)")
    version = str(build_info.get("version", "?"))
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major and major < 5:
        return Finding(
            "server version", "warn", f"MongoDB {version}, older than the 5.0 tested against",
            "upgrade to MongoDB 7.0 or later",
        )
    return Finding("server version", "ok", f"MongoDB {version}")


def topology(hello: Mapping[str, Any] | None) -> Finding:
    """Replica set, sharded cluster or standalone (``None``: not reported)."""
    if hello is None:
        return Finding("topology", "warn", "not reported by this server (mongomock?)")
    if hello.get("setName"):
        return Finding("topology", "ok", f"replica set {hello['setName']!r}")
    if hello.get("msg") == "isdbgrid":
        return Finding("topology", "ok", "sharded cluster (mongos)")
    return Finding(
        "topology",
        "warn",
        "standalone server: no replication, so one failure loses the checkpoints",
        "run mongod with --replSet and rs.initiate() (docker/compose.yml does), "
        "or use a replica set / Atlas in production",
    )


def _shape(index: Mapping[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    key = index["key"]
    pairs = tuple(key.items()) if isinstance(key, Mapping) else tuple(tuple(p) for p in key)
    return pairs, tuple((o, index[o]) for o in MEANINGFUL_OPTIONS if index.get(o))


def indexes(layout: Layout, found: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[Finding]:
    """Whether every index ``layout.py`` defines exists with the same keys and options.

    ``found``: ``index_information()`` per collection name."""
    findings = []
    for collection, models in index_models(layout).items():
        present = found.get(collection, {})
        for model in models:
            wanted = model.document
            name = wanted["name"]
            check = f"index {collection}.{name}"
            if name not in present:
                same_keys = [
                    other for other, info in present.items()
                    if _shape(info)[0] == _shape(wanted)[0]
                ]
                if same_keys:
                    other = same_keys[0]
                    fix = f"drop index {other!r} (db.{collection}.dropIndex('{other}')), then "
                    detail = f"its keys are indexed as {other!r}"
                    findings.append(Finding(check, "fail", detail, fix + SETUP_FIX))
                else:
                    findings.append(Finding(check, "fail", "missing", SETUP_FIX))
            elif _shape(present[name]) != _shape(wanted):
                findings.append(Finding(
                    check, "fail",
                    f"differs: {_describe(present[name])}, expected {_describe(wanted)}",
                    f"drop it (db.{collection}.dropIndex('{name}')), then {SETUP_FIX}",
                ))
            else:
                findings.append(Finding(check, "ok", _describe(wanted)))
    return findings


def _describe(index: Mapping[str, Any]) -> str:
    keys, options = _shape(index)
    text = ", ".join(f"{k}: {v}" for k, v in keys)
    return "{" + text + "}" + "".join(f" {o}={v}" for o, v in options)


def ttl(found: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[Finding]:
    """TTL indexes on the checkpointer's collections, which break stored threads."""
    findings = [
        Finding(
            f"TTL {collection}.{name}",
            "fail",
            f"expires documents after {info['expireAfterSeconds']} s one by one: a checkpoint "
            "can lose its values, writes or the ancestors its DeltaChannels are rebuilt from",
            f"drop it (db.{collection}.dropIndex('{name}')) and expire whole threads with "
            "MongoDBSaver(ttl=<seconds>) instead (docs/delta-channels.md)",
        )
        for collection, infos in found.items()
        for name, info in infos.items()
        if info.get("expireAfterSeconds") is not None
    ]
    return findings or [
        Finding("TTL", "ok", "no TTL index; threads expire only through the saver's ttl sweep")
    ]


def schema_version(
    found: int | None, ladder: Ladder, stored_by: str | None, db_name: str
) -> Finding:
    """The layout version recorded for the saver (``found``) against the versions this
    release reads (``ladder``); ``stored_by``: who wrote the checkpoints
    (``inspection.stored_by``)."""
    check = "schema version"
    current = ladder.current
    pre_release = f"a development build wrote it before the first release: {PRE_RELEASE_FIX}"
    if found == current:
        return Finding(check, "ok", f"version {found} (current)")
    if found is not None and found > current:
        return Finding(
            check, "fail", f"version {found}, newer than version {current} this mongo-ckpt reads",
            "upgrade mongo-ckpt to a newer release before reading this data",
        )
    if found is not None and found >= ladder.oldest:
        upgrade = f"`mongo-ckpt upgrade --db {db_name}`"
        by_setup = len(ladder.above(found, upgrade=False)) == len(ladder.above(found, upgrade=True))
        return Finding(
            check, "warn", f"version {found}, older than the current {current}",
            f"the next setup() takes it there, or {upgrade}" if by_setup
            else f"{upgrade} once no process of an earlier release is left",
        )
    if found is not None:
        return Finding(
            check, "fail", f"version {found}, a pre-release layout (current: {current})",
            pre_release,
        )
    if stored_by is None:
        return Finding(check, "ok", "not recorded yet: no data (setup() records it on first use)")
    if stored_by == "official":
        return Finding(
            check, "fail", "langgraph-checkpoint-mongodb data, which mongo-ckpt does not read",
            f"convert it into another database: `{migrate_command(db_name)}`",
        )
    return Finding(
        check, "fail", f"not recorded: data of an earlier mongo-ckpt (current: {current})",
        pre_release,
    )


def writable(error: str | None) -> Finding:
    """Whether a probe write succeeded (``error``: why it did not)."""
    if error is None:
        return Finding("write access", "ok", "the client can write")
    return Finding(
        "write access", "fail", f"a probe write failed: {error}",
        "grant the user the readWrite role on this database",
    )
