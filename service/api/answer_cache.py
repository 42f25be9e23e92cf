"""The answer cache: encoded GraphQL answers, reused while the ledger has not changed.

The ledger changes only when a write commits, and every such commit bumps ``ledger_version``
(:mod:`service.ledger.version`) in its own transaction. An answer is therefore a function of

* the operation: its document as graphql-core prints it (whitespace, commas and comments do not
  matter; string literals do), the operation name, the variables and the request extensions;
* the caller's :class:`~service.analytics.access.Access` — never the token: two tokens with the
  same scopes share answers, a project-scoped token never gets an answer computed for wider ones;
* the ledger version, read once per request *after* it arrived, so an ingest committed before a
  request starts is always seen by it.

Only the answers of single POSTed operations that executed without any error are kept (status
200, no ``errors``); refusals, limits, timeouts and batches are never cached. The schema has no
mutations and no field depends on the clock (every window is explicit), so nothing else changes
an answer.

Memory is bounded in bytes (``max_b``, least recently used evicted first; 0 disables the cache)
and per answer (``entry_max_b``: larger answers are not kept). Each worker process has its own
cache; the version is shared through the database, so an ingest through any process invalidates
every process's answers. Entries of an older version are dropped as soon as a newer one is seen.

The version read costs one tiny SELECT; reads are coalesced: a request waits for a read that
started after it arrived (the one in flight, if it started later, else the next one, shared by
every request that arrived meanwhile), so under any load there is at most one read in flight and
correctness does not depend on a TTL.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from anyio import to_thread
from graphql import GraphQLError, GraphQLSchema, print_ast, validate
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import Response
from strawberry.extensions.max_aliases import create_validator as alias_rule
from strawberry.extensions.query_depth_limiter import create_validator as depth_rule

from service.analytics.access import Access
from service.api.answer_cache_settings import AnswerCacheSettings
from service.api.guard import parse_limited
from service.ledger import version as ledger_version
from service.limits import Limits

log = logging.getLogger("gpu_ledger.answer_cache")

MIB = 1024 * 1024
#: Set (True) in the ASGI scope by the view when the single operation executed without errors.
CLEAN_ANSWER_KEY = "gpu_ledger.clean_answer"
#: Response header saying what the cache did: hit, miss (computed, maybe kept) or bypass.
CACHE_HEADER = "x-answer-cache"
#: Bytes an entry costs beyond its body: its key and the bookkeeping (an estimate; keeps many tiny
#: entries from being counted as free).
ENTRY_OVERHEAD_B = 256
#: Documents longer than this are not normalized (nor cached): real dashboards are far shorter.
MAX_DOCUMENT_CHARS = 64 * 1024
#: Request bodies larger than this are not keyed (nor cached): not even their JSON is decoded on
#: the event loop (strawberry still answers them, within ``max_body_b``).
MAX_KEYED_BODY_B = 256 * 1024
#: Total characters of remembered document normalizations (raw text → printed document).
NORMALIZED_MEMO_CHARS = 8 * MIB


@dataclass(frozen=True, slots=True)
class OperationKey:
    """What was asked, independent of who asked it."""

    document: str
    operation_name: str | None
    variables: str  # canonical JSON
    extensions: str  # canonical JSON


@dataclass(frozen=True, slots=True)
class AnswerKey:
    operation: OperationKey
    access: Access
    version: int


class AnswerStore:
    """Encoded answers by key, least recently used evicted first, bounded in bytes."""

    def __init__(self, max_b: int, entry_max_b: int) -> None:
        self.max_b, self.entry_max_b = max_b, entry_max_b
        self._entries: OrderedDict[AnswerKey, bytes] = OrderedDict()
        self.size_b = 0
        self.version = -1  # the newest ledger version seen
        self.hits = self.misses = self.evictions = self.too_large = self.bypasses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def cost_b(key: AnswerKey, body: bytes) -> int:
        op = key.operation
        return len(body) + len(op.document) + len(op.variables) + len(op.extensions) + ENTRY_OVERHEAD_B

    def saw_version(self, version: int) -> None:
        """Every entry of an older version is dead from now on: free their memory at once."""
        if version > self.version:
            if self._entries:
                self.evictions += len(self._entries)
                self._entries.clear()
                self.size_b = 0
            self.version = version

    def get(self, key: AnswerKey) -> bytes | None:
        body = self._entries.get(key)
        if body is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return body

    def put(self, key: AnswerKey, body: bytes) -> bool:
        """Keep ``body`` unless it is over the entry cap or of an older version than one seen."""
        if key.version < self.version:
            return False
        cost = self.cost_b(key, body)
        if cost > min(self.entry_max_b, self.max_b):
            self.too_large += 1
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.size_b -= self.cost_b(key, old)
        while self._entries and self.size_b + cost > self.max_b:
            evicted_key, evicted = self._entries.popitem(last=False)
            self.size_b -= self.cost_b(evicted_key, evicted)
            self.evictions += 1
        self._entries[key] = body
        self.size_b += cost
        return True


class VersionReader:
    """The committed ledger version, read at most once at a time and never older than the caller's
    arrival (see the module docstring)."""

    def __init__(self, source: Callable[[], Awaitable[int]], timeout_s: float = 5.0) -> None:
        self.source, self.timeout_s = source, timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: asyncio.Future[int] | None = None
        self._next: asyncio.Future[int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.reads = 0

    async def current(self) -> int:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # futures belong to one loop (a test may run several in turn)
            self._loop, self._running, self._next = loop, None, None
        if self._running is None:
            self._running = future = loop.create_future()
            self._start(future)
        else:  # the read in flight began before this request: wait for the next one
            if self._next is None:
                self._next = loop.create_future()
            future = self._next
        return await asyncio.shield(future)

    def _start(self, future: asyncio.Future[int]) -> None:
        task = asyncio.ensure_future(self._run(future))
        self._tasks.add(task)  # a task nobody references may be collected before it ends
        task.add_done_callback(self._tasks.discard)

    async def _run(self, future: asyncio.Future[int]) -> None:
        try:
            self.reads += 1
            value = await asyncio.wait_for(self.source(), self.timeout_s)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001  (handed to every waiter)
            if not future.done():
                future.set_exception(exc)
                future.exception()  # marked retrieved: waiters may all have gone
        else:
            if not future.done():
                future.set_result(value)
        finally:
            following, self._next = self._next, None
            self._running = following
            if following is not None:
                self._start(following)


def _read_version(engine: Engine) -> int:
    with engine.connect() as conn:
        return ledger_version.current(conn)


class _PoolVersionSource:
    """The version through the engine's pool, in a worker thread (SQLite: a local file read)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def __call__(self) -> int:
        return await to_thread.run_sync(_read_version, self.engine)


