"""``delete``, ``copy`` and ``prune``: the saver's own maintenance methods, with a dry run
and a confirmation prompt; ``ttl``, a thread's own ttl; ``rekey``, re-encryption under the
current key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from mongo_ckpt import inspection, rekeying, thread_settings
from mongo_ckpt.calls import count_documents
from mongo_ckpt.cli.options import (
    Session,
    Target,
    finite,
    open_session,
    serde_from_env,
    target_options,
)
from mongo_ckpt.cli.output import (
    DONE,
    ERROR,
    NOTHING_MATCHED,
    NothingMatched,
    console,
    emit_json,
    table,
)
from mongo_ckpt.clock import server_now
from mongo_ckpt.copying import ThreadExistsError
from mongo_ckpt.keyring import KEYS_VARIABLE
from mongo_ckpt.layout import BLOBS, CHECKPOINTS, STORE, THREADS, WRITES
from mongo_ckpt.operations import Deleted

F = TypeVar("F", bound=Callable[..., Any])
LABELS = {CHECKPOINTS: "checkpoints", BLOBS: "values", WRITES: "writes", THREADS: "settings"}


def _confirm(question: str, yes: bool) -> None:
    if not yes:
        click.confirm(question, abort=True, err=True)


def dry_run_option(command: F) -> F:
    return click.option(
        "--dry-run", is_flag=True, help="Only report what would change."
    )(command)


def yes_option(command: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


def idle_option(command: F) -> F:
    return click.option(
        "--idle-days",
        type=click.FloatRange(0, min_open=True),
        callback=finite,
        default=None,
        help="Select every thread without a checkpoint in this many days.",
    )(command)


def selection_options(command: F) -> F:
    """The target, the threads (named, or ``--idle-days``), ``--dry-run`` and ``--yes``."""
    for option in (
        yes_option, dry_run_option, idle_option, click.argument("thread_ids", nargs=-1),
        target_options,
    ):
        command = option(command)
    return command


def _selected(
    session: Session, thread_ids: tuple[str, ...], idle_days: float | None
) -> tuple[list[str], list[str], datetime | None]:
    """The threads that have checkpoints, the named ones that have none, and with
    ``--idle-days`` the cutoff (by the server's clock) the threads were selected with."""
    if bool(thread_ids) == (idle_days is not None):
        raise click.UsageError("name the threads, or select them with --idle-days (not both)")
    if idle_days is None:
        stored = session.run(inspection.stored_threads(thread_ids))
        return stored, sorted(set(thread_ids) - set(stored)), None
    cutoff = session.run(server_now()) - timedelta(days=idle_days)
    return session.run(inspection.idle_threads(cutoff)), [], cutoff


def _unmatched(selected: list[str], absent: list[str]) -> str | None:
    """What to say when some or all of the threads asked for are not there."""
    if absent:
        return f"no checkpoints of {', '.join(map(repr, absent))}: not found"
    return None if selected else "no thread is idle that long"


def _report(
    target: Target,
    action: str,
    done: bool,
    threads: list[str],
    counts: dict[str, int],
    title: str,
    spared: list[str] | None = None,
    unmatched: str | None = None,
    absent: tuple[str, ...] | list[str] = (),
) -> None:
    """Print what was (or would be) changed; exit ``NOTHING_MATCHED`` with ``unmatched``."""
    status = NOTHING_MATCHED if unmatched else DONE
    if target.json:
        report: dict[str, Any] = {
            "action": action, "dry_run": not done, "threads": threads,
            "documents": {LABELS[k]: v for k, v in counts.items()}, "not_found": list(absent),
        }
        if spared is not None:
            report["spared"] = spared
        emit_json(target.db, report, status)
        raise click.exceptions.Exit(status)
    verb = ("copied" if action == "copy" else "deleted") if done else "affected"
    out = console()
    rows = [(LABELS[k], v) for k, v in counts.items()]
    out.print(table(title, ("", f"documents {verb}"), rows))
    if spared:
        out.print(f"spared {len(spared)} threads active or kept since the selection: "
                  f"{', '.join(spared)}")
    if not done:
        out.print("dry run: nothing was changed")
    if unmatched:
        out.print(unmatched)
    raise click.exceptions.Exit(status)


@click.command()
@selection_options
def delete(
    target: Target, thread_ids: tuple[str, ...], idle_days: float | None, dry_run: bool, yes: bool
) -> None:
    """Delete threads: every checkpoint, value and pending write (saver.prune, "delete").

    With ``--idle-days``, each thread is judged again when it is deleted: one with a
    checkpoint stored since the cutoff (it became active after the selection) is spared."""
    with open_session(target) as session:
        selected, absent, cutoff = _selected(session, thread_ids, idle_days)
        counts = session.run(inspection.counts(selected))
        deleted, spared = Deleted(threads=selected, documents=counts), None
        if not dry_run and selected:
            _confirm(f"Delete {len(selected)} threads ({counts[CHECKPOINTS]} checkpoints)?", yes)
            ops = session.saver.ops
            if cutoff is None:
                deleted = session.run(ops.delete_threads(selected))
            else:
                deleted = session.run(ops.delete_idle(selected, cutoff))
                spared = sorted(set(selected) - set(deleted.threads))
    title = f"delete: {len(deleted.threads)} threads"
    _report(
        target, "delete", not dry_run, deleted.threads, deleted.documents, title, spared,
        _unmatched(selected, absent), absent,
    )


@click.command()
@target_options
@click.argument("source")
@click.argument("destination")
@dry_run_option
@yes_option
def copy(target: Target, source: str, destination: str, dry_run: bool, yes: bool) -> None:
    """Copy thread SOURCE, whole history, to the id DESTINATION (saver.copy_thread)."""
    if source == destination:
        raise click.BadParameter("SOURCE and DESTINATION must differ", param_hint="DESTINATION")
    with open_session(target) as session:
        counts = session.run(inspection.counts([source]))
        if not counts[CHECKPOINTS]:
            raise NothingMatched(
                f"thread {source!r} has no checkpoints to copy", target.db, target.json,
                {"thread_id": source},
            )
        try:
            session.run(session.saver.ops.check_copy_target(source, destination))
            if not dry_run:
                _confirm(f"Copy {source!r} to {destination!r}?", yes)
                session.saver.copy_thread(source, destination)
        except ThreadExistsError as exc:
            raise click.ClickException(str(exc)) from exc
    title = f"copy {source!r} to {destination!r}"
    _report(target, "copy", not dry_run, [source, destination], counts, title)


@click.command()
@selection_options
def prune(
    target: Target, thread_ids: tuple[str, ...], idle_days: float | None, dry_run: bool, yes: bool
) -> None:
    """Drop old history: keep each namespace's latest checkpoint (and the ancestors its
    DeltaChannels are rebuilt from), delete the other checkpoints (saver.prune)."""
    with open_session(target) as session:
        selected, absent, cutoff = _selected(session, thread_ids, idle_days)
        skeletons, doomed = session.run(session.saver.ops.prune_plan(selected))
        spared: list[str] = []
        if not dry_run and doomed:
            _confirm(f"Delete {len(doomed)} of {len(skeletons)} checkpoints?", yes)
            if cutoff is None:
                session.saver.prune(selected, strategy="keep_latest")
            else:  # judged again, as the sweep does: active or kept since, spared
                ops = session.saver.ops
                pruned = session.run(ops.delete_idle(selected, cutoff, "keep_latest")).threads
                spared = sorted({s["thread_id"] for s in doomed} - set(pruned))
                doomed = [s for s in doomed if s["thread_id"] in pruned]
    per_thread: dict[str, int] = {}
    for skeleton in doomed:
        per_thread[skeleton["thread_id"]] = per_thread.get(skeleton["thread_id"], 0) + 1
    unmatched = _unmatched(selected, absent)
    status = NOTHING_MATCHED if unmatched else DONE
    if target.json:
        emit_json(target.db, {"action": "prune", "dry_run": dry_run, "threads": selected,
                              "not_found": absent, "checkpoints": len(skeletons),
                              "pruned": len(doomed), "pruned_per_thread": per_thread,
                              "spared": spared}, status)
        raise click.exceptions.Exit(status)
    out = console()
    rows = [(t, n) for t, n in sorted(per_thread.items())]
    verb = "would be deleted" if dry_run else "deleted"
    out.print(table(f"prune: {len(doomed)} of {len(skeletons)} checkpoints {verb}",
                    ("thread", "checkpoints"), rows))
    if spared:
        out.print(f"spared {len(spared)} threads active or kept since the selection: "
                  f"{', '.join(spared)}")
    if dry_run:
        out.print("dry run: nothing was changed")
    if unmatched:
        out.print(unmatched)
    raise click.exceptions.Exit(status)


@click.command()
@target_options
@click.argument("thread_id")
@click.argument("ttl", required=False)
def ttl(target: Target, thread_id: str, ttl: str | None) -> None:
    """Show THREAD_ID's own ttl, or set it to TTL: seconds of inactivity after which the
    retention sweep expires the thread, "never", or "default" (the saver's ttl again)
    (saver.set_thread_ttl)."""
    value: float | str | None = ttl
    if ttl is not None and ttl not in (thread_settings.NEVER, thread_settings.DEFAULT):
        try:
            value = float(ttl)
        except ValueError:
            message = f"{ttl!r} is not a number of seconds, 'never' or 'default'"
            raise click.BadParameter(message, param_hint="TTL") from None
    with open_session(target) as session:
        if value is not None:
            try:
                session.run(session.saver.ops.set_thread_ttl(thread_id, value))
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="TTL") from None
        own = session.run(thread_settings.read(thread_settings.of([thread_id])))
    limit = own[thread_id].ttl if thread_id in own else None
    shown = "default" if limit is None else "never" if limit == float("inf") else limit
    if target.json:
        emit_json(target.db, {"thread_id": thread_id, "ttl": shown})
    else:
        console().print(f"thread {thread_id!r}: ttl {shown}")


