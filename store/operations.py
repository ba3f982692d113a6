"""The store's operations, written once for the sync and the async store.

A batch runs in three steps. ``plan`` validates every op and groups them
(nothing has touched the database if it raises); the caller then embeds the
texts the plan asks for (sync or async); ``run_plan`` is the I/O as a
``calls.Operation``: one ``find`` for all gets, one call per search and per
namespace listing, then one ordered ``bulk_write`` for every delete, TTL refresh
and put, and one for their namespaces' registry entries (``registry``). Reads see
the state before the batch's writes, as in ``InMemoryStore``;
of several puts to one item the last wins.

With a ``serde`` the values are stored serialized (encrypted with
``EncryptedSerializer``), so the server narrows a search by namespace and
expiry only, and the value filter runs here on the values it returns, before
the page is cut; the calls per batch stay the same.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import bson
from bson.errors import InvalidDocument
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.store.base import (
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
)
from pymongo.errors import BulkWriteError, InvalidOperation, OperationFailure

from mongo_ckpt import client_bulk, schema
from mongo_ckpt.calls import (
    Operation,
    WriteRequest,
    aggregate,
    bulk_write,
    client_bulk_write,
    create_indexes,
    create_search_index,
    delete_many,
    find,
    find_cursor,
    find_one,
    index_information,
    next_batch,
)
from mongo_ckpt.client_bulk import PutPath
from mongo_ckpt.identifiers import MAX_LIMIT, coerce_id
from mongo_ckpt.layout import REGISTRY, STORE
from mongo_ckpt.schema import SCHEMA
from mongo_ckpt.store import documents, layouts, reading, registry
from mongo_ckpt.store.filters import matches, value_clauses
from mongo_ckpt.store.namespaces import (
    ItemKey,
    check_namespace,
    joined,
    key_for,
    prefix_query,
    split,
)
from mongo_ckpt.store.reading import key_of
from mongo_ckpt.store.vectors import (
    SEARCH_INDEX_NAME,
    Embedded,
    EmbeddingRequest,
    Path,
    best,
    field_texts,
    index_paths,
    ranked,
    score,
    search_index_model,
    vector_search_stage,
)

logger = logging.getLogger(__name__)

# What asking for search indexes raises where there is no Atlas Search
# (MongoDB Community, SecantusDB: OperationFailure; mongomock: NotImplementedError).
SEARCH_UNAVAILABLE = (OperationFailure, NotImplementedError)
MAX_READ_BATCH = 1000  # documents decoded per step while filtering in Python


@dataclass
class Plan:
    """A validated batch: each op's position in the results, grouped by kind."""

    size: int
    gets: dict[ItemKey, list[tuple[int, bool]]] = field(default_factory=dict)
    searches: list[tuple[int, SearchOp, list[dict[str, Any]]]] = field(default_factory=list)
    listings: list[tuple[int, ListNamespacesOp]] = field(default_factory=list)
    puts: dict[ItemKey, PutOp] = field(default_factory=dict)
    embedding: EmbeddingRequest = field(default_factory=EmbeddingRequest)

    def kind(self) -> str:
        """The ``BaseStore`` method the batch is: ``get``, ``search``, ``put``, ``delete``,
        ``list_namespaces``, or ``batch`` when it mixes them."""
        kinds = {"get"} if self.gets else set()
        kinds |= {"search"} if self.searches else set()
        kinds |= {"list_namespaces"} if self.listings else set()
        kinds |= {"delete" if op.value is None else "put" for op in self.puts.values()}
        return kinds.pop() if len(kinds) == 1 else "batch"

    def namespaces(self) -> set[tuple[str, ...]]:
        """The namespaces the batch reads or writes items in (search prefixes included)."""
        found = {split(joined) for joined, _ in self.gets}
        found |= {tuple(op.namespace_prefix) for _, op, _ in self.searches}
        return found | {tuple(op.namespace) for op in self.puts.values()}