class _PgVersionSource:
    """The version through a PostgreSQL connection of its own, used from the event loop: no thread
    hop, no pool checkout and ping per read (about a tenth of the CPU of the pooled read). Any
    failure drops the connection; the next read opens a new one."""

    def __init__(self, engine: Engine) -> None:
        self.conninfo = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self) -> int:
        loop = asyncio.get_running_loop()
        if self._conn is not None and (self._conn.closed or self._loop is not loop):
            self._drop()
        if self._conn is None:
            self._conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            self._loop = loop
        try:
            cursor = await self._conn.execute(ledger_version.CURRENT_SQL)
            row = await cursor.fetchone()
        except BaseException:
            self._drop()
            raise
        return int(row[0]) if row is not None else 0

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.pgconn.finish()  # synchronous: its loop may be gone (or busy with a cancelled read)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


def _canonical(value: Any) -> str:
    return json.dumps(value or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class AnswerCache:
    """The cache of one process: :meth:`answer` wraps the view's execution of a request."""

    def __init__(
        self,
        engine: Engine,
        settings: AnswerCacheSettings,
        limits: Limits | None = None,
        schema: GraphQLSchema | None = None,
    ) -> None:
        self.settings, self.limits = settings, limits or Limits()
        # A document over the depth or alias limit is refused before any SQL (service.api.guard):
        # not even the version is read for it.
        self.schema = schema
        limits_ = self.limits
        self._limit_rules = (depth_rule(limits_.max_depth, None), alias_rule(limits_.max_aliases))
        self.store = AnswerStore(settings.max_b, settings.entry_max_b)
        self.engine = engine
        self.versions = VersionReader(_PoolVersionSource(engine))
        self._pg_source: _PgVersionSource | None = None
        self._normalized: OrderedDict[str, str | None] = OrderedDict()
        self._normalized_chars = 0

    @property
    def enabled(self) -> bool:
        return self.settings.max_b > 0

    async def start(self) -> None:
        """On PostgreSQL, read the version through a connection of the cache's own from now on
        (the app's lifespan: :meth:`close` closes it). Without it, reads go through the pool."""
        if self.enabled and self.engine.dialect.name == "postgresql" and self._pg_source is None:
            self._pg_source = _PgVersionSource(self.engine)
            self.versions.source = self._pg_source

    async def close(self) -> None:
        source, self._pg_source = self._pg_source, None
        self.versions.source = _PoolVersionSource(self.engine)
        if source is not None:
            await source.close()

    async def answer(
        self, request: Request, access: Access, run: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """``run(request)``'s response, or the cached one computed for the same operation, access
        and ledger version. A clean 200 answer is kept."""
        if not self.enabled:
            return await run(request)
        operation = await self._operation(request)
        if operation is None:
            self.store.bypasses += 1
            return _marked(await run(request), "bypass")
        try:
            version = await self.versions.current()
        except Exception:  # noqa: BLE001  (the database is the answer's problem, not the cache's)
            log.warning("answer cache: ledger version unreadable, answering uncached", exc_info=True)
            self.store.bypasses += 1
            return _marked(await run(request), "bypass")
        self.store.saw_version(version)
        key = AnswerKey(operation, access, version)
        body = self.store.get(key)
        if body is not None:
            return Response(body, media_type="application/json", headers={CACHE_HEADER: "hit"})
        response = await run(request)
        if response.status_code == 200 and request.scope.get(CLEAN_ANSWER_KEY) is True:
            self.store.put(key, bytes(response.body))
        return _marked(response, "miss")

    async def _operation(self, request: Request) -> OperationKey | None:
        """The operation a POSTed JSON body asks for, or None (not cacheable: GET, batch, malformed —
        strawberry gives such a request its answer or its error)."""
        if request.method != "POST" or "application/json" not in request.headers.get("content-type", ""):
            return None
        body = await request.body()
        if len(body) > MAX_KEYED_BODY_B:
            return None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        query, name = data.get("query"), data.get("operationName")
        variables, extensions = data.get("variables"), data.get("extensions")
        if (
            not isinstance(query, str)
            or not isinstance(name, (str, type(None)))
            or not isinstance(variables, (dict, type(None)))
            or not isinstance(extensions, (dict, type(None)))
        ):
            return None
        document = await self._normalize(query)
        if document is None:
            return None
        return OperationKey(document, name, _canonical(variables), _canonical(extensions))

    async def _normalize(self, query: str) -> str | None:
        """The document as graphql-core prints it (None: not parseable within the limits; strawberry
        answers it with the error). Parsed off the event loop, under ``[limits]``, once per text."""
        if len(query) > MAX_DOCUMENT_CHARS:
            return None
        if query in self._normalized:
            self._normalized.move_to_end(query)
            return self._normalized[query]
        try:
            printed = await to_thread.run_sync(self._printed_within_limits, query)
        except RecursionError:  # print_ast of a document nested to the parser's limit
            printed = None
        self._normalized[query] = printed
        self._normalized_chars += len(query) + len(printed or "")
        while self._normalized_chars > NORMALIZED_MEMO_CHARS and self._normalized:
            old, old_printed = self._normalized.popitem(last=False)
            self._normalized_chars -= len(old) + len(old_printed or "")
        return printed

    def _printed_within_limits(self, query: str) -> str | None:
        try:
            document = parse_limited(query, self.limits)
        except GraphQLError:
            return None
        if self.schema is not None and any(validate(self.schema, document, [r]) for r in self._limit_rules):
            return None
        return print_ast(document)

    def collector(self) -> Collector:
        return _CacheCollector(self.store)


def _marked(response: Response, what: str) -> Response:
    response.headers[CACHE_HEADER] = what
    return response


class _CacheCollector(Collector):
    """The cache's counters on ``/metrics`` (this process's)."""

    def __init__(self, store: AnswerStore) -> None:
        self.store = store

    def collect(self) -> Iterable[Metric]:
        s = self.store
        counters = (
            ("hits", "GraphQL answers served from the answer cache.", s.hits),
            ("misses", "Cacheable GraphQL requests computed (not in the answer cache).", s.misses),
            (
                "evictions",
                "Answers dropped: least recently used, or of an older ledger version.",
                s.evictions,
            ),
            ("too_large", "Clean answers not kept: larger than answer_cache.entry_max_b.", s.too_large),
            ("bypasses", "GraphQL requests the cache could not key (GET, batch, unparseable).", s.bypasses),
        )
        for name, doc, value in counters:
            family = CounterMetricFamily(f"gpu_ledger_answer_cache_{name}", doc)
            family.add_metric([], value)
            yield family
        yield GaugeMetricFamily("gpu_ledger_answer_cache_bytes", "Bytes of answers kept.", value=s.size_b)
        yield GaugeMetricFamily("gpu_ledger_answer_cache_entries", "Answers kept.", value=len(s))
        yield GaugeMetricFamily(
            "gpu_ledger_answer_cache_ledger_version", "Newest ledger version seen.", value=max(s.version, 0)
        )