@click.command()
@target_options
@click.option(
    "--store", "store_collection", metavar="COLLECTION",
    help="Also the items of this store collection (e.g. store).",
)
@click.option(
    "--batch-size", type=click.IntRange(1), default=rekeying.BATCH, show_default=True,
    help="Values read and written per round.",
)
@dry_run_option
def rekey(target: Target, store_collection: str | None, batch_size: int, dry_run: bool) -> None:
    """Re-encrypt what keys other than the current one wrote under the current key
    (saver.rekey, store.rekey), beside running applications; run it again to resume. The
    key ring is MONGO_CKPT_KEYS: id:<base64 key> pairs separated by commas, the current
    key MONGO_CKPT_CURRENT_KEY (else the last listed), and LANGGRAPH_AES_KEY, if set, the
    key of values without a key id. Exit status 1 when values are left under other keys."""
    try:
        ring = rekeying.ring_of(serde_from_env())
    except TypeError:
        raise click.UsageError(
            f"rekey needs the key ring: set {KEYS_VARIABLE} to id:<base64 key> pairs, "
            "separated by commas (every key values were written with, and the current one)"
        ) from None
    with open_session(target) as session:
        places = list(rekeying.SAVER_PLACES)
        if store_collection:
            session.collections[STORE] = session.saver.db[store_collection]
            places += rekeying.STORE_PLACES
        if dry_run:
            report = rekeying.Rekeyed()
            for place in places:
                wanted = rekeying.selection(place, ring)
                report.left[place.label] = session.run(count_documents(place.collection, wanted))
        else:
            report = session.run(rekeying.rekey(ring, places, batch_size))
    status = DONE if report.done else ERROR
    counts = {"rekeyed": report.rekeyed, "changed": report.changed, "left": report.left}
    if target.json:
        by_place = {name: dict(counted) for name, counted in counts.items()}
        emit_json(target.db, {"current_key": ring.current, "dry_run": dry_run, **by_place}, status)
    else:
        columns = ("values", "re-encrypted", "changed by writers", "under other keys")
        rows = [[p.label, *(counted[p.label] for counted in counts.values())] for p in places]
        console().print(table(f"rekey to {ring.current!r}", columns, rows))
        if not report.done:
            console().print(
                "values are left under other keys: run rekey again (once every process writes "
                f"with {ring.current!r})"
            )
    raise click.exceptions.Exit(status)
