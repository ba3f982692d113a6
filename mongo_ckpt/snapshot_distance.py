"""How far back a checkpoint's DeltaChannel seeds are, from LangGraph's own counters.

LangGraph writes ``counters_since_delta_snapshot`` into every checkpoint's metadata: per
DeltaChannel, ``(updates, supersteps)`` since the channel's last snapshot. Each superstep
stores at most one checkpoint, so a channel ``s`` supersteps past its snapshot has its
seed at most ``s`` checkpoints above the target (fewer under ``durability="exit"``).
That bounds the history pipeline's ``$graphLookup``, whose depth 0 is the target's parent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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