def _refused_write(write: Operation[Any], entries: Sequence[str]) -> Operation[None]:
    """``write`` (a listing's claim or write-back of registry ``entries``); a write the
    server refuses (``OperationFailure``, ``BulkWriteError`` included) is logged: the entries
    stay flagged, and the listing answers from its probe, as the next one settles them."""
    try:
        yield from write
    except OperationFailure as error:
        logger.warning(
            "list_namespaces could not settle %d registry entries (%s...): %s; answered from "
            "the items, the next listing tries again",
            len(entries), ", ".join(registry.joined_of(e) for e in entries[:3]), error,
        )


def _where(db_name: str, names: Mapping[str, str]) -> str:
    """How errors name the store's collections."""
    return f"database {db_name!r} (collections {names[STORE]}, {names[REGISTRY]})"


class StoreOperations:
    """Builds each store operation as a ``calls.Operation``."""

    def __init__(self, index: IndexConfig | None, serde: SerializerProtocol | None = None) -> None:
        self.index = index
        self.serde = serde
        # TTLConfig.omit_expired: hide expired items before they are swept (on by default).
        self.omit_expired = True
        self.paths: list[Path] = index_paths(index.get("fields")) if index else []
        # None until setup has asked the server; True where $vectorSearch is available.
        self.vector_search: bool | None = None
        self.batch_from = registry.BATCH_FROM  # namespaces in a batch that make it many
        # How a batch's writes go: one client-level bulkWrite where ``namespaces`` is set.
        self.put_path: PutPath | None = None

    # -- setup ----------------------------------------------------------------

    def setup(self, db_name: str, names: Mapping[str, str]) -> Operation[None]:
        """The layout version check (one round trip when recorded; on new collections a
        look for another layout, refused with ``ForeignCollectionError``, then the indexes
        and the version recorded: the current one, or the one another process recorded
        since the read, ``schema.record_first``) and, unless known already, the vector index
        where Atlas has one. Items without a recorded version, or a version below the
        oldest this release reads, are a pre-release layout: ``SchemaUpgradeRequired``,
        nothing written; an older version it reads is taken up the ladder as far as setup
        may (``schema.climb``)."""
        key = schema.store_key(names[STORE])
        where = _where(db_name, names)
        found, recorded = yield from schema.read_record(key, where)
        layouts.check_recorded(db_name, names, recorded)
        if found is None:
            if (yield from self._refuse_foreign(db_name, names)):
                raise schema.pre_release(key, where, None)
            yield from create_indexes(STORE, documents.index_models())
            yield from create_indexes(REGISTRY, registry.index_models())
            found = yield from schema.record_first(key, names, where)
        yield from schema.climb(key, where, found, names, self)
        if self.index and self.vector_search is None:
            try:
                self.vector_search = yield from self.ensure_search_index()
            except SEARCH_UNAVAILABLE as exc:
                logger.info("no Atlas Vector Search on this server (%s): exact vector search", exc)
                self.vector_search = False

    def _refuse_foreign(self, db_name: str, names: Mapping[str, str]) -> Operation[bool]:
        """Raise ``ForeignCollectionError`` when either collection holds another layout;
        whether they hold documents."""
        stored = False
        owner = yield from find_one(SCHEMA, layouts.owner_query(names))
        for logical, name in names.items():
            sample = yield from find_one(logical, {})
            indexes = yield from index_information(logical)
            found = layouts.foreign_layout(logical, name, owner, sample, indexes)
            if found is not None:
                raise layouts.refusal(db_name, logical, name, found)
            stored = stored or sample is not None
        return stored

    def upgrade(self, db_name: str, names: Mapping[str, str]) -> Operation[None]:
        """The layout taken up every rung of its ladder (``schema.climb``), those only an
        upgrade takes included (after ``setup``, which refused what this release cannot)."""
        key = schema.store_key(names[STORE])
        found = yield from schema.read(key, _where(db_name, names))
        if found is not None:
            yield from schema.climb(key, _where(db_name, names), found, names, self, upgrade=True)

    def ensure_search_index(self) -> Operation[bool]:
        """Create the vector index unless it exists; raises where there is no Atlas Search."""
        assert self.index
        pipeline = [{"$listSearchIndexes": {"name": SEARCH_INDEX_NAME}}]
        if not (yield from aggregate(STORE, pipeline)):
            yield from create_search_index(STORE, search_index_model(self.index["dims"]))
        return True

    def sweep_ttl(self) -> Operation[int]:
        """Delete expired items now, and the registry entries whose items all expired."""
        now = documents.utc_now()
        # Entries first: an item put between the two deletes is then either swept or
        # listed by its (new) entry, never left without one.
        yield from delete_many(REGISTRY, registry.expired_entries(now))
        result = yield from delete_many(STORE, documents.expired(now))
        return result.deleted_count

    # -- batch ----------------------------------------------------------------

    def plan(self, ops: Iterable[Op]) -> Plan:
        """Validate and group ``ops``; raises before any I/O on bad input."""
        ops = list(ops)
        plan = Plan(len(ops))
        for i, op in enumerate(ops):
            check_namespace(op)
            if isinstance(op, GetOp):
                key = key_for(op.namespace, coerce_id(op.key, "key"))
                plan.gets.setdefault(key, []).append((i, op.refresh_ttl))
            elif isinstance(op, SearchOp):
                _check_page(op.limit, op.offset)
                plan.searches.append((i, op, value_clauses(op.filter)))
                if op.query and self.index:
                    plan.embedding.add_query(op.query)
            elif isinstance(op, ListNamespacesOp):
                _check_page(op.limit, op.offset)
                if op.max_depth is not None and op.max_depth < 1:
                    raise ValueError(f"max_depth must be at least 1, got {op.max_depth}")
                plan.listings.append((i, op))
            else:
                self._plan_put(plan, op)
        for key, op in plan.puts.items():
            if op.value is not None and op.index is not False and self.index:
                paths = self.paths if op.index is None else index_paths(op.index)
                plan.embedding.add_item(key, field_texts(op.value, paths))
        return plan

    def _plan_put(self, plan: Plan, op: PutOp) -> None:
        key = coerce_id(op.key, "key")
        if op.value is not None:
            registry.check_storable(op.namespace)
            if not isinstance(op.value, Mapping):
                raise TypeError(f"value must be a dict, got {type(op.value).__name__}")
            _check_ttl(op.ttl)
            # As stored: escaped keys without a serde (raises on a key BSON cannot hold).
            stored = op.value if self.serde else documents.stored_value(op.value)
            _check_value(op.namespace, key, stored, plain=self.serde is None)
        if (
            op.index is not None
            and op.index is not False
            and (isinstance(op.index, str) or not all(isinstance(p, str) for p in op.index))
        ):
            raise TypeError(f"index must be False, None or a list of field paths, got {op.index!r}")
        item = key_for(op.namespace, key)
        plan.puts.pop(item, None)  # the last put wins, in its own position
        plan.puts[item] = op._replace(key=key, namespace=tuple(op.namespace))

    def _visible(self, now: datetime) -> datetime | None:
        """The moment reads hide expired items at; ``None`` (show them) without omit_expired."""
        return now if self.omit_expired else None

    def run_plan(self, plan: Plan, embedded: Embedded) -> Operation[list[Result]]:
        now = documents.utc_now()
        results: list[Result] = [None] * plan.size
        read: list[Mapping[str, Any]] = []  # documents whose TTL the read refreshes
        if plan.gets:
            docs = yield from find(
                STORE,
                reading.get_query(plan.gets, self._visible(now)),
                projection=documents.NO_VECTORS,
            )
            found = {key_of(doc): reading.opened(doc, self.serde) for doc in docs}
            for key, positions in plan.gets.items():
                doc = found.get(key)
                for i, refresh in positions:
                    results[i] = reading.item(doc) if doc else None
                    if doc and refresh:
                        read.append(doc)
        for i, op, clauses in plan.searches:
            page = yield from self._search(op, clauses, embedded, now)
            results[i] = [reading.search_item(doc, score) for score, doc in page]
            if op.refresh_ttl:
                read.extend(doc for _, doc in page)
        for i, listing in plan.listings:
            results[i] = (yield from self._namespaces(listing, now)) if listing.limit else []
        yield from self._write(plan, embedded, read, now)
        return results

    def _search(
        self, op: SearchOp, clauses: list[dict[str, Any]], embedded: Embedded, now: datetime
    ) -> Operation[list[tuple[float | None, Mapping[str, Any]]]]:
        """``[(score, document)]`` of one search page, values readable."""
        if not op.limit:
            return []
        # The server filters plain values; serialized ones are filtered here once read.
        server, local = (clauses, []) if self.serde is None else ([], clauses)
        if not (op.query and self.index):
            if local:
                return (yield from self._recent_matching(op, local, now))
            docs = yield from find(
                STORE,
                reading.search_query(op.namespace_prefix, server, self._visible(now)),
                projection=documents.NO_VECTORS,
                sort=documents.RECENT_FIRST,
                skip=op.offset,
                limit=op.limit,
            )
            return [(None, reading.opened(doc, self.serde)) for doc in docs]
        query = embedded.queries[op.query]
        if self.vector_search:
            prefix = prefix_query(op.namespace_prefix)
            pipeline = [
                vector_search_stage(query, prefix, op.offset + op.limit),
                {"$match": reading.search_query((), server, self._visible(now))},
                {"$project": {"embedding": 0}},
            ]
            docs = yield from aggregate(STORE, pipeline)
            return ranked(query, self._matching(docs, local))[op.offset : op.offset + op.limit]
        return (yield from self._exact_search(op, query, server, local, now))

    def _exact_search(
        self,
        op: SearchOp,
        query: list[float],
        server: list[dict[str, Any]],
        local: list[dict[str, Any]],
        now: datetime,
    ) -> Operation[list[tuple[float | None, Mapping[str, Any]]]]:
        """Rank every candidate exactly, read from one streamed ``find`` in replies of
        ``MAX_READ_BATCH`` documents (one ``getMore`` each after the first): only the best
        ``offset + limit`` are held between batches, and without their vectors."""
        wanted = op.offset + op.limit
        cursor = yield from find_cursor(
            STORE,
            reading.search_query(op.namespace_prefix, server, self._visible(now)),
            projection={"embedding": 0},
            batch_size=MAX_READ_BATCH,
        )
        kept: list[tuple[float | None, Mapping[str, Any]]] = []
        while docs := (yield from next_batch(cursor, MAX_READ_BATCH)):
            scored = ((score(query, doc), doc) for doc in self._matching(docs, local))
            unvectored = ((s, {k: v for k, v in d.items() if k != "embeddings"}) for s, d in scored)
            kept = best(kept, unvectored, wanted)
        return kept[op.offset : wanted]

    def _namespaces(self, op: ListNamespacesOp, now: datetime) -> Operation[list[tuple[str, ...]]]:
        """One page of ``list_namespaces`` from the registry: one ``aggregate`` of the
        page's groups of entries, plus, when it meets batch documents, their fold and the
        page read again (once), and for flagged entries it meets, a probe of their items and
        the exact entry written back (``_settle``), whose answer the page takes. Groups
        found empty make it read on, after the last group it read, twice as many each time:
        its reads are bounded by the page and the entries it settles, whatever writes land
        meanwhile. Each namespace it lists had a live item at some moment of the call (an
        unflagged entry when read, a probe), and one live throughout is listed."""
        if not self.omit_expired:  # the registry does not know expired items still stored
            grouped = yield from aggregate(STORE, reading.namespaces_pipeline(op, None))
            return reading.namespaces(grouped)
        wanted = op.offset + op.limit
        listed: list[str] = []
        ask, after, folded = wanted, None, False
        while len(listed) < wanted:
            groups = yield from aggregate(REGISTRY, registry.listing_pipeline(op, now, ask, after))
            if not folded and groups and groups[0]["_id"] == registry.BATCHES:
                yield from self._fold()
                folded = True
                continue
            # Batch documents written after the first read are of puts this listing overlaps.
            folded = True
            found = [group for group in groups if group["_id"] != registry.BATCHES]
            flagged = sorted(
                {e for g in found if not g["unflagged"] for e in g["flagged"] if e is not None}
            )
            live = (yield from self._settle(flagged, now)) if flagged else {}
            listed += [
                group["_id"]
                for group in found
                if group["unflagged"] or any(live.get(e, False) for e in group["flagged"])
            ]
            if len(groups) < ask:  # no group after these
                break
            after = groups[-1]["_id"]
            ask = max(wanted - len(listed), 2 * ask)
        return [split(ns) for ns in listed[op.offset : wanted]]

    def _fold(self) -> Operation[None]:
        """The batch documents stored, folded into the registry's entries (one ``find``,
        one ``bulk_write`` for every ``registry.FOLD_NAMES`` names)."""
        batches = yield from find(REGISTRY, registry.BATCHES_QUERY)
        for requests in registry.fold_requests(batches) if batches else []:
            yield from bulk_write(REGISTRY, requests, ordered=True)

    def _settle(self, entries: Sequence[str], now: datetime) -> Operation[dict[str, bool]]:
        """Claim flagged registry entries (one ``bulk_write``), probe their items (one
        ``aggregate``) and write each back exact, or remove it (one ``bulk_write``), unless
        a write touched it after the claim; whether each one's namespace had a live item
        when probed, by entry ``_id``. The probe is the answer: a claim or write-back the
        server refuses is logged and left to the next listing (``_refused_write``)."""
        claim = registry.new_version()
        claims = [registry.claim_request(entries, claim)]
        yield from _refused_write(bulk_write(REGISTRY, claims, ordered=True), entries)
        probe = registry.probe_pipeline([registry.joined_of(entry) for entry in entries])
        found = yield from aggregate(STORE, probe)
        # No group for no items (mongomock returns one whose ``until`` is None).
        latest = {doc["_id"]: reading.utc(doc["until"]) for doc in found if doc["until"]}
        live: dict[str, bool] = {}
        settled: list[WriteRequest] = []
        for entry in entries:
            until = latest.get(registry.joined_of(entry))
            # Expired on this clock but still stored, an item may be live on a clock behind
            # it: the entry goes only with the last item, and otherwise records its expiry.
            settled.append(registry.settled_request(entry, claim, until))
            live[entry] = until is not None and until > now
        yield from _refused_write(bulk_write(REGISTRY, settled, ordered=False), entries)
        return live

    def _recent_matching(
        self, op: SearchOp, clauses: list[dict[str, Any]], now: datetime
    ) -> Operation[list[tuple[float | None, Mapping[str, Any]]]]:
        """A page of the newest items passing ``clauses``, filtered here: one ``find`` over
        the namespace, read only until the page is full."""
        wanted = op.offset + op.limit
        cursor = yield from find_cursor(
            STORE,
            reading.search_query(op.namespace_prefix, (), self._visible(now)),
            projection=documents.NO_VECTORS,
            sort=documents.RECENT_FIRST,
        )
        found: list[Mapping[str, Any]] = []
        size = wanted
        while len(found) < wanted and (docs := (yield from next_batch(cursor, size))):
            found.extend(self._matching(docs, clauses))
            size = min(size * 4, MAX_READ_BATCH)
        return [(None, doc) for doc in found[op.offset : wanted]]

    def _matching(
        self, docs: Iterable[Mapping[str, Any]], clauses: list[dict[str, Any]]
    ) -> list[Mapping[str, Any]]:
        opened = (reading.opened(doc, self.serde) for doc in docs)
        return [doc for doc in opened if matches(doc["value"], clauses)]

    def _write(
        self, plan: Plan, embedded: Embedded, read: list[Mapping[str, Any]], now: datetime
    ) -> Operation[None]:
        """The batch's writes: deletes, the TTL refreshes of what it read and its puts on the
        items, then the registry entries of the namespaces it wrote in (the flags of those
        it deleted from, the raises of those whose items it refreshed, the entries of those
        it put into: ``registry``), sent by ``_send``.

        A batch of at least ``documents.INSERTS_FROM`` puts inserts its items; the first
        one already stored (live or expired) stops the write, and the puts from it on are
        sent again as upserts, with the entries. Upserts of many puts are plain updates
        after the statements renewing ``created_at`` of the expired copies they
        overwrite, of a few an update pipeline each (see ``documents.revived_puts``)."""
        deletes = [op for op in plan.puts.values() if op.value is None]
        puts = [op for op in plan.puts.values() if op.value is not None]
        expiries: dict[tuple[str, ...], list[datetime]] = {}
        for op in puts:
            until = documents.FOREVER if op.ttl is None else documents.expiry(now, op.ttl)
            expiries.setdefault(op.namespace, []).append(until)
        emptied = dict.fromkeys(joined(op.namespace) for op in deletes)
        entries: list[WriteRequest] = [
            *(registry.delete_request(ns) for ns in emptied),
            *(registry.raise_request(ns, until) for ns, until in _refreshed(read, now).items()),
        ]
        # Not where listings read the items (omit_expired off): nothing there would fold.
        if self.omit_expired and len(expiries) >= self.batch_from:
            entries += registry.batch_requests(expiries)
        else:
            entries += [registry.put_request(ns, u) for ns, u in expiries.items()]
        items = [self._item(op, embedded, now) for op in puts]
        before: list[WriteRequest] = [
            *(documents.delete_request(op.namespace, op.key) for op in deletes),
            *documents.refresh_requests(read, now),
        ]
        if len(items) >= documents.INSERTS_FROM:
            inserts = [documents.insert_request(item, now) for item in items]
            positions = range(len(before), len(before) + len(inserts))
            stored = yield from self._send([*before, *inserts], entries, positions)
            if stored is None:
                return
            before, items = [], items[stored:]  # what came before the stored item is written
        revives = documents.revived_puts([(tuple(i["namespace"]), i["key"]) for i in items], now)
        updates = [documents.put_request(item, now, revived=bool(revives)) for item in items]
        if before or revives or updates:
            yield from self._send([*before, *revives, *updates], entries)

    def _send(
        self, requests: list[WriteRequest], entries: list[WriteRequest], inserts: range = range(0)
    ) -> Operation[int | None]:
        """The items' ``requests`` (one ordered write: each run of one kind of request is
        one command, so a single put is one), then the registry's ``entries`` (updates: one
        command), in one client-level ``bulkWrite`` where the server has it, else in two
        bulk writes. Inserts (``inserts``: a batch of many new items) always go in two:
        there the command saved is small beside the write, and SecantusDB runs 1,000 of them
        in an ``insert`` command in about 60% of the time the ``bulkWrite`` takes (same
        batches, process CPU: 285-290 against 457-477 ms). The entries are sent after a
        write error of the items too: every entry statement that may leave an entry wrong
        flags it, so one for an item not written is harmless, and a delete applied before
        the error is flagged. Except after an insert
        refused because its item is stored (one of ``inserts``, the requests' positions):
        then the position of that item among them, the entries left to the next send."""
        path = self.put_path if not inserts else None
        failed: BulkWriteError | None = None
        sent = False  # whether the entries went
        refused = False
        if path is not None and path.namespaces is not None:
            try:
                writes = [(STORE, requests), (REGISTRY, entries)]
                items, registered = yield from client_bulk_write(writes, path.namespaces)
            except (OperationFailure, InvalidOperation) as error:
                if not client_bulk.refusal(error):  # it ran, and may have applied deletes
                    if entries:
                        yield from bulk_write(REGISTRY, entries, ordered=True)
                    raise
                path.refused(error)  # raises ClientBulkWriteUnavailable when required
                refused = True
            if not refused:
                sent = registered is not None
                errors = [w for w in (items, registered) if isinstance(w, BulkWriteError)]
                failed = errors[0] if errors else None
        if path is None or path.namespaces is None:
            try:
                yield from bulk_write(STORE, requests, ordered=True)
            except BulkWriteError as error:
                failed = error
        stored = None if failed is None else documents.refused_insert(failed, inserts)
        if stored is not None:
            return stored
        if not sent and entries:
            yield from bulk_write(REGISTRY, entries, ordered=True)
        if failed is not None:
            raise failed
        return None

    def _item(self, op: PutOp, embedded: Embedded, now: datetime) -> dict[str, Any]:
        assert op.value is not None
        return documents.item_fields(
            op.namespace,
            op.key,
            op.value,
            op.ttl,
            embedded.items.get(key_for(op.namespace, op.key), ()),
            bool(self.vector_search),
            self.serde,
            now,
        )


