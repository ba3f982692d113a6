"""The ``mongo-ckpt`` command line: inspect and maintain checkpoint data, and the demo.

Every data command connects to ``--uri`` (default ``$MONGODB_URI``). Programs and tests
can hand the commands a client instead, for example a ``mongomock.MongoClient``, through
click's context object: ``cli.main(args, obj=CliState(client=...))`` or
``CliRunner().invoke(cli, args, obj=CliState(client=...))``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from mongo_ckpt import __version__
from mongo_ckpt.cli.demo import demo
from mongo_ckpt.cli.doctor import doctor
from mongo_ckpt.cli.maintenance import copy, delete, prune, rekey, ttl
from mongo_ckpt.cli.migrate import migrate, upgrade
from mongo_ckpt.cli.options import CliState
from mongo_ckpt.cli.stats import stats
from mongo_ckpt.cli.threads import diff, history, show, threads

__all__ = ["CliState", "cli", "main"]


class _InOrder(click.Group):
    """Lists commands in the order they were added (inspect, maintain, check), not sorted."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(
    cls=_InOrder,
    name="mongo-ckpt",
    help=(
        "mongo-ckpt: LangGraph checkpoints and memory on MongoDB.\n\nExit status: 0 done, "
        "1 error, 2 usage error, 3 nothing matched (no such thread, no mongo-ckpt data in "
        "--db; migrate: threads skipped)."
    ),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(
    __version__, "--version", prog_name="mongo-ckpt", message="%(prog)s %(version)s"
)
def cli() -> None:
    """The command group; each subcommand is added below."""


for command in (
    threads, history, show, diff, stats, delete, copy, prune, ttl, rekey, doctor, migrate,
    upgrade, demo,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``mongo-ckpt``; returns the process exit code."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="mongo-ckpt",
            standalone_mode=False,
        )
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return result if isinstance(result, int) else 0
