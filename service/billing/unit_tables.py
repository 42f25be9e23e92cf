"""A billing period's lines loaded into tables of their own beside the import (PostgreSQL).

``billing_line``'s six indexes, maintained row by row, cost PostgreSQL twice the CPU and WAL of
the rows themselves on a 1 M-line month, and more as the indexes outgrow the server's buffers (3 M
lines took 1,061 s). So a period's lines are COPYed into *unit tables* with the same columns and
no index (schema :data:`UNIT_SCHEMA`, at most :data:`UNIT_TABLE_LINES` lines each); each table's
indexes are built once, by sorting, when it is full; and when the period's last batch is in they
all join ``billing_line`` by table inheritance in the import's transaction, which drops the tables
an earlier import of the period made. A reader sees the old lines until that transaction commits.

Three connections, each used by one thread at a time (:class:`UnitLoader`):

* the **import's** (the caller's transaction): the tables being replaced are found and, at the
  end, dropped; the new ones are attached (``ALTER TABLE … INHERIT``: SHARE UPDATE EXCLUSIVE on
  ``billing_line``, which readers do not wait for);
* the **writer's** (thread ``billing-copy``): each unit table is created and filled by
  ``COPY … (FREEZE)`` in a transaction of its own, committed when the table is full — *staged*:
  committed, but no child of ``billing_line``, so no query of the ledger reads it;
* the **indexer's** (thread ``billing-index``): a staged table's indexes are built and it is
  analyzed while the writer fills the next table and the import's thread checks the next batch.

A column every line of a unit table holds the same value in is a CHECK constraint on the table,
not a key of its indexes (:func:`unit_definitions`): ``source`` always (a table holds one source's
period), ``provider`` and ``source_file`` while every line has the same one (a CUR's are all
``aws``; a period's file is often one file, or one per table's worth of lines). An index on a
constant orders nothing: building ``(provider)``, ``(source, source_file)`` and ``UNIQUE (line_key,
source)`` took 1.5 s more of server CPU per 1 M CUR lines than ``(source_file)`` and ``UNIQUE
(line_key)`` (BENCHMARKS.md (m)), and ``(source_file)`` itself ~1.2 s. The planner skips a table
whose CHECK contradicts a query's ``source = …``, ``provider = …`` or ``source_file IN (…)``
(``constraint_exclusion``, for the children of ``billing_line`` by default and for the import's
table-by-table reads by :func:`store.excluding`), which no index did. The constant is also the
column's DEFAULT, and the COPY leaves the column out (:func:`copy_lines`).

On one connection those three kinds of work ran one after another: each 1 M lines' index builds
(~3.4 s) stopped the COPY, the duplicate probes and — through the bounded read-ahead — the parse
(BENCHMARKS.md). A staged table outlives an import that is killed before it ends: an import that
fails drops its own, and the next import of the same source and period drops any it finds
(:func:`UnitLoader.begin`), under a lock that keeps two imports of one period one after the other.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import polars as pl
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import IntegrityError

from connectors.billing import BILLING_SCHEMA
from service.billing import store
from service.ledger import bulk

log = logging.getLogger(__name__)

#: Schema of the unit tables (so tools listing ``public``, Alembic's drift check among them, see
#: the one logical table ``billing_line``).
UNIT_SCHEMA = "billing_line_parts"
#: ``maintenance_work_mem`` of a unit table's index builds: 1 M lines' keys sort in memory instead
#: of in temporary files (the server's default is 64 MB).
INDEX_BUILD_MEMORY = "256MB"
#: Lines of one unit table: a larger period goes into several, each indexed as soon as it is full
#: — while the next one fills — instead of every index of the whole month being built after its
#: last line, with nothing left to parse, and its keys sorted in more than ``INDEX_BUILD_MEMORY``.
UNIT_TABLE_LINES = 1_000_000
#: First half of the two-key advisory lock one import of a source's period holds ("GPLB"; the
#: run locks of service.runlocks use "GPLR").
_PERIOD_LOCK_NAMESPACE = 0x47504C42

_INDEX_DEFINITION = re.compile(
    r"CREATE (?P<unique>UNIQUE )?INDEX \S+ ON (?:ONLY )?(?:public\.)?billing_line (?P<using>USING .+)", re.S
)
#: "… USING btree (col, col)": an index on plain columns (no expression, no INCLUDE, no WHERE)
_PLAIN_KEY = re.compile(r"(?P<head>.* USING btree \()(?P<columns>[^()]+)\)", re.S)


@dataclass(frozen=True, slots=True)
class UnitTable:
    """One unit table: ``name`` schema-qualified and quoted, ``generation`` its number after the
    period's prefix (:func:`unit_prefix`)."""

    name: str
    oid: int
    generation: int


