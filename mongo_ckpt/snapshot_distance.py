"""How far back a checkpoint's DeltaChannel seeds are, from LangGraph's own counters.

LangGraph writes ``counters_since_delta_snapshot`` into every checkpoint's metadata: per
DeltaChannel, ``(updates, supersteps)`` since the channel's last snapshot. Each superstep
stores at most one checkpoint, so a channel ``s`` supersteps past its snapshot has its
seed at most ``s`` checkpoints above the target (fewer under ``durability="exit"``).
That bounds the history pipeline's ``$graphLookup``, whose depth 0 is the target's parent.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

# LangGraph snapshots every delta channel at least this often (same variable and default),
# so no walk goes deeper; it is also the walk's depth when the distance is not known.
MAX_DEPTH = int(os.getenv("LANGGRAPH_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT", "5000")) + 1
COUNTERS_KEY = "counters_since_delta_snapshot"


def supersteps_since_snapshot(metadata: Mapping[str, Any]) -> dict[str, int]:
    """Per DeltaChannel, supersteps since its last snapshot, read from checkpoint metadata.

    Entries that are not LangGraph's ``(updates, supersteps)`` pair of non-negative ints
    (stored as a list after a serializer round trip) are left out, as if unknown.
    """
    counters = metadata.get(COUNTERS_KEY)
    if not isinstance(counters, Mapping):
        return {}
    steps = {}
    for channel, pair in counters.items():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            count = pair[1]
            if type(count) is int and count >= 0:
                steps[channel] = count
    return steps


def walk_depth(steps: Mapping[str, int], channels: Sequence[str]) -> int:
    """The ``$graphLookup`` ``maxDepth`` that reaches the farthest seed of ``channels``.

    A seed ``s`` checkpoints above the target is at depth ``s - 1``. Any channel
    without a count (no counters, or not a DeltaChannel when the checkpoint was
    written) makes it ``MAX_DEPTH``.
    """
    if not channels or any(ch not in steps for ch in channels):
        return MAX_DEPTH
    return min(MAX_DEPTH, max(0, max(steps[ch] for ch in channels) - 1))


class SnapshotDistances:
    """``supersteps_since_snapshot`` of the checkpoints a saver read last, by checkpoint key.

    LangGraph reads a checkpoint (``get_tuple``, ``list``) right before it asks for
    that checkpoint's DeltaChannel history, so the history walk finds the counters
    here and needs no extra round trip. The oldest entries go past ``size``.
    Thread-safe: LangGraph calls a sync saver from background threads too.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._steps: dict[Hashable, dict[str, int]] = {}
        self._lock = threading.Lock()

    def note(self, key: Hashable, metadata: Mapping[str, Any]) -> None:
        """Remember the counters of the checkpoint ``key`` (forget them if it has none)."""
        steps = supersteps_since_snapshot(metadata)
        with self._lock:
            self._steps.pop(key, None)
            if steps:
                self._steps[key] = steps
                if len(self._steps) > self.size:
                    del self._steps[next(iter(self._steps))]

    def walk_depth(self, key: Hashable, channels: Sequence[str]) -> int:
        """``walk_depth`` for the checkpoint ``key``; ``MAX_DEPTH`` if it was not noted."""
        with self._lock:
            steps = self._steps.get(key, {})
        return walk_depth(steps, channels)
