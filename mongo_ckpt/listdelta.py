"""List deltas: list channel values stored as differences from an earlier version.

A delta-stored version of a channel is a ``checkpoint_blobs`` value whose head also
carries ``base`` (an earlier version of the same thread, namespace and channel) and
``keep`` (how many leading elements of the base value it shares); its payload is the
serialized new tail. The value is ``base_value[:keep] + tail``.

Bases are chosen like a Fenwick tree: the k-th version of a chain (k = 0 is a whole
value) is based on version ``k & (k - 1)``, so reading version k touches
``popcount(k) + 1`` documents (at most ``log2(k) + 2``) and every element is stored
O(log n) times. A delta's head records its ``k``, so an instance that read the chain
continues it where the writer left off.

Deltas are written unless the saver was made with ``list_deltas=False`` (``enabled``).

Invariants that keep a base alive:

- A checkpoint's ``values`` names every version its value is rebuilt from: the
  chain's bases as ``{"channel", "version", "base": True}`` entries, then the value
  itself. A read fetches them with the same blobs query, and maintenance, which
  keeps every version a surviving checkpoint names, keeps the bases too.
- A delta is written only when its base is a version the ``put``'s parent names: the
  parent is the checkpoint this instance last wrote on the thread and namespace (the
  base a version it wrote there), or one it read with ``get_tuple`` (the base a version
  of the chain that read found, ``read_chains``). Anything else writes a whole value.
- The stored value is the truth. A version is written once (first write wins), so a
  ``put`` that finds a version already stored (a retry) names that value's stored chain,
  and records no digests of it; a different value under that version is refused.
- A base that is missing anyway (deleted under a running graph) makes the read raise
  ``MissingValueError``, never return a shortened list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from mongo_ckpt import places
from mongo_ckpt.keyring import is_bound

DIGEST_SIZE = 8  # bytes of one element's digest
# Accounted per link of a remembered chain (a counter, a version, a prefix length):
# Python's own object sizes, rounded up (``memory`` bounds the chains by these bytes).
LINK_BYTES = 160


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


def plain_serde(serde: SerializerProtocol) -> SerializerProtocol:
    """The serializer whose bytes identify a value: the plain one under ``EncryptedSerializer``
    (its stored bytes are randomized)."""
    return serde.serde if isinstance(serde, EncryptedSerializer) else serde


def element_digest(type_: str, data: bytes) -> bytes:
    """A compact digest of one serialized element (``DIGEST_SIZE`` bytes)."""
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    h.update(type_.encode())
    h.update(b"\0")
    h.update(data)
    return h.digest()


def fingerprints(serde: SerializerProtocol, items: Sequence[Any]) -> bytes:
    """The digests of each element's serialized bytes, concatenated.

    Elements of an encrypted saver are fingerprinted with the plain serializer
    underneath; fingerprints stay in memory.
    """
    plain = plain_serde(serde)
    return b"".join(element_digest(*plain.dumps_typed(item)) for item in items)


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading elements two ``fingerprints`` buffers share."""
    lo, hi = 0, min(len(a), len(b)) // DIGEST_SIZE
    if a[: hi * DIGEST_SIZE] == b[: hi * DIGEST_SIZE]:
        return hi
    hi -= 1  # the longest shared prefix is shorter than ``hi``; find it by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * DIGEST_SIZE] == b[: mid * DIGEST_SIZE]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def same_value(serde: SerializerProtocol, given: Any, stored: Any) -> bool:
    """Whether ``given`` is the value ``stored`` reads back as: both normalized through the
    plain serializer (a tuple reads back as a list), then equal (``==``: a dict in another
    key order is the same value), or, where equality says no or is not defined (objects
    without ``__eq__``, arrays), of the same bytes."""
    plain = plain_serde(serde)

    def normal(value: Any) -> Any:
        value = plain.loads_typed(plain.dumps_typed(value))
        return list(value) if isinstance(value, tuple) else value

    a, b = normal(given), normal(stored)
    try:
        if (a == b) is True:
            return True
    except Exception:  # an __eq__ that raises: judged by the bytes
        pass
    return plain.dumps_typed(a) == plain.dumps_typed(b)