class _Constant:
    """Whether every line copied into the open table so far holds one value of ``column``, and
    which. While it does, the table says so twice: a CHECK constraint (the planner skips the table
    where a query asks for another value) and the column's DEFAULT (the COPY leaves the column out:
    the server fills it in). See :func:`copy_lines`."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.value: str | None = None  # the one value, while there is one
        self.mixed = False  # two values, or a line with none

    def change(self, lines: pl.DataFrame, first: bool) -> Change:
        """What the batch ``lines`` does to the table's CHECK and DEFAULT: "add" (the first batch,
        with one value), "drop" (a batch breaking it), or ``None``."""
        if self.mixed or lines.is_empty():
            return Change(self.column, None, self.value)
        column = lines.get_column(self.column)
        values = column.unique()
        single = column.null_count() == 0 and values.len() == 1
        if first:
            if single:
                self.value = str(values.item())
                return Change(self.column, "add", self.value)
            self.mixed = True
            return Change(self.column, None, None)
        if single and values.item() == self.value:
            return Change(self.column, None, self.value)
        self.mixed, self.value = True, None
        return Change(self.column, "drop", None)

    @property
    def constant(self) -> frozenset[str]:
        return frozenset({self.column}) if self.value is not None else frozenset()


@dataclass(frozen=True, slots=True)
class Change:
    """What one batch does to one of the open table's constant columns (:class:`_Constant`):
    ``change`` "add", "drop" or ``None``; ``value`` the column's one value while it holds (the
    batch then leaves the column out of its COPY)."""

    column: str
    change: str | None
    value: str | None


#: Columns that may be constant in a unit table besides ``source`` (always one): a CUR's lines all
#: name ``aws``, and a period's file is often one file — or one per unit table's worth of lines.
_MAYBE_CONSTANT = ("provider", "source_file")


def _constants() -> list[_Constant]:
    return [_Constant(c) for c in _MAYBE_CONSTANT]


def unit_prefix(source: str, period_start: dt.datetime) -> str:
    """The name every unit table of ``source``'s period starts with (a hash: names are ≤ 63 bytes)."""
    digest = hashlib.sha1(f"{source}|{period_start.isoformat()}".encode()).hexdigest()[:20]
    return f"bl_{digest}_"


def period_lock(source: str, period_start: dt.datetime) -> dict[str, int]:
    """The advisory lock (``space``, ``key``) an import of ``source``'s period holds until it ends."""
    return {
        "space": _PERIOD_LOCK_NAMESPACE,
        "key": int(unit_prefix(source, period_start)[3:11], 16) & 0x7FFFFFFF,
    }


