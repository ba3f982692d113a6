"""List deltas: list channel values stored as differences from an earlier version.

A delta-stored version of a channel is a ``checkpoint_blobs`` value whose head also
carries ``base`` (an earlier version of the same thread, namespace and channel) and
``keep`` (how many leading elements of the base value it shares); its payload is the
serialized new tail. The value is ``base_value[:keep] + tail``.

Bases are chosen like a Fenwick tree: the k-th version this saver instance writes in
a row for a channel (k = 0 is a whole value) is based on version ``k & (k - 1)``, so
reading version k touches ``popcount(k) + 1`` documents (at most ``log2(k) + 2``)
and every element is stored O(log n) times.

Deltas are written only while the database records layout version 4 (``enabled``:
wanted by the saver and allowed by the recorded version), so a process of a release
before them never reads a tail as the whole list (``schema``, ``saver.upgrade``).

Invariants that keep a base alive:

- A checkpoint's ``values`` names every version its value is rebuilt from: the
  chain's bases as ``{"channel", "version", "base": True}`` entries, then the value
  itself. A read fetches them with the same blobs query, and maintenance, which
  keeps every version a surviving checkpoint names, keeps the bases too.
- A delta is written only when the ``put``'s parent is the checkpoint this instance
  last wrote on the thread and namespace, and its base is a version this instance
  wrote there (so the parent names it and it is stored). Anything else writes a
  whole value.
- A base that is missing anyway (deleted under a running graph) makes the read raise
  ``MissingValueError``, never return a shortened list.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt.payload import digest

# Threads (and namespaces) whose latest written chain one saver instance remembers.
CACHED_THREADS = 256
# Checkpoints whose ``values`` (with bases) one saver instance remembers.
CACHED_CHECKPOINTS = 4096
# While the database does not allow deltas, how often a saver reads its layout version
# again, so an upgrade by another process takes effect without a restart.
LAYOUT_RECHECK_SECONDS = 60.0


def fenwick_base(k: int) -> int:
    """The counter of the version the k-th delta in a row is based on (k > 0)."""
    return k & (k - 1)


def fenwick_chain(k: int) -> list[int]:
    """Counters a version with counter ``k`` is rebuilt from, base first, ``k`` last."""
    chain = [k]
    while k:
        k = fenwick_base(k)
        chain.append(k)
    return chain[::-1]


def is_list(value: Any) -> bool:
    """Whether ``value`` may be stored as a list delta: exactly a ``list`` (a tuple or a
    subclass is stored whole, so it reads back as the serializer returns it)."""
    return type(value) is list


def fingerprints(serde: SerializerProtocol, items: Sequence[Any]) -> tuple[str, ...]:
    """Digests of each element's serialized bytes.

    With ``EncryptedSerializer`` the stored bytes are randomized, so elements are
    fingerprinted with the plain serializer underneath; fingerprints stay in memory.
    """
    plain = serde.serde if isinstance(serde, EncryptedSerializer) else serde
    return tuple(digest(*plain.dumps_typed(item)) for item in items)


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Link:
    """One stored version of a channel's chain: its counter, version and element digests."""

    k: int
    version: Any
    digests: tuple[str, ...]


@dataclass(frozen=True)
class Delta:
    """A version stored as ``base_value[:keep] + tail``."""

    base: Any
    keep: int
    tail: list[Any]

    def head_fields(self) -> dict[str, Any]:
        return {"base": self.base, "keep": self.keep}


@dataclass
class Plan:
    """How one ``put`` stores its list values and names their chains."""

    deltas: dict[str, Delta] = field(default_factory=dict)
    # Per channel in the checkpoint, the versions its value is rebuilt from, value last.
    chains: dict[str, list[Any]] = field(default_factory=dict)
    # The chain state after this put, per channel written with a list value.
    links: dict[str, list[Link]] = field(default_factory=dict)


