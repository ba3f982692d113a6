"""What one saver instance remembers, so that reads and writes after it save round trips.

- Per checkpoint it read or wrote (``CACHED_CHECKPOINTS`` of them): the chains its
  ``values`` names, which a ``put`` on it keeps for its unchanged list channels, the
  DeltaChannels it replays, and LangGraph's snapshot counters, which bound the
  DeltaChannel history read that follows a read (``snapshot_distance``).
- Per thread and namespace, the checkpoint it wrote last and the chains it wrote there in
  a row, with the element digests of their latest values; and per checkpoint it read
  with ``get_tuple``, the chains that read found, with their stored bytes (digested only
  when a ``put`` on it changes the channel: ``listdelta.ReadChain``). What the next delta
  is formed from (``listdelta.plan``). These take at most ``cache_bytes`` together
  (``DIGEST_SIZE`` bytes per element of each channel's latest value, or the stored bytes
  of a chain read, ``LINK_BYTES`` per link, ``THREAD_BYTES`` per entry); an evicted
  entry's next version is written whole.
- Per thread and namespace (``CACHED_CHECKPOINTS`` of them), the DeltaChannel seeds the
  history read at its newest target found: their ids bound the next read's range
  (``delta.range_history_pipeline``) from below.
- Per checkpoint (``PREFETCHED_BYTES`` of their stored parts, ``PREFETCH_SECONDS`` at
  most), the DeltaChannel history its ``get_tuple`` read along (``whole`` of
  ``delta.range_history_pipeline``), taken by the history call that follows; and per
  thread and namespace (``CACHED_CHECKPOINTS`` of them) the newest checkpoint a read of the
  latest found, so an instance that only reads (one polling ``get_state``) expects it
  next time as a writer expects the one it wrote.

One lock guards it all (LangGraph calls a sync saver from several threads, an async one
from several tasks; nothing yields while holding it), one eviction (least recently used
first, past a budget) bounds every map, and one ``forget`` drops a thread from all of
them when it is deleted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from time import monotonic
from typing import Any, Generic, TypeVar

from mongo_ckpt.delta import RangeRead
from mongo_ckpt.listdelta import Chain, Plan, ReadChain, chains_of
from mongo_ckpt.snapshot_distance import supersteps_since_snapshot, walk_depth

# Bytes of element digests and of chains read (and per-link bookkeeping) one saver
# instance keeps for the chains it wrote last and read, least recently used evicted first.
CACHE_BYTES = 32 * 2**20
# Accounted per remembered thread or read checkpoint (its key and containers): Python's
# own sizes, rounded up.
THREAD_BYTES = 1024
# Checkpoints whose ``values`` (with bases) and snapshot counters one instance remembers.
CACHED_CHECKPOINTS = 4096
# DeltaChannel histories read by ``get_tuple``, held for the ``get_delta_channel_history``
# LangGraph makes right after it (taken once): their stored bytes, and for how long.
PREFETCHED_BYTES = 16 * 2**20
PREFETCH_SECONDS = 10.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
CheckpointKey = tuple[str, str, str]


class _Lru(Generic[K, V]):
    """Entries least recently used first, the oldest evicted once their ``cost`` passes
    ``budget``; an entry costing more than the budget alone is not kept."""

    def __init__(self, budget: int, cost: Callable[[V], int]) -> None:
        self.budget, self._cost = budget, cost
        self.spent = 0
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self.drop([key])
        cost = self._cost(value)
        if cost > self.budget:
            return
        self._items[key] = value
        self.spent += cost
        while self.spent > self.budget:
            _, evicted = self._items.popitem(last=False)
            self.spent -= self._cost(evicted)

    def drop(self, keys: Iterable[K]) -> None:
        for key in keys:
            value = self._items.pop(key, None)
            if value is not None:
                self.spent -= self._cost(value)

    def held(self) -> list[K]:
        return list(self._items)


@dataclass(frozen=True, slots=True)
class _Head:
    """The checkpoint an instance wrote last on a thread and namespace (or one it read),
    and its chains."""

    checkpoint_id: str
    links: dict[str, Chain | ReadChain]

    @property
    def nbytes(self) -> int:
        return THREAD_BYTES + sum(chain.nbytes for chain in self.links.values())


@dataclass(frozen=True, slots=True)
class _Seen:
    """A checkpoint read or written: the chains it names, its snapshot counters, the
    DeltaChannels it replays (its ``replay``) and its document's ``_id``, if known."""

    chains: dict[str, list[Any]] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    replay: tuple[str, ...] = ()
    stored_id: Any = None