class UnitLoader:
    """The unit tables of one import of ``source``'s ``period``; see the module docstring.

    The import's thread calls :meth:`copy` per batch (the COPY runs in the writer thread; one
    batch in flight at a time, so memory stays bounded), :meth:`keys` for hash hits, then
    :meth:`finish` in its transaction before committing — or :meth:`abort` — and :meth:`close`.
    """

    def __init__(
        self,
        engine: Engine,
        importing: Connection,
        source: str,
        period: tuple[dt.datetime, dt.datetime],
        replaced: tuple[tuple[int, str], ...],
        generation: int,
    ) -> None:
        self.source, self.period = source, period
        #: the tables of an earlier import of the period (``tableoid``, name): left out of the
        #: import's deletes and probes, dropped when the new ones join
        self.replaced = replaced
        self.importing = importing
        #: billing_line's indexes (read once: a migration does not run under an import)
        self.definitions = index_definitions(importing)
        #: the sequence of ``billing_line.id``: a batch's ids are drawn before its COPY (copy_lines)
        self._sequence = str(
            importing.execute(text("SELECT pg_get_serial_sequence('public.billing_line', 'id')")).scalar_one()
        )
        self.tables: list[UnitTable] = []  # every table of this import, the open one last
        self.lines = 0  # in the open table
        self._constants = _constants()  # of the open table
        self._staged: list[UnitTable] = []  # committed by the writer
        self._builds: list[Future[None]] = []
        self._pending: Future[int] | None = None
        self._writer_conn = engine.connect()
        self._indexer_conn: Connection | None = None
        self._engine = engine
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="billing-copy")
        self._indexer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="billing-index")
        try:
            self._writer_conn.begin()
            self.tables.append(self._create(generation))
        except BaseException:
            self.close()
            raise

    @classmethod
    def begin(
        cls, engine: Engine, importing: Connection, source: str, period: tuple[dt.datetime, dt.datetime]
    ) -> UnitLoader:
        """Start the import's unit tables; in ``importing``'s transaction: wait for (and then
        exclude) any other import of the same period, find the tables it replaces and drop the
        staged ones a killed import left."""
        prefix = unit_prefix(source, period[0])
        importing.execute(text("SELECT pg_advisory_xact_lock(:space, :key)"), period_lock(source, period[0]))
        _create_schema(engine)
        old = importing.execute(
            text(
                "SELECT c.oid, c.relname, EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid"
                " AND i.inhparent = CAST('public.billing_line' AS regclass)) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = :schema AND c.relkind = 'r' AND starts_with(c.relname, :prefix)"
                " ORDER BY c.relname"
            ),
            {"schema": UNIT_SCHEMA, "prefix": prefix},
        ).all()
        for _, name, attached in old:
            if not attached:  # staged by an import that never ended (killed): no reader sees it
                log.warning("billing %s: dropping unit table %s left by an unfinished import", source, name)
                importing.exec_driver_sql(f'DROP TABLE "{UNIT_SCHEMA}"."{name}"')
        generation = 1 + max((int(str(name).rsplit("_", 1)[1]) for _, name, _ in old), default=0)
        replaced = tuple((int(o), f'"{UNIT_SCHEMA}"."{n}"') for o, n, attached in old if attached)
        return cls(engine, importing, source, period, replaced, generation)

    @property
    def sparing(self) -> tuple[int, ...]:
        """What the import's deletes and duplicate probes of ``billing_line`` leave alone."""
        return tuple(oid for oid, _ in self.replaced)

    def replaced_lines(self) -> store.Deleted:
        """The lines of the tables this import replaces (count and charge span, for re-pricing)."""
        count, first, last = 0, None, None
        for _, name in self.replaced:
            n, lo, hi = self.importing.exec_driver_sql(
                f"SELECT count(*), min(charge_start), max(charge_end) FROM ONLY {name}"
            ).one()
            count += int(n)
            if lo is not None:
                first = lo if first is None else min(first, lo)
                last = hi if last is None else max(last, hi)
        return store.Deleted(count, store.aware(first), store.aware(last))

    # --- the import's thread -------------------------------------------------------------------

    def copy(self, lines: pl.DataFrame) -> None:
        """COPY ``lines`` (``BILLING_SCHEMA``) into the open table, in the writer thread; the batch
        before is waited for first (its error raised here), and a full table staged."""
        self.settle()
        if self.lines >= UNIT_TABLE_LINES:
            self._stage()
        changes = [c.change(lines, first=self.lines == 0) for c in self._constants]
        self._pending = self._writer.submit(
            copy_lines, self._writer_conn, self.tables[-1], lines, changes=changes, ids=self._sequence
        )
        self.lines += lines.height

    def settle(self) -> None:
        """Wait for the COPY in flight, if any (its error is raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def keys(self, candidates: pl.Series) -> pl.DataFrame:
        """Lines of this import's tables under ``candidates`` (``line_key``, ``source_file``,
        ``line_no``), read on the writer's connection after the COPYs before: only it sees the
        open table. The staged tables are read by their unique index once it is built."""
        if candidates.is_empty():
            return unit_keys(self._writer_conn, (), candidates)  # no query: nothing to wait for
        return self._writer.submit(unit_keys, self._writer_conn, self.tables, candidates).result()

    def finish(self) -> None:
        """The last table staged and indexed — its indexes built on the writer's and the indexer's
        connections at once —, every build waited for, then, in the import's transaction, the
        replaced tables dropped and the new ones made children of ``billing_line``."""
        self.settle()
        last = self.tables[-1]
        self._writer_conn.commit()
        self._staged.append(last)
        definitions = self._definitions()
        # two halves, about even in cost: the first to the writer, the rest and ANALYZE (which
        # waits for the writer's builds to commit: its lock conflicts with theirs) to the indexer
        mine = self._writer.submit(_committed, self._writer_conn, last, definitions[::2], analyze=False)
        self._builds.append(self._indexer.submit(self._build, last, definitions[1::2], workers=True))
        mine.result()
        for build in self._builds:
            build.result()
        for _, name in self.replaced:
            self.importing.exec_driver_sql(f"DROP TABLE {name}")
        for table in self.tables:
            self.importing.exec_driver_sql(f"ALTER TABLE {table.name} INHERIT public.billing_line")

    def abort(self) -> None:
        """Undo what the import staged: the open table goes with the writer's rollback; the staged
        ones are dropped (best effort: the next import of the period drops what is left)."""
        for future in (self._pending, *self._builds):
            if future is not None:
                future.exception()  # finished, whatever its outcome
        self._pending = None
        try:
            self._writer_conn.rollback()
            with self._engine.begin() as conn:
                for table in self._staged:
                    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table.name}")
        except Exception:  # noqa: BLE001  (the error that stopped the import is the one to report)
            log.exception("billing %s: dropping the unfinished import's unit tables failed", self.source)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._indexer.shutdown(wait=True)
        for conn in (self._writer_conn, self._indexer_conn):
            if conn is not None:
                conn.close()

    # --- internals -----------------------------------------------------------------------------

    def _stage(self) -> None:
        """Commit the full open table (the writer is idle), queue its index builds, open the next."""
        full = self.tables[-1]
        self._writer_conn.commit()
        self._staged.append(full)
        # beside the COPY, the parse and the checks, which keep the cores busy: the server's
        # parallel build workers would only take turns with them, and cost a merge
        self._builds.append(self._indexer.submit(self._build, full, self._definitions(), workers=False))
        self._writer_conn.begin()
        self.tables.append(self._create(full.generation + 1))
        self.lines = 0
        self._constants = _constants()

    def _definitions(self) -> list[str]:
        """The open table's index definitions: ``billing_line``'s, less its constant columns."""
        constant = frozenset({"source"}).union(*(c.constant for c in self._constants))
        return unit_definitions(self.definitions, constant)

    def _build(self, table: UnitTable, definitions: Sequence[str], *, workers: bool) -> None:
        """In the indexer thread: ``definitions`` built on ``table``, then ANALYZE, committed."""
        if self._indexer_conn is None:
            self._indexer_conn = self._engine.connect()
        _committed(self._indexer_conn, table, definitions, analyze=True, workers=workers)

    def _create(self, generation: int) -> UnitTable:
        """Create the next unit table on the writer's connection (in its open transaction)."""
        conn = self._writer_conn
        name = f'"{UNIT_SCHEMA}"."{unit_prefix(self.source, self.period[0])}{generation}"'
        # LIKE copies the columns, NOT NULLs, defaults and CHECKs; no index, no unique key yet.
        # The source is a constant: a CHECK, and the default the COPY leaves it to.
        source = _literal(self.source)
        conn.exec_driver_sql(
            f"CREATE TABLE {name} (LIKE public.billing_line INCLUDING DEFAULTS INCLUDING CONSTRAINTS,"
            f" CONSTRAINT unit_source CHECK (source = {source}))"
        )
        conn.exec_driver_sql(f"ALTER TABLE {name} ALTER COLUMN source SET DEFAULT {source}")
        start, end = (p.isoformat() for p in self.period)
        what = f"billing lines of {self.source!r}, billing period from {start} to {end}"
        conn.exec_driver_sql(f"COMMENT ON TABLE {name} IS {_literal(what)}")
        oid = int(conn.execute(text("SELECT CAST(to_regclass(:t) AS oid)"), {"t": name}).scalar_one())
        return UnitTable(name, oid, generation)