def chains_of(values: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Per channel, the versions a checkpoint's ``values`` entries name, value last."""
    chains: dict[str, list[Any]] = {}
    for entry in values:
        chains.setdefault(entry["channel"], []).append(entry["version"])
    return chains


def values_entries(chains: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The ``values`` field of a checkpoint document: per channel its bases, then itself."""
    entries = []
    for channel, chain in chains.items():
        entries += [{"channel": channel, "version": v, "base": True} for v in chain[:-1]]
        entries.append({"channel": channel, "version": chain[-1]})
    return entries


class _Lru(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True)
class _Head:
    checkpoint_id: str
    links: dict[str, list[Link]]


class ListDeltas:
    """Per saver instance: the chains it wrote last and the checkpoints it has seen.

    Safe under concurrent use: every access holds a lock and never yields inside it.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.wanted = enabled
        # Whether the database records that every writer reads deltas; unknown (no) until
        # setup has read its layout version.
        self.allowed = False
        self._next_check = 0.0
        self._lock = threading.Lock()
        self._heads = _Lru(CACHED_THREADS)
        self._seen = _Lru(CACHED_CHECKPOINTS)

    @property
    def enabled(self) -> bool:
        """Whether new list values are written as deltas: wanted by the saver and allowed
        by the database's recorded layout version."""
        return self.wanted and self.allowed

    def note_layout(self, allowed: bool) -> None:
        """The layout version was read: whether it allows deltas."""
        self.allowed = allowed
        self._next_check = monotonic() + LAYOUT_RECHECK_SECONDS

    def recheck_due(self) -> bool:
        """Whether to read the layout version again: deltas are wanted, not yet allowed,
        and it was last read ``LAYOUT_RECHECK_SECONDS`` ago."""
        return self.wanted and not self.allowed and monotonic() >= self._next_check

    def known_chains(self, key: tuple[str, str, str]) -> dict[str, list[Any]] | None:
        """The chains the checkpoint ``key`` names, if this instance has seen it."""
        with self._lock:
            return self._seen.get(key)

    def remember(self, doc: Mapping[str, Any]) -> None:
        """Record the chains a read (or written) checkpoint document names."""
        key = (doc["thread_id"], doc["checkpoint_ns"], doc["checkpoint_id"])
        chains = chains_of(doc.get("values", ()))
        with self._lock:
            self._seen.put(key, chains)

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what this instance remembers of ``thread_ids`` (after deleting them)."""
        gone = set(thread_ids)
        with self._lock:
            for cache in (self._heads, self._seen):
                for key in [k for k in cache if k[0] in gone]:
                    del cache[key]

    def plan(
        self,
        key: tuple[str, str, str],
        parent_id: str | None,
        values: Mapping[str, Any],
        versions: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        serde: SerializerProtocol,
        parent_chains: Mapping[str, Sequence[Any]] | None,
    ) -> Plan:
        """Decide, for the checkpoint ``key``, which new list values are stored as deltas.

        ``parent_chains`` are the chains the parent names (``None`` if unknown); an
        unchanged channel keeps its parent's chain.
        """
        thread_id, checkpoint_ns, _ = key
        with self._lock:
            head = self._heads.get((thread_id, checkpoint_ns))
        usable = head.links if head is not None and head.checkpoint_id == parent_id else {}
        plan = Plan()
        for channel, value in values.items():
            if channel not in versions:
                continue
            version = versions[channel]
            if channel not in new_versions:
                chain = (parent_chains or {}).get(channel)
                plan.chains[channel] = list(chain) if chain and chain[-1] == version else [version]
                if channel in usable and usable[channel][-1].version == version:
                    plan.links[channel] = usable[channel]
                continue
            if not (self.enabled and is_list(value)):
                plan.chains[channel] = [version]
                continue
            digests = fingerprints(serde, value)
            links = usable.get(channel)
            if links:
                k = links[-1].k + 1
                wanted = fenwick_chain(k)
                kept = [link for link in links if link.k in wanted]
                keep = common_prefix(kept[-1].digests, digests)
                if keep:
                    tail = list(value[keep:])
                    plan.deltas[channel] = Delta(kept[-1].version, keep, tail)
                    plan.links[channel] = [*kept, Link(k, version, digests)]
                    plan.chains[channel] = [link.version for link in plan.links[channel]]
                    continue
            plan.links[channel] = [Link(0, version, digests)]
            plan.chains[channel] = [version]
        return plan

    @staticmethod
    def needs_parent(values: Mapping[str, Any], new_versions: Mapping[str, Any]) -> bool:
        """Whether an unchanged channel may be a delta whose chain only the parent names."""
        return any(is_list(v) for ch, v in values.items() if ch not in new_versions)

    def wrote(self, key: tuple[str, str, str], plan: Plan) -> None:
        """Record a stored checkpoint: the next ``put`` on it may write deltas."""
        thread_id, checkpoint_ns, checkpoint_id = key
        with self._lock:
            self._heads.put((thread_id, checkpoint_ns), _Head(checkpoint_id, plan.links))
            self._seen.put(key, plan.chains)


def rebuild(
    heads: Mapping[tuple[Any, ...], tuple[Mapping[str, Any], tuple[str, bytes]]],
    key: tuple[Any, ...],
    loads: Callable[[tuple[str, bytes]], Any],
    missing: Callable[[Any], Exception],
) -> Any:
    """The value stored at ``key`` (thread, namespace, channel, version), following bases.

    ``heads`` maps keys to ``(head document, (type, bytes))`` as ``payload.join``
    returns them; ``missing(version)`` builds the error for a missing document.
    """
    path = []
    while True:
        if key not in heads:
            raise missing(key[3])
        head, typed = heads[key]
        path.append((head, typed))
        if "base" not in head:
            break
        key = (*key[:3], head["base"])
        if len(path) > 64:  # a cycle: never written by this library
            raise missing(key[3])
    value = loads(path[-1][1])
    for head, typed in reversed(path[:-1]):
        keep = head["keep"]
        if not isinstance(value, (list, tuple)) or len(value) < keep:
            raise missing(head["base"])
        value = [*value[:keep], *loads(typed)]
    return value
