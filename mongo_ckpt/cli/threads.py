"""``threads``, ``history``, ``show`` and ``diff``: what the stored threads hold."""

from __future__ import annotations

import json
from typing import Any

import click
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from rich.pretty import Pretty

from mongo_ckpt import inspection
from mongo_ckpt.cli.options import Session, Target, open_session, target_options
from mongo_ckpt.cli.output import (
    DONE,
    NOTHING_MATCHED,
    NothingMatched,
    cell,
    console,
    emit_json,
    heading,
    size,
    table,
)
from mongo_ckpt.reading import list_query
from mongo_ckpt.snapshots import (
    channel_values,
    diff_values,
    history_rows,
    is_conversation,
    is_internal_channel,
    message_line,
    next_nodes,
)


def _metadata_filter(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that parses as JSON is used as such, else as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--filter")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    try:
        return list_query(None, out, None, None) if out else {}
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--filter") from exc


@click.command()
@target_options
@click.option(
    "--sort",
    type=click.Choice(inspection.THREAD_SORTS),
    default="activity",
    show_default=True,
    help="Newest activity, largest size, most checkpoints first; or by thread id.",
)
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True)
@click.option("--page", type=click.IntRange(1), default=1, show_default=True)
@click.option(
    "--filter",
    "filters",
    multiple=True,
    metavar="KEY=VALUE",
    help="Only threads with a checkpoint whose metadata has KEY=VALUE (JSON or text).",
)
def threads(target: Target, sort: str, limit: int, page: int, filters: tuple[str, ...]) -> None:
    """Threads with their checkpoint count, namespaces, stored bytes and last activity."""
    match = _metadata_filter(filters)
    with open_session(target) as session:
        result = session.run(
            inspection.threads(match, sort, (page - 1) * limit, limit, session.server_sizes)
        )
    if result.total and not result.rows:
        last = -(-result.total // limit)
        raise NothingMatched(
            f"page {page} is past the end: {result.total} threads make {last} page"
            f"{'s' if last > 1 else ''} of {limit}",
            target.db, target.json, {"total": result.total, "page": page, "limit": limit},
        )
    status = DONE if result.total else NOTHING_MATCHED
    if target.json:
        emit_json(target.db, {"total": result.total, "page": page, "limit": limit,
                              "threads": [vars(r) for r in result.rows]}, status)
        raise click.exceptions.Exit(status)
    out = console()
    rows = [
        (r.thread_id, r.checkpoints, r.namespaces, size(r.bytes), r.documents,
         r.last_activity)
        for r in result.rows
    ]
    columns = ("thread", "checkpoints", "namespaces", "stored", "documents", "last activity")
    out.print(table(None, columns, rows))
    first = (page - 1) * limit
    out.print(
        f"threads {first + 1 if rows else 0}-{first + len(rows)} of {result.total}, "
        f"sorted by {sort}"
    )
    if not result.total:
        out.print("no thread has a checkpoint with that metadata" if match else "no threads")
    raise click.exceptions.Exit(status)


def _thread_documents(
    session: Session, target: Target, thread_id: str, ns: str | None
) -> inspection.ThreadDocuments:
    docs = session.run(inspection.thread_documents(thread_id, ns))
    if not docs[0]:
        where = f" in namespace {ns!r}" if ns is not None else ""
        raise NothingMatched(
            f"thread {thread_id!r} has no checkpoints{where}", target.db, target.json,
            {"thread_id": thread_id},
        )
    return docs


@click.command()
@target_options
@click.argument("thread_id")
@click.option("--ns", default=None, help="Only this checkpoint namespace ('' is the root graph).")
def history(target: Target, thread_id: str, ns: str | None) -> None:
    """Checkpoints of THREAD_ID, newest first."""
    with open_session(target) as session:
        rows = history_rows(
            session.saver.serde, *_thread_documents(session, target, thread_id, ns)
        )
    if target.json:
        emit_json(target.db, {"thread_id": thread_id, "checkpoints": [vars(r) for r in rows]})
        return
    namespaces = {r.checkpoint_ns for r in rows}
    columns = ["checkpoint", "step", "source", "next", "writes", "parent", "size"]
    if namespaces != {""}:
        columns.insert(1, "namespace")
    body = []
    for r in rows:
        line = [r.checkpoint_id, r.step, r.source, r.next, r.writes, r.parent_id, size(r.bytes)]
        if namespaces != {""}:
            line.insert(1, r.checkpoint_ns or "''")
        body.append(line)
    out = console()
    out.print(table(f"thread {thread_id!r}: {len(rows)} checkpoints", columns, body))


def _tuple(
    session: Session, target: Target, thread_id: str, ns: str, checkpoint_id: str | None
) -> CheckpointTuple:
    key = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    config: RunnableConfig = {"configurable": key}
    found = session.run(session.saver.ops.get_tuple(config))
    if found is None:
        what = f"checkpoint {checkpoint_id!r}" if checkpoint_id else "checkpoint"
        raise NothingMatched(
            f"thread {thread_id!r} (namespace {ns!r}) has no {what}: see `mongo-ckpt history "
            f"{thread_id}`", target.db, target.json, key,
        )
    return found


def _replayed(session: Session, found: CheckpointTuple) -> list[str]:
    """DeltaChannels of ``found`` whose value is rebuilt from history, not stored."""
    key = found.config["configurable"]
    doc = session.run(inspection.checkpoint_document(
        key["thread_id"], key["checkpoint_ns"], key["checkpoint_id"]
    ))
    return list(doc.get("replay", ())) if doc else []


@click.command()
@target_options
@click.argument("thread_id")
@click.option("--checkpoint", "checkpoint_id", default=None, help="Default: the latest.")
@click.option("--ns", default="", help="Checkpoint namespace (default: the root graph).")
@click.option("--channel", "channels", multiple=True, help="Only this channel (repeatable).")
@click.option(
    "--internal", is_flag=True, help="Also LangGraph's own channels (__start__, branch:to:...)."
)
def show(
    target: Target,
    thread_id: str,
    checkpoint_id: str | None,
    ns: str,
    channels: tuple[str, ...],
    internal: bool,
) -> None:
    """The state of THREAD_ID at a checkpoint: channel values decoded with LangGraph's
    serializer (AES-encrypted data with LANGGRAPH_AES_KEY), messages as a conversation."""
    with open_session(target) as session:
        found = _tuple(session, target, thread_id, ns, checkpoint_id)
        replayed = _replayed(session, found)
    values = channel_values(found.checkpoint["channel_values"])
    unknown = [c for c in channels if c not in values and c not in replayed]
    if unknown:
        raise click.BadParameter(
            f"no channel {', '.join(map(repr, unknown))}; this checkpoint has "
            f"{', '.join(map(repr, sorted(values)))}",
            param_hint="--channel",
        )
    shown = {
        c: v
        for c, v in values.items()
        if (c in channels if channels else internal or not is_internal_channel(c))
    }
    metadata = found.metadata or {}
    upcoming = next_nodes(found.checkpoint, set(values) | set(replayed))
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    writes = [{"task_id": t, "channel": c, "value": v} for t, c, v in found.pending_writes or []]
    if target.json:
        emit_json(target.db, {
            "thread_id": thread_id, "checkpoint_ns": ns,
            "checkpoint_id": found.checkpoint["id"], "parent_id": parent, "next": upcoming,
            "metadata": metadata, "values": shown,
            "rebuilt_from_history": [c for c in replayed if not channels or c in channels],
            "pending_writes": writes,
        })
        return
    out = console()
    out.print(
        f"thread {thread_id!r}  checkpoint {found.checkpoint['id']}  step {metadata.get('step')}"
        f"  source {metadata.get('source')}  parent {cell(parent)}  next {cell(upcoming)}"
    )
    for channel, value in shown.items():
        heading(out, channel)
        if is_conversation(value):
            for message in value:
                out.print(message_line(message))
        else:
            out.print(Pretty(value))
    for channel in replayed:
        if not channels or channel in channels:
            heading(out, channel)
            out.print("(DeltaChannel: not stored at this checkpoint, rebuilt from history on load)")
    if writes:
        heading(out, "pending writes")
        for write in writes:
            line = f"{write['channel']} (task {write['task_id']}): {write['value']!r}"
            out.print(line)


@click.command()
@target_options
@click.argument("thread_id")
@click.argument("checkpoint_a")
@click.argument("checkpoint_b")
@click.option("--ns", default="", help="Checkpoint namespace (default: the root graph).")
@click.option("--all", "show_all", is_flag=True, help="Also list unchanged channels.")
def diff(
    target: Target, thread_id: str, checkpoint_a: str, checkpoint_b: str, ns: str, show_all: bool
) -> None:
    """Channel-by-channel difference of THREAD_ID's state from CHECKPOINT_A to CHECKPOINT_B."""
    with open_session(target) as session:
        found = [_tuple(session, target, thread_id, ns, c) for c in (checkpoint_a, checkpoint_b)]
        rebuilt = {c for f in found for c in _replayed(session, f)}
    a, b = (channel_values(f.checkpoint["channel_values"]) for f in found)
    changes = [d for d in diff_values(a, b, rebuilt) if show_all or d.status != "unchanged"]
    if target.json:
        emit_json(target.db, {
            "thread_id": thread_id, "checkpoint_ns": ns, "from": checkpoint_a,
            "to": checkpoint_b, "changes": [vars(d) for d in changes],
        })
        return
    out = console()
    differ = sum(d.status != "unchanged" for d in changes)
    out.print(f"thread {thread_id!r}: {checkpoint_a} -> {checkpoint_b}, {differ} differing")
    for d in changes:
        heading(out, f"{d.channel}: {d.status}")
        if d.status == "appended":
            for item in d.appended or []:
                line = message_line(item) if is_conversation([item]) else repr(item)
                out.print(f"+ {line}")
        elif d.status in ("changed", "removed"):
            out.print("- ", Pretty(d.before))
            if d.status == "changed":
                out.print("+ ", Pretty(d.after))
        elif d.status == "added":
            out.print("+ ", Pretty(d.after))
        elif d.status == "not compared":
            out.print("(DeltaChannel not stored at one of the checkpoints: rebuilt from history)")