def _create_schema(engine: Engine) -> None:
    """:data:`UNIT_SCHEMA`, committed (the writer's connection creates tables in it). Two imports
    creating it at once: one of them gets a unique violation, and finds it there."""
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{UNIT_SCHEMA}"')
    except IntegrityError:
        with engine.connect() as conn:
            if conn.execute(text("SELECT to_regnamespace(:s)"), {"s": UNIT_SCHEMA}).scalar() is None:
                raise


def index_definitions(conn: Connection) -> list[str]:
    """``billing_line``'s indexes as ``[UNIQUE ]INDEX ON {table} USING …`` templates, costliest
    first (so alternate halves cost about the same): whatever migrations added comes along."""
    definitions = conn.execute(
        text("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'billing_line'")
    ).scalars()
    out = []
    for definition in definitions:
        # "CREATE [UNIQUE] INDEX name ON public.billing_line USING …": the same on a unit table
        # (named by PostgreSQL: index names are per schema)
        found = _INDEX_DEFINITION.fullmatch(str(definition))
        assert found is not None, f"an index definition as pg_get_indexdef writes it: {definition}"
        out.append(f"{found['unique'] or ''}INDEX ON {{table}} {found['using']}")
    # more columns and text keys sort longer; a stable order either way
    return sorted(out, key=lambda d: (-d.count(","), "UNIQUE" not in d, d))