@dataclass(frozen=True, slots=True)
class Link:
    """One stored version of a channel's chain: its counter, its version, and how many
    leading elements its value is known to share with the chain's latest value (a lower
    bound: a shorter ``keep`` is always correct)."""

    k: int
    version: Any
    shared: int


@dataclass(frozen=True, slots=True)
class Chain:
    """The versions of a channel's chain up to the latest (written by this instance, or
    read and resolved): the element digests of the latest value (``fingerprints``) and
    the links a next delta may be based on."""

    latest: bytes
    links: tuple[Link, ...]

    @property
    def nbytes(self) -> int:
        return len(self.latest) + LINK_BYTES * len(self.links)


@dataclass(frozen=True, slots=True)
class ReadChain:
    """A channel's chain as a ``get_tuple`` found it: its links (the latest one's ``shared``
    is 0 until resolved) and, base first, each document's ``keep`` and stored bytes. The
    digests are computed only when a ``put`` changes the channel (``resolve``), so a read
    costs no serialization; until then the chain costs its stored bytes."""

    links: tuple[Link, ...]
    # (keep, typed, its place if bound to it: ``places``)
    stored: tuple[tuple[int, tuple[str, bytes], bytes | None], ...]

    @property
    def nbytes(self) -> int:
        stored = sum(len(typed[1]) + len(place or b"") for _, typed, place in self.stored)
        return stored + LINK_BYTES * len(self.links)

    def resolve(self, serde: SerializerProtocol) -> Chain | None:
        """The chain with the digests of the value it was read as (``None`` if that is no
        ``list``): the stored bytes decoded again, so nothing a caller did to the value
        it was handed counts."""
        def load(typed: tuple[str, bytes], place: bytes | None) -> Any:
            with places.exactly(place):
                return serde.loads_typed(typed)

        (_, first, at), *rest = self.stored
        value: Any = load(first, at)
        for keep, typed, place in rest:
            value = extended(value, keep, load(typed, place))
        if not is_list(value):
            return None
        last = self.links[-1]
        links = (*self.links[:-1], Link(last.k, last.version, len(value)))
        return Chain(fingerprints(serde, value), links)


@dataclass(frozen=True)
class Delta:
    """A version stored as ``base_value[:keep] + tail``, the ``k``-th of its chain."""

    base: Any
    keep: int
    tail: list[Any]
    k: int

    def head_fields(self) -> dict[str, Any]:
        return {"base": self.base, "keep": self.keep, "k": self.k}


@dataclass
class Plan:
    """How one ``put`` stores its list values and names their chains."""

    deltas: dict[str, Delta] = field(default_factory=dict)
    # Per channel in the checkpoint, the versions its value is rebuilt from, value last.
    chains: dict[str, list[Any]] = field(default_factory=dict)
    # The chain state after this put, per channel written with a list value.
    links: dict[str, Chain | ReadChain] = field(default_factory=dict)

    def adopt(self, channel: str, chain: Sequence[Any]) -> None:
        """The value of ``channel`` was stored already (by an earlier attempt): name its
        stored chain, and keep no digests of it (the next version is written whole)."""
        self.chains[channel] = list(chain)
        self.deltas.pop(channel, None)
        self.links.pop(channel, None)


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


def stored_chain(
    heads: Mapping[tuple[Any, ...], tuple[Mapping[str, Any], Any]], key: tuple[Any, ...]
) -> list[Any] | None:
    """The versions the stored value at ``key`` is rebuilt from, base first, as its heads
    (``payload.join`` output) say; ``None`` if a document of the chain is missing."""
    chain: list[Any] = []
    while key in heads and len(chain) <= len(heads):  # longer: a cycle, never written
        chain.append(key[3])
        head = heads[key][0]
        if "base" not in head:
            return chain[::-1]
        key = (*key[:3], head["base"])
    return None


