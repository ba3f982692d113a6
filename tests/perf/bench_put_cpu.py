"""Client CPU per ``put``: mongo-ckpt's own work at given turns of a long conversation.

Runs the ``add_messages`` conversation of ``tests/perf/conversation.py`` on mongomock and,
for the puts of the ``--window`` turns up to each reported turn, measures:

- **own CPU**: the thread's CPU time (``time.thread_time``) spent inside the steps of the
  put's operation generator, that is planning (list-delta fingerprints), serializing and
  building the documents, without the driver's execution of each call (on mongomock the
  server's work runs in the same thread, so this leaves it out);
- **put CPU**: the thread's CPU time of the whole ``saver.put``, mongomock included;
- the CPU of serializing the turn's whole message list once (``serde.dumps_typed``), what
  a saver that stores the list whole spends on it at every put that changes it;
- a ``cProfile`` of the operation's steps alone, over the ``--window`` turns before those
  (the profiler inflates what it measures): their time by package and the functions with
  the largest cumulative time, per put.

Run from the repository root (not collected by pytest)::

    python tests/perf/bench_put_cpu.py [--turns 50 400] [--window 5] [--top 25]
        [--list-deltas | --whole]
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import mongomock  # noqa: E402

from tests.perf.conversation import (  # noqa: E402
    MONGO_CKPT,
    MONGO_CKPT_WHOLE,
    PLAIN,
    chat_graph,
    make_saver,
    run_turn,
)

# Where profiled time goes, by the file (or built-in) a function belongs to; first match.
PACKAGES = (
    ("mongo_ckpt", ("mongo_ckpt",)),
    ("serde (langgraph serde, ormsgpack)", ("langgraph/checkpoint/serde", "ormsgpack")),
    ("bson", ("bson",)),
    ("pymongo", ("pymongo",)),
    ("hashlib", ("hashlib", "blake2b", "_blake2")),
)
# The generator methods this script steps the operation with (left out of the listing).
_STEPPING = ("<method 'send' of 'generator' objects>", "<method 'throw' of 'generator' objects>")


@dataclass
class PutSample:
    step: int
    new_channels: tuple[str, ...]
    own: float = 0.0  # seconds of CPU inside the operation's steps
    total: float = 0.0  # seconds of CPU of the whole put
    wall: float = 0.0


@dataclass
class Window:
    """Up to turn ``last``: the puts of the ``width`` turns before it timed, those of the
    ``width`` turns before these profiled (the profiler would inflate the times)."""

    last: int
    width: int
    samples: list[PutSample] = field(default_factory=list)
    profile: cProfile.Profile = field(default_factory=cProfile.Profile)
    profiled_puts: int = 0
    whole_list: float = 0.0  # seconds of CPU to serialize the turn's message list once

    def mode(self, turn: int) -> str | None:
        if self.last - self.width < turn <= self.last:
            return "time"
        if self.last - 2 * self.width < turn <= self.last - self.width:
            return "profile"
        return None


class Steps:
    """What to do around each step of a put's operation: time it, or profile it."""

    def __init__(self, sample: PutSample | None, profile: cProfile.Profile | None) -> None:
        self.sample, self.profile = sample, profile

    def run(self, step: Callable[[], Any]) -> Any:
        if self.profile is not None:
            self.profile.enable()
            try:
                return step()
            finally:
                self.profile.disable()
        assert self.sample is not None
        start = time.thread_time()
        try:
            return step()
        finally:
            self.sample.own += time.thread_time() - start


def measured(operation: Generator[Any, Any, Any], steps: Steps) -> Generator[Any, Any, Any]:
    """``operation``, each of its steps run by ``steps`` (the driver's calls are not)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            if error is not None:
                step = steps.run(lambda e=error: operation.throw(e))
            else:
                step = steps.run(lambda v=value: operation.send(v))
        except StopIteration as stop:
            return stop.value
        value = error = None
        try:
            value = yield step
        except Exception as exc:  # the driver's error for this step: the operation's to handle
            error = exc


class PutMeter:
    """Wraps ``saver.put`` and the operations it runs; measures the puts of open windows."""

    def __init__(self, saver: Any) -> None:
        self.window: Window | None = None
        self.mode: str | None = None
        self._current = threading.local()
        prepare, put = saver._prepared, saver.put

        # Every operation the saver runs goes through ``_prepared`` (``saver.ops`` is built
        # afresh per call): wrap the put's.
        def prepared(operation: Any, span: Any) -> Generator[Any, Any, Any]:
            steps = getattr(self._current, "steps", None)
            operation = prepare(operation, span)
            if steps is None or span is None or span.name != "put":
                return operation
            return measured(operation, steps)

        def measured_put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            window, mode = self.window, self.mode
            if window is None:
                return put(config, checkpoint, metadata, new_versions)
            if mode == "profile":
                window.profiled_puts += 1
                self._current.steps = Steps(None, window.profile)
                try:
                    return put(config, checkpoint, metadata, new_versions)
                finally:
                    self._current.steps = None
            sample = PutSample(metadata.get("step", 0), tuple(sorted(new_versions)))
            self._current.steps = Steps(sample, None)
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return put(config, checkpoint, metadata, new_versions)
            finally:
                sample.total = time.thread_time() - cpu
                sample.wall = time.perf_counter() - wall
                self._current.steps = None
                window.samples.append(sample)

        saver._prepared = prepared
        saver.put = measured_put


def converse(saver_name: str, report_at: list[int], width: int) -> list[Window]:
    saver = make_saver(saver_name, mongomock.MongoClient(), "bench_put_cpu")
    graph = chat_graph(saver, PLAIN)
    meter = PutMeter(saver)
    windows = [Window(n, width) for n in report_at]
    for turn in range(1, max(report_at) + 1):
        meter.window, meter.mode = next(
            ((w, m) for w in windows if (m := w.mode(turn))), (None, None)
        )
        run_turn(graph, "conversation", turn - 1)
        for w in windows:
            if w.last == turn:
                w.whole_list = serialize_once(saver, graph)
        if turn % 50 == 0:
            print(f"  turn {turn}", file=sys.stderr, flush=True)
    return windows


def serialize_once(saver: Any, graph: Any, runs: int = 5) -> float:
    """CPU of one ``serde.dumps_typed`` of the thread's message list (median of ``runs``):
    what a saver that stores the list whole (the official one, ``list_deltas=False``)
    spends on it at every put that changes it."""
    messages = graph.get_state({"configurable": {"thread_id": "conversation"}}).values["messages"]
    times = []
    for _ in range(runs):
        start = time.thread_time()
        saver.serde.dumps_typed(messages)
        times.append(time.thread_time() - start)
    return statistics.median(times)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _package(filename: str, name: str) -> str:
    where = filename if filename != "~" else name
    for package, needles in PACKAGES:
        if any(needle in where for needle in needles):
            return package
    return "other built-ins" if filename == "~" else "other Python (langgraph, stdlib)"


def _harness(func: tuple[str, int, str]) -> bool:
    """Whether a profiled function is this script's stepping of the operation."""
    return func[0] == __file__ or func[2] in _STEPPING


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    for root in ("site-packages/", str(REPO) + "/"):
        if root in filename:
            filename = filename.split(root, 1)[1]
            break
    return f"{filename}:{line}({name})"