def unit_definitions(definitions: Sequence[str], constant: frozenset[str]) -> list[str]:
    """``definitions`` (:func:`index_definitions`) for a unit table whose ``constant`` columns hold
    one value in all its lines: those columns left out of each index's key, and an index keyed by
    them alone left out. A unique key stays unique: among lines equal in the columns left out.
    One that would lose every column stays as it is."""
    out = []
    for definition in definitions:
        plain = _PLAIN_KEY.fullmatch(definition)
        if plain is None:
            out.append(definition)
            continue
        columns = [c.strip() for c in plain["columns"].split(",")]
        kept = [c for c in columns if c.split()[0].strip('"') not in constant]
        if not kept and definition.startswith("UNIQUE"):
            out.append(definition)
        elif kept:
            out.append(f"{plain['head']}{', '.join(kept)})")
    return out


def _literal(value: str) -> str:
    """``value`` as an SQL string literal (standard_conforming_strings, PostgreSQL's default)."""
    return "'" + value.replace("'", "''") + "'"


def _committed(
    conn: Connection, table: UnitTable, definitions: Sequence[str], *, analyze: bool, workers: bool = True
) -> None:
    """Build ``definitions`` (:func:`index_definitions`) on ``table`` (then ANALYZE it), in a
    transaction of its own on ``conn``, committed: another connection's ANALYZE waits for it.
    ``workers``: as the server's ``max_parallel_maintenance_workers`` allows; else none."""
    with conn.begin():
        conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
        if not workers:
            conn.exec_driver_sql("SET LOCAL max_parallel_maintenance_workers = 0")
        for definition in definitions:
            conn.exec_driver_sql("CREATE " + definition.format(table=table.name))
        if analyze:
            conn.exec_driver_sql(f"ANALYZE {table.name}")


def unit_keys(conn: Connection, tables: Sequence[UnitTable], keys: pl.Series) -> pl.DataFrame:
    """Lines of ``tables`` under ``keys``: ``line_key``, ``source_file``, ``line_no``. It is asked
    only about keys whose 64-bit hash an earlier batch of the import had
    (``service.billing.keyhashes``), which a CUR in parts almost never repeats; a table not yet
    indexed is read whole."""
    schema = {"line_key": pl.String, "source_file": pl.String, "line_no": pl.Int64}
    if keys.is_empty() or not tables:
        return pl.DataFrame(schema=schema)
    query = " UNION ALL ".join(
        f"SELECT line_key, source_file, line_no FROM ONLY {t.name} WHERE line_key = ANY(%(keys)s)"
        for t in tables
    )
    rows = conn.exec_driver_sql(query, {"keys": keys.to_list()}).all()
    return pl.DataFrame([tuple(r) for r in rows], schema=schema, orient="row")