@dataclass(frozen=True, slots=True)
class _Prefetched:
    """A history range read made by ``get_tuple`` for ``channels``, kept until ``deadline``."""

    channels: frozenset[str]
    read: RangeRead
    deadline: float

    @property
    def nbytes(self) -> int:
        """The stored bytes of the parts it holds, and ``THREAD_BYTES`` for the rest."""
        parts = (d.get(p) for d in self.read.docs or () for p in ("w", "b"))
        return THREAD_BYTES + sum(len(part.get("data") or b"") for part in parts if part)


@dataclass(frozen=True, slots=True)
class _Seeds:
    """The seed checkpoint ids, per channel, of the DeltaChannel history at a target."""

    target_id: str
    ids: dict[str, str]


class CheckpointMemory:
    """Per saver instance: the checkpoints it has seen, the chains it wrote last and
    read, and whether it writes list deltas (see the module's docstring)."""

    def __init__(
        self,
        list_deltas: bool = True,
        cache_bytes: int = CACHE_BYTES,
        checkpoints: int = CACHED_CHECKPOINTS,
    ) -> None:
        self.deltas_wanted = list_deltas
        self._lock = threading.Lock()
        # Keyed (thread, namespace) for the checkpoint written last, (thread, namespace,
        # checkpoint) for one read.
        self._heads: _Lru[tuple[str, ...], _Head] = _Lru(cache_bytes, lambda h: h.nbytes)
        self._seen: _Lru[CheckpointKey, _Seen] = _Lru(checkpoints, lambda _: 1)
        self._seeds: _Lru[tuple[str, str], _Seeds] = _Lru(checkpoints, lambda _: 1)
        self._prefetched: _Lru[CheckpointKey, _Prefetched] = _Lru(
            PREFETCHED_BYTES, lambda p: p.nbytes
        )
        self._latest: _Lru[tuple[str, str], str] = _Lru(checkpoints, lambda _: 1)
        self._own_ttls: _Lru[str, float | str] = _Lru(checkpoints, lambda _: 1)
        self._reads: _Lru[str, float] = _Lru(checkpoints, lambda _: 1)

    # -- checkpoints ----------------------------------------------------------------

    def read(
        self,
        doc: Mapping[str, Any],
        metadata: Mapping[str, Any],
        found: Mapping[str, ReadChain] | None = None,
    ) -> None:
        """A checkpoint document was read, with its ``metadata``: remember the chains it
        names and its snapshot counters (none when it has no usable counters), and the
        chains ``found`` (``listdelta.read_chains``) for a ``put`` on it, unless it is the
        checkpoint this instance wrote last (whose digests it holds already)."""
        key = _key(doc)
        seen = _Seen(
            chains_of(doc.get("values", ())),
            supersteps_since_snapshot(metadata),
            tuple(doc.get("replay") or ()),
            doc.get("_id"),
        )
        with self._lock:
            self._seen.put(key, seen)
            if not found or not self.deltas_wanted:
                return
            head = self._heads.get(key[:2])
            if head is None or head.checkpoint_id != key[2]:
                self._heads.put(key, _Head(key[2], dict(found)))

    def remember(self, doc: Mapping[str, Any]) -> None:
        """The chains a checkpoint document names (read for them alone: its counters, if
        known, are kept)."""
        key = _key(doc)
        chains = chains_of(doc.get("values", ()))
        with self._lock:
            known = self._seen.get(key) or _Seen()
            stored_id = doc.get("_id", known.stored_id)
            self._seen.put(key, _Seen(chains, known.steps, known.replay, stored_id))

    def stored_id(self, key: CheckpointKey) -> Any:
        """The ``_id`` of the checkpoint ``key``'s document, if this instance has seen it."""
        with self._lock:
            seen = self._seen.get(key)
        return None if seen is None else seen.stored_id

    def known_chains(self, key: CheckpointKey) -> dict[str, list[Any]] | None:
        """The chains the checkpoint ``key`` names, if this instance has seen it."""
        with self._lock:
            seen = self._seen.get(key)
        return None if seen is None else seen.chains

    def walk_depth(self, key: CheckpointKey, channels: Sequence[str]) -> int:
        """``snapshot_distance.walk_depth`` for the checkpoint ``key`` (``MAX_DEPTH``
        unless its counters were read)."""
        with self._lock:
            seen = self._seen.get(key)
        return walk_depth(seen.steps if seen else {}, channels)

    def found_seeds(self, key: CheckpointKey, ids: Mapping[str, str]) -> None:
        """A history read at ``key`` found the seeds ``ids`` (channel -> checkpoint id):
        kept unless a read at a newer target of the thread is (ids sort by time)."""
        thread, target_id = key[:2], key[2]
        with self._lock:
            known = self._seeds.get(thread)
            if known is not None and known.target_id > target_id:
                return
            merged = known.ids if known is not None and known.target_id == target_id else {}
            self._seeds.put(thread, _Seeds(target_id, {**merged, **ids}))

    def seed_floor(self, key: CheckpointKey, channels: Sequence[str]) -> str | None:
        """A lower bound of the seed ids of ``channels`` at ``key``: the oldest seed found at
        a target ``key`` may descend from (one not newer). On the same branch it holds
        (a descendant's seed is that seed or newer); from another branch it may be too
        high, which the read detects. ``None`` unless every channel's seed is known."""
        with self._lock:
            known = self._seeds.get(key[:2])
        if not channels or known is None or known.target_id > key[2]:
            return None
        if any(c not in known.ids for c in channels):
            return None
        return min(known.ids[c] for c in channels)

    # -- the chains a delta is formed from ------------------------------------------

    def usable(self, key: CheckpointKey, parent_id: str | None) -> dict[str, Chain | ReadChain]:
        """The chains a ``put`` of ``key`` on ``parent_id`` may base deltas on: those this
        instance wrote in a row on the thread, if the parent is the checkpoint it wrote
        last there, else those its ``get_tuple`` of the parent found."""
        if parent_id is None:
            return {}
        with self._lock:
            head = self._heads.get(key[:2])
            if head is None or head.checkpoint_id != parent_id:
                head = self._heads.get((*key[:2], parent_id))
        return head.links if head is not None else {}

    def wrote(
        self,
        key: CheckpointKey,
        plan: Plan,
        parent_id: str | None = None,
        doc: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        stored_id: Any = None,
    ) -> None:
        """A checkpoint was stored on ``parent_id`` as ``plan`` says: the next ``put`` on it
        may write deltas, and it names ``plan.chains``; its document ``doc`` and
        ``metadata`` say what it replays and how far its seeds are, and ``stored_id`` is
        its ``_id`` if this call inserted it (else the one known stays: the same put
        again). What a read of the parent found is dropped: the new checkpoint carries it
        on."""
        thread_id, checkpoint_ns, checkpoint_id = key
        steps = supersteps_since_snapshot(metadata or {})
        replay = tuple((doc or {}).get("replay") or ())
        with self._lock:
            self._heads.put((thread_id, checkpoint_ns), _Head(checkpoint_id, plan.links))
            if parent_id is not None:
                self._heads.drop([(thread_id, checkpoint_ns, parent_id)])
            if stored_id is None and (known := self._seen.get(key)) is not None:
                stored_id = known.stored_id
            self._seen.put(key, _Seen(plan.chains, steps, replay, stored_id))

    # -- the DeltaChannel history read with ``get_tuple`` ---------------------------

    def replayed(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> tuple[CheckpointKey, tuple[str, ...]] | None:
        """The checkpoint a ``get_tuple`` of ``checkpoint_id`` (or of the latest one: the
        newer of the one this instance wrote last there and the latest it found there) is
        expected to find, and the DeltaChannels it replays; ``None`` unless this instance
        has seen it and it replays some."""
        if checkpoint_id is None:
            checkpoint_id = self.newest_known(thread_id, checkpoint_ns)
            if checkpoint_id is None:
                return None
        key = (thread_id, checkpoint_ns, checkpoint_id)
        with self._lock:
            seen = self._seen.get(key)
        if seen is None or not seen.replay:
            return None
        return key, seen.replay

    def newest_known(self, thread_id: str, checkpoint_ns: str) -> str | None:
        """The newest checkpoint id this instance knows stored on the thread and namespace:
        the newer of the one it wrote last there and the latest it found there."""
        with self._lock:
            head = self._heads.get((thread_id, checkpoint_ns))
            found = self._latest.get((thread_id, checkpoint_ns))
        wrote = head.checkpoint_id if head is not None else None
        return max((i for i in (wrote, found) if i is not None), default=None)

    def found_latest(
        self,
        thread: tuple[str, str],
        checkpoint_id: str | None,
        whole: bool,
        since: str | None,
    ) -> None:
        """A ``get_tuple`` of the latest checkpoint of ``thread`` (thread, namespace) found
        ``checkpoint_id`` (``None``: none). Kept unless a newer one is known (ids sort by
        time); after a read of the whole thread (``whole``), kept as the newest even when an
        older one, and the checkpoint written last is forgotten if newer: it is gone, unless
        it is newer than ``since`` (the ``newest_known`` when the read began): then a put
        of this instance wrote it while the read ran."""
        with self._lock:
            known = self._latest.get(thread)
            if whole:
                head = self._heads.get(thread)
                written = head.checkpoint_id if head is not None else None
                if written is not None and (checkpoint_id or "") < written <= (since or ""):
                    self._heads.drop([thread])
                self._latest.drop([thread])
                known = None
            if checkpoint_id is not None and (known is None or known < checkpoint_id):
                self._latest.put(thread, checkpoint_id)

    def prefetched(self, key: CheckpointKey, channels: Sequence[str], read: RangeRead) -> None:
        """A ``get_tuple`` of ``key`` read the history of ``channels`` there: kept for the
        ``get_delta_channel_history`` LangGraph makes right after, at most
        ``PREFETCH_SECONDS``."""
        entry = _Prefetched(frozenset(channels), read, monotonic() + PREFETCH_SECONDS)
        with self._lock:
            self._prefetched.put(key, entry)

    def take_prefetched(self, key: CheckpointKey, channels: Sequence[str]) -> RangeRead | None:
        """The history read ``prefetched`` at ``key`` if it was of ``channels`` exactly and
        is not older than ``PREFETCH_SECONDS``; taken once."""
        with self._lock:
            entry = self._prefetched.get(key)
            self._prefetched.drop([key])
        if entry is None or monotonic() > entry.deadline or entry.channels != set(channels):
            return None
        return entry.read

    @property
    def cached_bytes(self) -> int:
        """The accounted bytes of the chains written and read held now (at most
        ``cache_bytes``)."""
        with self._lock:
            return self._heads.spent

    def own_ttl(self, thread_id: str) -> float | str | None:
        """The thread's own ttl this instance stored last (``thread_settings``), if any."""
        with self._lock:
            return self._own_ttls.get(thread_id)

    def own_ttl_stored(self, thread_id: str, ttl: float | str) -> None:
        with self._lock:
            self._own_ttls.put(thread_id, ttl)

    def read_due(self, thread_id: str, interval: float) -> bool:
        """Whether this instance recorded no read of the thread in the last ``interval``
        seconds (``refresh_on_read``)."""
        with self._lock:
            last = self._reads.get(thread_id)
            return last is None or monotonic() - last >= interval

    def read_recorded(self, thread_id: str) -> None:
        with self._lock:
            self._reads.put(thread_id, monotonic())

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what this instance remembers of ``thread_ids`` (they are being deleted)."""
        gone = set(thread_ids)
        with self._lock:
            self._heads.drop([k for k in self._heads.held() if k[0] in gone])
            self._seen.drop([k for k in self._seen.held() if k[0] in gone])
            self._seeds.drop([k for k in self._seeds.held() if k[0] in gone])
            self._prefetched.drop([k for k in self._prefetched.held() if k[0] in gone])
            self._latest.drop([k for k in self._latest.held() if k[0] in gone])
            self._own_ttls.drop([k for k in self._own_ttls.held() if k in gone])
            self._reads.drop([k for k in self._reads.held() if k in gone])


def _key(doc: Mapping[str, Any]) -> CheckpointKey:
    return (doc["thread_id"], doc["checkpoint_ns"], doc["checkpoint_id"])