def read_chains(
    doc: Mapping[str, Any],
    heads: Mapping[tuple[Any, ...], tuple[Mapping[str, Any], tuple[str, bytes]]],
    values: Mapping[str, Any],
) -> dict[str, ReadChain]:
    """The chains a ``put`` on checkpoint ``doc`` may base deltas on, from its read: per
    channel whose value read (``values``) is a ``list``, the chain ``doc`` names, if the
    value documents read (``heads``, ``payload.join`` output) form exactly that chain and
    each delta records its ``k`` (one written before it did starts a new chain)."""
    thread_id, checkpoint_ns = doc["thread_id"], doc["checkpoint_ns"]
    chains: dict[str, ReadChain] = {}
    for channel, named in chains_of(doc.get("values", ())).items():
        if not is_list(values.get(channel)):
            continue
        key = (thread_id, checkpoint_ns, channel, named[-1])
        if stored_chain(heads, key) != named:
            continue
        found = [heads[(thread_id, checkpoint_ns, channel, version)] for version in named]
        ks = [head.get("k", 0 if i == 0 else None) for i, (head, _) in enumerate(found)]
        if not all(isinstance(k, int) for k in ks):
            continue
        keeps = [0, *(head["keep"] for head, _ in found[1:])]
        # How many leading elements each version shares with the latest: at least every
        # later version's ``keep``.
        shared = [min(keeps[i + 1 :], default=0) for i in range(len(found))]
        links = tuple(Link(k, v, n) for k, v, n in zip(ks, named, shared))
        stored = tuple(
            (keep, typed, places.of("value", head) if is_bound(typed[0]) else None)
            for keep, (head, typed) in zip(keeps, found)
        )
        chains[channel] = ReadChain(links, stored)
    return chains


def needs_parent(values: Mapping[str, Any], new_versions: Mapping[str, Any]) -> bool:
    """Whether an unchanged channel may be a delta whose chain only the parent names."""
    return any(is_list(v) for ch, v in values.items() if ch not in new_versions)


def plan(
    usable: Mapping[str, Chain | ReadChain],
    enabled: bool,
    values: Mapping[str, Any],
    versions: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    serde: SerializerProtocol,
    parent_chains: Mapping[str, Sequence[Any]] | None,
) -> Plan:
    """Decide which new list values of a checkpoint are stored as deltas.

    ``usable``: the chains the put's parent names that this instance knows the elements
    of (``memory.usable``: written in a row up to it, or read); ``enabled``: deltas
    are wanted (``list_deltas``); ``parent_chains``: the chains the parent
    names (``None`` if unknown). An unchanged channel keeps its parent's chain.
    """
    result = Plan()
    for channel, value in values.items():
        if channel not in versions:
            continue
        version = versions[channel]
        if channel not in new_versions:
            chain = (parent_chains or {}).get(channel)
            result.chains[channel] = list(chain) if chain and chain[-1] == version else [version]
            if channel in usable and usable[channel].links[-1].version == version:
                result.links[channel] = usable[channel]
            continue
        if not (enabled and is_list(value)):
            result.chains[channel] = [version]
            continue
        digests = fingerprints(serde, value)
        size = len(value)
        previous = usable.get(channel)
        if isinstance(previous, ReadChain):
            previous = previous.resolve(serde)
        if previous:
            k = previous.links[-1].k + 1
            wanted = fenwick_chain(k)
            kept = [link for link in previous.links if link.k in wanted]
            shared = common_prefix(previous.latest, digests)
            keep = min(shared, kept[-1].shared)
            if keep:
                tail = list(value[keep:])
                result.deltas[channel] = Delta(kept[-1].version, keep, tail, k)
                links = [Link(lk.k, lk.version, min(lk.shared, shared)) for lk in kept]
                result.links[channel] = Chain(digests, (*links, Link(k, version, size)))
                result.chains[channel] = [link.version for link in result.links[channel].links]
                continue
        result.links[channel] = Chain(digests, (Link(0, version, size),))
        result.chains[channel] = [version]
    return result


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

    def load(head: Mapping[str, Any], typed: tuple[str, bytes]) -> Any:
        with places.at("value", head):
            return loads(typed)

    value = load(*path[-1])
    for head, typed in reversed(path[:-1]):
        value = extended(value, head["keep"], load(head, typed))
        if value is None:
            raise missing(head["base"])
    return value


def extended(base: Any, keep: int, tail: Any) -> list[Any] | None:
    """``base[:keep] + tail``; ``None`` if ``base`` is no list of at least ``keep`` elements."""
    if not isinstance(base, (list, tuple)) or len(base) < keep:
        return None
    return [*base[:keep], *tail]