def copy_lines(
    conn: Connection,
    table: UnitTable,
    lines: pl.DataFrame,
    *,
    changes: Sequence[Change] = (),
    ids: str,
) -> int:
    """COPY ``lines`` (``BILLING_SCHEMA``) into ``table``; the number copied. ``changes``: what the
    batch does to the table's constant columns (:class:`_Constant`) — a CHECK and DEFAULT added
    first (to an empty table: nothing to validate) or dropped (a line breaks it); a column that
    still holds one value is left out of the COPY, as ``source`` always is (the server fills in
    the DEFAULT: ~100 bytes a CUR line it neither receives nor parses). ``ids``: the sequence of
    ``billing_line.id``.

    **Sorted by resource and charge start, numbered in line order.** The batch's ids are drawn
    from the sequence first (:func:`draw_ids`) and given to its lines in file order, so paging by
    id still reads lines in import order; the lines are then written sorted by ``(resource_id,
    charge_start)``. The table's costliest index has that key, and a heap in runs of its order
    sorts in half the comparisons: building it took 3.2 → 1.4–1.6 s of server CPU per 1 M CUR lines,
    ``(charge_start)`` 1.2 → 1.0 s (BENCHMARKS.md (n)).

    In PostgreSQL's binary format (:func:`service.ledger.bulk.copy_binary_into`): the server reads
    each value's bytes instead of splitting text and parsing numbers and times (its COPY CPU
    per 1 M CUR lines ~9.3 → ~6.8 s), and nothing is formatted or escaped here.

    Frozen: a unit table is created in the writer's open transaction, so its rows can be written
    as frozen and its pages all-visible — a tenth less of the server's CPU for the COPY (3.58 →
    3.28 s per 1 M CUR lines), and the first reads after the commit neither set hint bits nor
    write the pages again, nor does a later vacuum freeze them. What FREEZE makes visible early is
    a staged table no query of the ledger reads."""
    actions = []
    for c in changes:
        if c.change == "add" and c.value is not None:
            value = _literal(c.value)
            actions += [
                f"ADD CONSTRAINT unit_{c.column} CHECK ({c.column} = {value})",
                f"ALTER COLUMN {c.column} SET DEFAULT {value}",
            ]
        elif c.change == "drop":
            actions += [f"DROP CONSTRAINT unit_{c.column}", f"ALTER COLUMN {c.column} DROP DEFAULT"]
    if actions:
        conn.exec_driver_sql(f"ALTER TABLE {table.name} {', '.join(actions)}")
    if lines.is_empty():
        return 0
    left_out = {"source"} | {c.column for c in changes if c.value is not None}
    frame = (
        lines.select([c for c in BILLING_SCHEMA if c not in left_out])
        .with_columns(pl.Series("id", draw_ids(conn, ids, lines.height)))
        .sort("resource_id", "charge_start", nulls_last=True)
    )
    bulk.copy_binary_into(conn, table.name, frame, freeze=True)
    return frame.height


def draw_ids(conn: Connection, sequence: str, n: int) -> np.ndarray:
    """``n`` values of ``sequence``, ascending: one range unless another session drew some meanwhile
    (then the values themselves, sent only in that case)."""
    low, high, values = conn.exec_driver_sql(
        "SELECT min(v), max(v), CASE WHEN max(v) - min(v) + 1 = count(*) THEN NULL"
        " ELSE array_agg(v ORDER BY v) END"
        f" FROM (SELECT nextval({_literal(sequence)}) AS v FROM generate_series(1, {int(n)})) AS drawn"
    ).one()
    if values is None:
        return np.arange(int(low), int(high) + 1, dtype=np.int64)
    return np.array(values, dtype=np.int64)
