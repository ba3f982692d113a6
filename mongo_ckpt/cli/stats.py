"""``stats``: collection and index sizes, documents, and how the bytes spread over threads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from mongo_ckpt import inspection
from mongo_ckpt.cli.options import (
    Session,
    Target,
    open_session,
    schema_status,
    target_options,
)
from mongo_ckpt.cli.output import console, emit_json, size, table

PLOT_MISSING = "stats --plot needs matplotlib: pip install matplotlib (the `plot` extra)"


def collection_stats(session: Session, top: int) -> dict[str, Any]:
    """Everything ``stats`` reports, as JSON-ready data."""
    measured: inspection.Sizes = session.run(
        inspection.sizes({}, top, session.server_sizes)
    )
    counts = session.run(inspection.counts())
    indexes = session.run(inspection.indexes())
    collections = {}
    for logical, name in session.saver.layout.by_logical().items():
        server = session.run(inspection.server_reply({"collStats": name})) or {}
        collections[name] = {
            "documents": counts[logical],
            "data_bytes": measured.collection_bytes(logical),
            "storage_bytes": server.get("storageSize"),
            "index_bytes": server.get("totalIndexSize"),
            "indexes": {
                index: (server.get("indexSizes") or {}).get(index) for index in indexes[logical]
            },
        }
    per_thread = {t: measured.bytes_of(t) for t in measured.threads}
    largest = sorted(per_thread.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {
        "database": session.saver.db.name,
        "collections": collections,
        "threads": len(per_thread),
        "thread_bytes": inspection.percentiles(per_thread.values()),
        "largest_threads": [{"thread_id": t, "bytes": b} for t, b in largest],
        "largest_documents": [
            {"collection": session.saver.layout.by_logical()[d.collection], "bytes": d.size,
             **d.identity}
            for d in measured.largest
        ],
        "schema": vars(schema_status(session)),
        "per_thread_bytes": per_thread,
    }


def plot(database: str, per_thread: dict[str, int], path: Path) -> None:
    """A histogram of the bytes per thread, with the percentiles marked, saved as PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise click.ClickException(PLOT_MISSING) from exc
    values = sorted(per_thread.values())
    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    axes.hist([v / 1000 for v in values], bins=min(40, max(5, len(values))), color="#4c72b0")
    styles = ("--", "-.", ":", "-")
    for (name, value), style in zip(inspection.percentiles(values).items(), styles):
        axes.axvline(value / 1000, linestyle=style, color="#c44e52", linewidth=1.2,
                     label=f"{name} {size(value)}")
    axes.legend(loc="upper right")
    axes.set_xlabel("stored kB per thread (checkpoints, values and writes)")
    axes.set_ylabel("threads")
    axes.set_title(f"{database}: {len(values)} threads")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


@click.command()
@target_options
@click.option("--top", type=click.IntRange(0), default=5, show_default=True,
              help="How many of the largest threads and documents to list.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Draw the size distribution per thread to this PNG file.")
def stats(target: Target, top: int, plot_path: Path | None) -> None:
    """Collection and index sizes, document counts, size percentiles per thread, the
    largest threads and documents, and the schema version."""
    if plot_path is not None:  # checked before the scan, which can take long
        folder = plot_path.resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise click.BadParameter(
                f"cannot write {str(plot_path)!r}: {str(folder)!r} is not a writable directory",
                param_hint="--plot",
            )
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise click.ClickException(PLOT_MISSING) from exc
    with open_session(target, layout_checked=False) as session:
        result = collection_stats(session, top)
    per_thread = result.pop("per_thread_bytes")
    if plot_path is not None:
        plot(result["database"], per_thread, plot_path)
    if target.json:
        emit_json(target.db, {**result, "plot": str(plot_path) if plot_path else None})
        return
    _print(result, plot_path)


def _print(result: dict[str, Any], plot_path: Path | None) -> None:
    out = console()
    def known(value: int | None) -> str:
        return "-" if value is None else size(value)

    rows: list[tuple[Any, ...]] = [
        (name, c["documents"], size(c["data_bytes"]), known(c["storage_bytes"]),
         known(c["index_bytes"]), ", ".join(c["indexes"]))
        for name, c in result["collections"].items()
    ]
    out.print(table(f"database {result['database']!r}",
                    ("collection", "documents", "data", "storage", "indexes size", "indexes"),
                    rows))
    spread = result["thread_bytes"]
    summary = "  ".join(f"{k} {size(v)}" for k, v in spread.items())
    out.print(f"{result['threads']} threads; stored bytes per thread: {summary or '-'}")
    if result["largest_threads"]:
        out.print(table("largest threads", ("thread", "stored"),
                        [(t["thread_id"], size(t["bytes"])) for t in result["largest_threads"]]))
    if result["largest_documents"]:
        rows = [
            (d["collection"], d.get("thread_id"), d.get("checkpoint_id") or d.get("channel"),
             size(d["bytes"]))
            for d in result["largest_documents"]
        ]
        out.print(table("largest documents", ("collection", "thread", "checkpoint/channel",
                                              "size"), rows))
    out.print(f"schema version: {result['schema']['detail']}")
    if plot_path is not None:
        out.print(f"plot written to {plot_path}")