def report(windows: list[Window], top: int, describe: str) -> str:
    lines = [
        f"CPU per put, {describe}, {PLAIN} conversation on mongomock "
        f"(puts of the {windows[0].width} turns up to each turn; ms per put, mean / max)",
        "",
        "| turn | puts | own CPU | put CPU (mongomock included) | own share | put wall | "
        "the message list serialized once |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in windows:
        own, total = [s.own for s in w.samples], [s.total for s in w.samples]
        lines.append(
            f"| {w.last} | {len(w.samples)} | {_ms(statistics.fmean(own))} / {_ms(max(own))} | "
            f"{_ms(statistics.fmean(total))} / {_ms(max(total))} | "
            f"{sum(own) / sum(total):.0%} | {_ms(statistics.fmean(s.wall for s in w.samples))} | "
            f"{_ms(w.whole_list)} |"
        )
    lines += ["", "By checkpoint of the turn (the channels it gives new versions):", ""]
    lines += [
        "| turn | channels with new versions | puts | own CPU | put CPU |",
        "|---|---|---|---|---|",
    ]
    for w in windows:
        by_kind: dict[tuple[str, ...], list[PutSample]] = defaultdict(list)
        for s in w.samples:
            by_kind[s.new_channels].append(s)
        for channels, samples in sorted(by_kind.items(), key=lambda item: item[1][0].step):
            lines.append(
                f"| {w.last} | {', '.join(channels)} | {len(samples)} | "
                f"{_ms(statistics.fmean(s.own for s in samples))} | "
                f"{_ms(statistics.fmean(s.total for s in samples))} |"
            )
    for w in windows:
        stats = pstats.Stats(w.profile)
        puts = w.profiled_puts
        shares: dict[str, float] = defaultdict(float)
        for func, (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
            shares[_package(func[0], func[2])] += tottime
        whole = sum(shares.values())
        lines += [
            "",
            f"Turn {w.last}: profile of the put operation's own steps over the {w.width} turns "
            f"before the timed ones ({puts} puts): time by package (tottime, ms per put):",
            "",
        ]
        lines += [
            f"- {package}: {_ms(t / puts)} ({t / whole:.0%})"
            for package, t in sorted(shares.items(), key=lambda item: -item[1])
        ]
        lines += ["", f"Turn {w.last}: top {top} functions by cumulative time (ms per put):", ""]
        lines += ["| cumulative | own | calls per put | function |", "|---|---|---|---|"]
        entries = sorted(
            (item for item in stats.stats.items() if not _harness(item[0])),
            key=lambda item: -item[1][3],
        )
        for func, (_cc, ncalls, tottime, cumtime, _callers) in entries[:top]:
            lines.append(
                f"| {_ms(cumtime / puts)} | {_ms(tottime / puts)} | {ncalls / puts:.1f} | "
                f"`{_where(func)}` |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[50, 400])
    parser.add_argument(
        "--window", type=int, default=5, help="turns timed up to each (as many profiled before)"
    )
    parser.add_argument("--top", type=int, default=25, help="functions listed per profile")
    deltas = parser.add_mutually_exclusive_group()
    deltas.add_argument("--list-deltas", dest="saver", action="store_const", const=MONGO_CKPT)
    deltas.add_argument("--whole", dest="saver", action="store_const", const=MONGO_CKPT_WHOLE)
    parser.set_defaults(saver=MONGO_CKPT)
    args = parser.parse_args(argv)
    windows = converse(args.saver, sorted(args.turns), args.window)
    print(report(windows, args.top, args.saver))


if __name__ == "__main__":
    main()