def _refreshed(read: list[Mapping[str, Any]], now: datetime) -> dict[tuple[str, ...], datetime]:
    """The latest new expiry, by namespace, of the expiring items a refresh moves."""
    refreshed: dict[tuple[str, ...], datetime] = {}
    for doc in read:
        if doc.get("ttl_minutes") is not None:
            namespace = tuple(doc["namespace"])
            until = documents.expiry(now, doc["ttl_minutes"])
            refreshed[namespace] = max(until, refreshed.get(namespace, until))
    return refreshed


def _check_page(limit: Any, offset: Any) -> None:
    for name, number in (("limit", limit), ("offset", offset)):
        if not isinstance(number, int) or isinstance(number, bool):
            raise TypeError(f"{name} must be an int, got {type(number).__name__}: {number!r}")
        if number < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {number!r}")
    if limit + offset > MAX_LIMIT:  # MongoDB reads skip and limit as 64-bit ints
        raise ValueError(
            f"limit + offset must be at most 2**63 - 1 ({MAX_LIMIT}), got limit={limit}, "
            f"offset={offset}; pass smaller numbers"
        )


MAX_VALUE_BYTES = 15 * 2**20
"""Largest item value, as BSON, ``put`` accepts: below MongoDB's 16 MiB document limit."""


def _check_value(namespace: Any, key: str, value: Mapping[str, Any], *, plain: bool) -> None:
    """Refuse, before any I/O, a value over ``MAX_VALUE_BYTES`` as BSON and, stored
    ``plain`` (without a serde), one BSON cannot hold: the batch would otherwise fail
    half-written, after its deletes."""
    where = f"value of namespace {tuple(namespace)!r} key {key!r}"
    try:
        size = len(bson.encode(value))
    except InvalidDocument as exc:
        if plain:
            raise TypeError(
                f"{where} cannot be stored as BSON ({exc}): store JSON-like values (str, "
                "int, float, bool, None, datetime, bytes, lists and dicts of them), or pass "
                "a serde= that serializes it. Nothing in this batch was written"
            ) from exc
        return  # a serde stores it: nothing cheap to measure
    except OverflowError as exc:
        if plain:
            raise ValueError(
                f"{where} holds an integer outside BSON's 64-bit range ({exc}): store it "
                "as a string or float. Nothing in this batch was written"
            ) from exc
        return
    if size > MAX_VALUE_BYTES:
        raise ValueError(
            f"{where} is {size} bytes as BSON, over the {MAX_VALUE_BYTES}-byte (15 MiB) "
            "limit per item; split it across several keys. Nothing in this batch was written"
        )


def _check_ttl(ttl: Any) -> None:
    if ttl is None:
        return
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not ttl > 0:
        raise ValueError(f"ttl must be a positive number of minutes or None, got {ttl!r}")
    if not ttl <= MAX_TTL_MINUTES:  # inf would overflow the expiry date
        raise ValueError(
            f"ttl must be at most {MAX_TTL_MINUTES} minutes (100 years), got {ttl!r}; "
            "pass ttl=None for an item that never expires"
        )


MAX_TTL_MINUTES = 100 * 365 * 24 * 60
"""Largest item ``ttl`` (minutes) ``put`` accepts."""
