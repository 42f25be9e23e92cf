"""PostgreSQL: a billing period's lines go into tables of their own (service.billing.unit_tables),
COPYed bare, indexed once full and joined to ``billing_line`` by inheritance when the period ends;
what readers and re-imports see is what they saw when every line went into ``billing_line``."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import numpy as np
import polars as pl
import pytest
from billing_fakes import OCT, SEP, FakeBillingConfig, FakeBillingSource, batch, usage
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from connectors.base import RetriableError
from connectors.billing import BillingBatch
from service.billing import ingest, store, unit_tables
from service.billing.ingest import BillingImportResult, ingest_billing
from service.billing.keyhashes import KeyHashes
from service.db import make_engine

NOW = dt.datetime(2025, 10, 3, tzinfo=dt.UTC)
AUG = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)


@pytest.fixture
def pg(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    with engine.begin() as conn:  # the session database is shared: start from no lines, no unit table
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{unit_tables.UNIT_SCHEMA}" CASCADE')
        conn.exec_driver_sql("TRUNCATE billing_line, billing_file, rejection RESTART IDENTITY CASCADE")
    yield engine
    engine.dispose()


def part(n: int, keys: list[str], period: tuple[dt.datetime, dt.datetime] = (SEP, OCT)) -> BillingBatch:
    day = period[0].replace(day=n)
    rows = [usage(k, charge_start=day, charge_end=day + dt.timedelta(days=1)) for k in keys]
    found = batch(f"s3://cur/{period[0]:%Y-%m}/a1/part-{n}.csv", rows, assembly_id="a1")
    found.period_start, found.period_end = period
    return found


def run(engine: Engine, *batches: BillingBatch, start: dt.datetime = SEP) -> BillingImportResult:
    src = FakeBillingSource(FakeBillingConfig(name="bills", type="fakebills"), batches=list(batches))  # type: ignore[arg-type]
    return ingest_billing(engine, "bills", src, start, OCT, clock=lambda: NOW, after_import=lambda e, p: None)


def children(conn: Connection) -> dict[str, int]:
    """Unit table name → its lines (children of billing_line only)."""
    names = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'public.billing_line'::regclass ORDER BY 1"
        )
    ).scalars()
    return {
        str(n): int(
            conn.exec_driver_sql(f'SELECT count(*) FROM "{unit_tables.UNIT_SCHEMA}"."{n}"').scalar_one()
        )
        for n in names
    }


def indexes(conn: Connection, table: str) -> list[str]:
    """``table``'s indexes as "[UNIQUE ]btree (columns)", sorted."""
    query = (
        "SELECT CASE WHEN indexdef LIKE 'CREATE UNIQUE%' THEN 'UNIQUE ' ELSE '' END"
        " || regexp_replace(indexdef, '^.* USING ', '') FROM pg_indexes WHERE tablename = :t"
    )
    return sorted(conn.execute(text(query), {"t": table}).scalars())


def unit_indexes(conn: Connection, constant: frozenset[str]) -> list[str]:
    """billing_line's indexes as a unit table with ``constant`` columns has them."""
    templates = unit_tables.unit_definitions(unit_tables.index_definitions(conn), constant)
    return sorted(d.replace("INDEX ON {table} USING ", "") for d in templates)


def checks(conn: Connection, table: str) -> dict[str, str]:
    """``table``'s CHECK constraints: name → definition."""
    rows = conn.execute(
        text(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'c'"
            " AND conrelid = to_regclass(:t)"
        ),
        {"t": f'"{unit_tables.UNIT_SCHEMA}"."{table}"'},
    ).all()
    return {str(n): str(d) for n, d in rows}


def keys(conn: Connection) -> list[tuple[str, str, int]]:
    rows = conn.exec_driver_sql("SELECT line_key, source_file, line_no FROM billing_line ORDER BY id")
    return [tuple(r) for r in rows]  # type: ignore[misc]


@pytest.mark.postgres
def test_a_period_lands_in_its_own_table_with_billing_lines_indexes(pg: Engine) -> None:
    result = run(pg, part(1, ["a", "b"]), part(2, ["c"]))
    assert (result.accepted, result.refused) == (3, 0)
    with pg.connect() as conn:
        tables = children(conn)
        assert list(tables.values()) == [3]
        (name,) = tables
        assert name == unit_tables.unit_prefix("bills", SEP) + "1"
        assert conn.exec_driver_sql("SELECT count(*) FROM ONLY billing_line").scalar_one() == 0
        # ids in import order, as paging by id expects
        assert keys(conn) == [
            ("a", "s3://cur/2025-09/a1/part-1.csv", 2),
            ("b", "s3://cur/2025-09/a1/part-1.csv", 3),
            ("c", "s3://cur/2025-09/a1/part-2.csv", 2),
        ]
        # billing_line's indexes less the columns every line of the table shares: its source and
        # (all lines "aws") its provider — CHECK constraints instead
        assert len(indexes(conn, "billing_line")) >= 6
        assert indexes(conn, name) == unit_indexes(conn, frozenset({"source", "provider"}))
        assert "UNIQUE btree (line_key)" in indexes(conn, name)
        assert checks(conn, name) == {
            "unit_provider": "CHECK (((provider)::text = 'aws'::text))",
            "unit_source": "CHECK (((source)::text = 'bills'::text))",
        }


@pytest.mark.postgres
def test_reimporting_a_period_replaces_its_table_and_changes_nothing(pg: Engine) -> None:
    run(pg, part(1, ["a", "b"]), part(2, ["c"]))
    with pg.connect() as conn:
        before = keys(conn)
    again = run(pg, part(1, ["a", "b"]), part(2, ["c"]))
    assert (again.accepted, again.refused, again.lines_replaced) == (3, 0, 3)
    with pg.connect() as conn:
        assert keys(conn) == before
        tables = children(conn)
    assert tables == {unit_tables.unit_prefix("bills", SEP) + "2": 3}


@pytest.mark.postgres
@pytest.mark.parametrize("same_hash", [False, True])
def test_a_large_period_fills_several_tables_each_indexed_when_full(
    pg: Engine, monkeypatch: pytest.MonkeyPatch, same_hash: bool
) -> None:
    """At UNIT_TABLE_LINES a unit table is indexed and joined, and the next one begun; a key of a
    full table repeated later is refused naming its first line (found by its hash, then by its
    text — with every key given one hash too), and a re-import replaces all the tables."""
    monkeypatch.setattr(unit_tables, "UNIT_TABLE_LINES", 2)
    if same_hash:
        monkeypatch.setattr(KeyHashes, "of", staticmethod(lambda keys: np.zeros(len(keys), dtype=np.uint64)))
    batches = [part(1, ["a", "b"]), part(2, ["c"]), part(3, ["d", "e"]), part(4, ["f", "b"])]
    result = run(pg, *batches)
    assert (result.accepted, result.refused) == (6, 1)
    prefix = unit_tables.unit_prefix("bills", SEP)
    with pg.connect() as conn:
        reason = conn.exec_driver_sql("SELECT reason FROM rejection").scalar_one()
        assert reason == "duplicated line item id 'b': first on line 3 of s3://cur/2025-09/a1/part-1.csv"
        assert children(conn) == {prefix + "1": 2, prefix + "2": 3, prefix + "3": 1}
        assert conn.exec_driver_sql("SELECT count(*) FROM ONLY billing_line").scalar_one() == 0
        before = keys(conn)
        assert [k for k, _, _ in before] == ["a", "b", "c", "d", "e", "f"]  # ids in import order
        # the first and last tables hold one file's lines each: their file is a CHECK, no index
        one_file = unit_indexes(conn, frozenset({"source", "provider", "source_file"}))
        assert indexes(conn, prefix + "1") == indexes(conn, prefix + "3") == one_file
        assert indexes(conn, prefix + "2") == unit_indexes(conn, frozenset({"source", "provider"}))
        assert "btree (source_file)" in indexes(conn, prefix + "2")
        assert checks(conn, prefix + "3")["unit_source_file"] == (
            "CHECK (((source_file)::text = 's3://cur/2025-09/a1/part-4.csv'::text))"
        )
        assert "unit_source_file" not in checks(conn, prefix + "2")
    again = run(pg, *batches)
    assert (again.accepted, again.refused, again.lines_replaced) == (6, 1, 6)
    with pg.connect() as conn:
        assert keys(conn) == before
        assert children(conn) == {prefix + "4": 2, prefix + "5": 3, prefix + "6": 1}


@pytest.mark.postgres
def test_an_interrupted_period_with_full_tables_leaves_the_old_ones(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unit_tables, "UNIT_TABLE_LINES", 1)
    run(pg, part(1, ["a"]), part(2, ["b"]))
    prefix = unit_tables.unit_prefix("bills", SEP)

    class Failing:
        def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
            yield part(1, ["new1"])
            yield part(2, ["new2"])
            yield part(3, ["new3"])
            raise RetriableError("connection reset")

    with pytest.raises(RetriableError):
        ingest_billing(pg, "bills", Failing(), SEP, OCT, clock=lambda: NOW, after_import=lambda e, p: None)  # type: ignore[arg-type]
    with pg.connect() as conn:
        assert children(conn) == {prefix + "1": 1, prefix + "2": 1}
        assert [k for k, _, _ in keys(conn)] == ["a", "b"]


@pytest.mark.postgres
def test_a_key_stored_in_another_periods_table_is_refused_as_already_imported(pg: Engine) -> None:
    run(pg, part(1, ["a", "b"]))
    result = run(pg, part(3, ["b", "x"], (AUG, SEP)), start=AUG)
    assert (result.accepted, result.refused) == (1, 1)
    with pg.connect() as conn:
        reason = conn.exec_driver_sql("SELECT reason FROM rejection").scalar_one()
        assert reason == (
            "duplicated line item id 'b': already imported from line 3 of s3://cur/2025-09/a1/part-1.csv"
        )
        assert sorted(children(conn).values()) == [1, 2]


@pytest.mark.postgres
def test_hash_hits_are_checked_by_their_text(pg: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key given the same hash: each is a candidate, looked up exactly in the unit table, so
    distinct keys all land and only the true repeat across parts is refused, naming the first."""
    monkeypatch.setattr(KeyHashes, "of", staticmethod(lambda keys: np.zeros(len(keys), dtype=np.uint64)))
    result = run(pg, part(1, ["a", "b"]), part(2, ["c", "b"]), part(3, ["d"]))
    assert (result.accepted, result.refused) == (4, 1)
    with pg.connect() as conn:
        reason = conn.exec_driver_sql("SELECT reason FROM rejection").scalar_one()
        assert reason == "duplicated line item id 'b': first on line 3 of s3://cur/2025-09/a1/part-1.csv"
        assert [k for k, _, _ in keys(conn)] == ["a", "b", "c", "d"]


@pytest.mark.postgres
def test_an_interrupted_period_leaves_the_old_table_and_no_new_one(pg: Engine) -> None:
    run(pg, part(1, ["a"]))

    class Failing:
        def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
            yield part(1, ["new"])
            raise RetriableError("connection reset")

    with pytest.raises(RetriableError):
        ingest_billing(pg, "bills", Failing(), SEP, OCT, clock=lambda: NOW, after_import=lambda e, p: None)  # type: ignore[arg-type]
    with pg.connect() as conn:
        assert children(conn) == {unit_tables.unit_prefix("bills", SEP) + "1": 1}
        assert [k for k, _, _ in keys(conn)] == ["a"]


@pytest.mark.postgres
def test_a_period_met_again_in_the_run_and_files_without_one_go_to_billing_line(pg: Engine) -> None:
    """The unit table is for a period's first run of batches; a period met again later appends to
    billing_line itself (its table was already committed), as do files without a period."""
    no_period = batch("gcp/2025-09-03.jsonl", [usage("g1")], period=False)
    result = run(pg, part(1, ["a"]), part(4, ["x"], (AUG, SEP)), part(2, ["b"]), no_period, start=AUG)
    assert (result.accepted, result.refused) == (4, 0)
    with pg.connect() as conn:
        only = (
            conn.exec_driver_sql("SELECT line_key FROM ONLY billing_line ORDER BY line_key").scalars().all()
        )
        assert only == ["b", "g1"]
        assert sorted(children(conn).values()) == [1, 1]


def test_key_hashes_find_exactly_the_keys_added_before() -> None:
    hashes = KeyHashes()
    seen: set[str] = set()
    rng = np.random.default_rng(7)
    for _ in range(40):
        batch_keys = pl.Series([f"k{i}" for i in rng.integers(0, 3000, size=int(rng.integers(0, 200)))])
        got = hashes.seen(KeyHashes.of(batch_keys))
        assert got.tolist() == [k in seen for k in batch_keys.to_list()]
        hashes.add(KeyHashes.of(batch_keys))
        seen.update(batch_keys.to_list())
    assert hashes.count >= len(seen)


def test_sqlite_keeps_every_line_in_billing_line(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        result = run(engine, part(1, ["a", "b"]), part(2, ["c", "b"]))
        assert (result.accepted, result.refused) == (3, 1)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM billing_line").scalar_one() == 3
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_periods_import_still_deletes_its_lines_from_other_tables(pg: Engine) -> None:
    """September replaces every line charged in September: also one the August import stored in
    August's table (charged on Sep 1, within a day of its period), and a September file's lines
    left in billing_line itself by an import without a period — table by table, the replaced
    September table spared (it goes whole)."""
    straggler = batch(
        "s3://cur/2025-08/a1/part-9.csv",
        [usage("aug-late", charge_start=SEP, charge_end=SEP + dt.timedelta(hours=1))],
    )
    straggler.period_start, straggler.period_end = AUG, SEP
    loose = batch("loose.csv", [usage("loose")], period=False)
    run(pg, part(1, ["a"]), straggler, loose, start=AUG)
    with pg.connect() as conn:
        assert sorted(k for k, _, _ in keys(conn)) == ["a", "aug-late", "loose"]
    again = run(pg, part(1, ["a"]))
    assert (again.accepted, again.refused, again.lines_replaced) == (1, 0, 3)
    with pg.connect() as conn:
        assert [k for k, _, _ in keys(conn)] == ["a"]
        assert sorted(children(conn).values()) == [0, 1]  # August's table, now empty; September's


def _visibility(conn: Connection, name: str) -> tuple[int, int]:
    """(pages, all-visible pages) of unit table ``name`` as its ANALYZE recorded them."""
    found = conn.execute(
        text("SELECT relpages, relallvisible FROM pg_class WHERE oid = to_regclass(:t)"),
        {"t": f'"{unit_tables.UNIT_SCHEMA}"."{name}"'},
    ).one()
    return int(found[0]), int(found[1])


@pytest.mark.postgres
def test_a_unit_tables_lines_are_copied_frozen(pg: Engine) -> None:
    """COPY … (FREEZE): the new table's pages are all-visible as loaded (a plain COPY leaves none
    so until a vacuum), with the same lines."""
    keys_ = [f"k{i:05d}" for i in range(3000)]
    result = run(pg, part(1, keys_[:1500]), part(2, keys_[1500:]))
    assert (result.accepted, result.refused) == (3000, 0)
    with pg.connect() as conn:
        (name,) = children(conn)
        pages, visible = _visibility(conn, name)
        assert pages > 1 and visible == pages
        assert [k for k, _, _ in keys(conn)] == keys_


@pytest.mark.postgres
def test_repeatable_read_imports_frozen_too(pg_url: str, pg: Engine) -> None:
    """COPY FREEZE is refused after "prior transaction activity" (a second registered snapshot, an
    open portal), not for the one snapshot a REPEATABLE READ transaction holds."""
    engine = make_engine(pg_url, isolation_level="REPEATABLE READ")
    try:
        result = run(engine, part(1, ["a", "b"]), part(2, ["c"]))
        assert (result.accepted, result.refused) == (3, 0)
        with engine.connect() as conn:
            (name,) = children(conn)
            pages, visible = _visibility(conn, name)
            assert pages >= 1 and visible == pages
            assert [k for k, _, _ in keys(conn)] == ["a", "b", "c"]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_batch_is_copied_in_the_writer_thread_while_the_next_one_is_checked(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The COPY of a batch runs in the writer thread; the import's thread goes on with the next
    batch meanwhile — here it fills that batch's GPU counts while the first COPY is still held open
    — and the lines land in order, as a synchronous COPY left them."""
    copy_lines, fill_gpus = unit_tables.copy_lines, ingest.fill_gpus
    next_batch_filled = threading.Event()
    copies: list[tuple[str, bool]] = []

    def held_copy(*args: object, **kwargs: object) -> int:
        # the first COPY waits (bounded) until the next batch is being worked on
        overlapped = next_batch_filled.wait(timeout=5) if not copies else True
        copies.append((threading.current_thread().name, overlapped))
        return copy_lines(*args, **kwargs)  # type: ignore[arg-type]

    def counting_fill(*args: object, **kwargs: object) -> pl.DataFrame:
        if copies or fill_gpus_calls:
            next_batch_filled.set()
        fill_gpus_calls.append(1)
        return fill_gpus(*args, **kwargs)  # type: ignore[arg-type]

    fill_gpus_calls: list[int] = []
    monkeypatch.setattr(unit_tables, "copy_lines", held_copy)
    monkeypatch.setattr(ingest, "fill_gpus", counting_fill)
    result = run(pg, part(1, ["a", "b"]), part(2, ["c"]), part(3, ["d"]))
    assert (result.accepted, result.refused) == (4, 0)
    assert [overlapped for _, overlapped in copies] == [True, True, True]
    assert all(name.startswith("billing-copy") for name, _ in copies)
    with pg.connect() as conn:
        assert [k for k, _, _ in keys(conn)] == ["a", "b", "c", "d"]


@pytest.mark.postgres
def test_a_copy_failing_in_the_writer_thread_rolls_the_period_back(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error of a COPY in flight is raised in the import (at the next use of the connection, or
    the period's commit): the period is rolled back, its old lines and table stay."""
    run(pg, part(1, ["a"]))
    copy_lines = unit_tables.copy_lines
    calls: list[int] = []

    def failing_second(*args: object, **kwargs: object) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the server went away")
        return copy_lines(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(unit_tables, "copy_lines", failing_second)
    for batches in ([part(1, ["n1"]), part(2, ["n2"]), part(3, ["n3"])], [part(1, ["n1"]), part(2, ["n2"])]):
        calls.clear()
        with pytest.raises(RuntimeError, match="the server went away"):
            run(pg, *batches)
        with pg.connect() as conn:
            assert children(conn) == {unit_tables.unit_prefix("bills", SEP) + "1": 1}
            assert [k for k, _, _ in keys(conn)] == ["a"]
            assert conn.exec_driver_sql("SELECT count(*) FROM rejection").scalar_one() == 0


def schema_tables(conn: Connection) -> list[str]:
    """Every table in the unit schema, children of billing_line or not."""
    return sorted(
        conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": unit_tables.UNIT_SCHEMA}
        ).scalars()
    )


@pytest.mark.postgres
def test_a_full_tables_indexes_are_built_beside_the_next_tables_copy(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full table is staged (committed, no child of billing_line) and indexed on a connection of
    its own, in thread billing-index, while the writer goes on COPYing the next table: here the
    first build waits (bounded) until a later COPY has run, which on one connection could not be."""
    monkeypatch.setattr(unit_tables, "UNIT_TABLE_LINES", 2)
    committed, copy_lines = unit_tables._committed, unit_tables.copy_lines
    later_copy = threading.Event()
    builds: list[tuple[str, bool, bool]] = []
    copied: list[str] = []

    def held_build(conn: Connection, table: unit_tables.UnitTable, *args: object, **kw: bool) -> None:
        overlapped = later_copy.wait(timeout=5) if not builds else True
        builds.append((threading.current_thread().name, overlapped, kw.get("workers", True)))
        committed(conn, table, *args, **kw)  # type: ignore[arg-type]

    def noting_copy(conn: Connection, table: unit_tables.UnitTable, *args: object, **kwargs: object) -> int:
        copied.append(table.name)
        if len(set(copied)) > 1:
            later_copy.set()
        return copy_lines(conn, table, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(unit_tables, "_committed", held_build)
    monkeypatch.setattr(unit_tables, "copy_lines", noting_copy)
    result = run(pg, part(1, ["a", "b"]), part(2, ["c"]), part(3, ["d"]))
    assert (result.accepted, result.refused) == (4, 0)
    # the staged table without the server's parallel workers (the cores are busy), the last with
    assert builds[0] == ("billing-index_0", True, False)
    assert sorted(builds[1:]) == [("billing-copy_0", True, True), ("billing-index_0", True, True)]
    prefix = unit_tables.unit_prefix("bills", SEP)
    with pg.connect() as conn:
        assert children(conn) == {prefix + "1": 2, prefix + "2": 2}
        assert schema_tables(conn) == [prefix + "1", prefix + "2"]
        assert [k for k, _, _ in keys(conn)] == ["a", "b", "c", "d"]


@pytest.mark.postgres
def test_an_interrupted_import_drops_the_tables_it_staged(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unit_tables, "UNIT_TABLE_LINES", 1)
    run(pg, part(1, ["a"]))
    prefix = unit_tables.unit_prefix("bills", SEP)

    class Failing:
        def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
            yield from (part(n, [f"new{n}"]) for n in (1, 2, 3, 4))
            raise RetriableError("connection reset")

    with pytest.raises(RetriableError):
        ingest_billing(pg, "bills", Failing(), SEP, OCT, clock=lambda: NOW, after_import=lambda e, p: None)  # type: ignore[arg-type]
    with pg.connect() as conn:
        assert schema_tables(conn) == [prefix + "1"]
        assert children(conn) == {prefix + "1": 1}


@pytest.mark.postgres
def test_tables_a_killed_import_staged_are_dropped_by_the_next_import_of_the_period(pg: Engine) -> None:
    """A process killed mid-import leaves its committed (staged) tables: no reader sees them, and
    the next import of the same source and period drops them; another period's are left alone."""
    run(pg, part(1, ["a"]))
    prefix = unit_tables.unit_prefix("bills", SEP)
    other = unit_tables.unit_prefix("bills", AUG)
    schema = unit_tables.UNIT_SCHEMA
    with pg.begin() as conn:
        for name in (prefix + "2", prefix + "3", other + "7"):  # as a killed import leaves them
            conn.exec_driver_sql(f'CREATE TABLE "{schema}"."{name}" (LIKE public.billing_line)')
        conn.exec_driver_sql(f'INSERT INTO "{schema}"."{prefix}2" SELECT * FROM billing_line')
    with pg.connect() as conn:
        assert [k for k, _, _ in keys(conn)] == ["a"]  # readers never saw them
    result = run(pg, part(1, ["a", "b"]))
    assert (result.accepted, result.refused, result.lines_replaced) == (2, 0, 1)
    with pg.connect() as conn:
        assert children(conn) == {prefix + "4": 2}
        assert schema_tables(conn) == sorted([prefix + "4", other + "7"])


@pytest.mark.postgres
def test_two_imports_of_one_period_run_one_after_the_other(pg: Engine) -> None:
    """An import of a period waits for the period's lock, which another import holds until it
    ends (here a connection holding it), then replaces what that one stored."""
    lock = unit_tables.period_lock("bills", SEP)
    holder = pg.connect()
    holder.execute(text("SELECT pg_advisory_xact_lock(:space, :key)"), lock)
    done: list[BillingImportResult] = []
    importing = threading.Thread(target=lambda: done.append(run(pg, part(1, ["a"]))))
    importing.start()
    importing.join(timeout=1.0)
    assert importing.is_alive() and not done  # waiting for the lock
    holder.rollback()
    holder.close()
    importing.join(timeout=30)
    assert [(r.accepted, r.refused) for r in done] == [(1, 0)]


def test_unit_definitions_leave_a_tables_constant_columns_out_of_its_keys() -> None:
    """On a table where every line has one source (and one provider), an index keyed by them alone
    orders nothing and a key's column of them tells no two lines apart."""
    definitions = [
        "UNIQUE INDEX ON {table} USING btree (line_key, source)",
        "INDEX ON {table} USING btree (source, source_file)",
        "INDEX ON {table} USING btree (provider)",
        'INDEX ON {table} USING btree (resource_id COLLATE "C", charge_start)',
        'UNIQUE INDEX ON {table} USING btree ("source")',  # unique over one value: kept as it is
        "INDEX ON {table} USING btree (lower((source)::text))",  # an expression: kept
        "INDEX ON {table} USING btree (source) WHERE (provider IS NULL)",  # partial: kept
    ]
    assert unit_tables.unit_definitions(definitions, frozenset({"source"})) == [
        "UNIQUE INDEX ON {table} USING btree (line_key)",
        "INDEX ON {table} USING btree (source_file)",
        "INDEX ON {table} USING btree (provider)",
        'INDEX ON {table} USING btree (resource_id COLLATE "C", charge_start)',
        'UNIQUE INDEX ON {table} USING btree ("source")',
        "INDEX ON {table} USING btree (lower((source)::text))",
        "INDEX ON {table} USING btree (source) WHERE (provider IS NULL)",
    ]
    with_provider = unit_tables.unit_definitions(definitions, frozenset({"source", "provider"}))
    assert "INDEX ON {table} USING btree (provider)" not in with_provider
    assert len(with_provider) == len(definitions) - 1


def test_a_constant_column_holds_only_while_every_line_has_the_same_value() -> None:
    def frame(*providers: str | None) -> pl.DataFrame:
        return pl.DataFrame({"provider": list(providers)}, schema={"provider": pl.String})

    def change(kind: str | None, value: str | None) -> unit_tables.Change:
        return unit_tables.Change("provider", kind, value)

    one = unit_tables._Constant("provider")
    assert one.change(frame("aws", "aws"), first=True) == change("add", "aws")
    assert one.change(frame("aws"), first=False) == change(None, "aws") and one.constant == {"provider"}
    assert one.change(frame("aws", None), first=False) == change("drop", None)  # a CHECK passes NULL
    assert one.change(frame("aws"), first=False) == change(None, None) and one.constant == frozenset()
    none = unit_tables._Constant("provider")
    assert none.change(frame(None), first=True) == change(None, None) and none.mixed
    empty = unit_tables._Constant("provider")
    assert empty.change(frame(), first=True) == change(None, None) and not empty.mixed


def provider_batch(n: int, providers: list[str | None]) -> BillingBatch:
    day = SEP.replace(day=n)
    rows = [
        usage(f"{n}-{i}", provider=p, charge_start=day, charge_end=day + dt.timedelta(days=1))
        for i, p in enumerate(providers)
    ]
    found = batch(f"s3://cur/2025-09/a1/part-{n}.csv", rows, assembly_id="a1")
    found.period_start, found.period_end = SEP, OCT
    return found


@pytest.mark.postgres
@pytest.mark.parametrize(
    "batches",
    [
        [["aws", "aws"], ["gcp"]],  # a later batch breaks the first one's provider: CHECK dropped
        [["aws", "gcp"], ["aws"]],  # two in the first batch: never added
        [["gcp"], ["gcp", "azure"]],
    ],
)
def test_a_table_of_several_providers_keeps_the_provider_index(
    pg: Engine, batches: list[list[str | None]]
) -> None:
    result = run(pg, *(provider_batch(n + 1, p) for n, p in enumerate(batches)))
    assert result.accepted == sum(map(len, batches))
    with pg.connect() as conn:
        (name,) = children(conn)
        assert checks(conn, name) == {"unit_source": "CHECK (((source)::text = 'bills'::text))"}
        assert indexes(conn, name) == unit_indexes(conn, frozenset({"source"}))
        assert "btree (provider)" in indexes(conn, name)


@pytest.mark.postgres
def test_another_sources_or_providers_table_is_not_read(pg: Engine) -> None:
    """The unit table's CHECKs let the planner skip it: through billing_line for another provider
    (the server's default), and in the import's table-by-table reads for another source
    (store.excluding) — where no index on source is left to find nothing quickly."""
    run(pg, part(1, ["a", "b"]))
    with pg.connect() as conn:
        (name,) = children(conn)
        table = f'"{unit_tables.UNIT_SCHEMA}"."{name}"'

        def plan(query: str) -> str:
            return "\n".join(conn.exec_driver_sql("EXPLAIN " + query).scalars())

        assert table.split(".")[1].strip('"') not in plan("SELECT * FROM billing_line WHERE provider = 'gcp'")
        assert name in plan("SELECT * FROM billing_line WHERE provider = 'aws'")
        other = f"SELECT count(*) FROM ONLY {table} WHERE source = 'other' AND charge_start >= '2025-09-01'"
        assert "Scan" in plan(other)  # without: the month is read to find nothing
        with store.excluding(conn):
            assert "One-Time Filter: false" in plan(other) and "Scan" not in plan(other)
            assert "Scan" in plan(other.replace("'other'", "'bills'"))
        assert "Scan" in plan(other)  # the setting is back as it was
        # and the import of another source's September deletes nothing of it
        deleted = store.delete_lines(conn, "other", period=(SEP, OCT), sparing=(0,))
        assert deleted.lines == 0
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one() == 2


@pytest.mark.postgres
def test_a_statement_failing_under_exclusion_raises_its_own_error(pg: Engine) -> None:
    with pg.connect() as conn:
        with pytest.raises(DBAPIError, match="division by zero"), store.excluding(conn):
            conn.exec_driver_sql("SELECT 1/0")
        conn.rollback()  # the transaction's end puts the setting back
        setting = conn.exec_driver_sql("SELECT current_setting('constraint_exclusion')").scalar_one()
        assert setting == "partition"


@pytest.mark.postgres
def test_lines_are_written_by_resource_and_time_but_numbered_in_line_order(pg: Engine) -> None:
    """A batch's ids are drawn first and given in line order (paging by id reads import order);
    its rows are then written sorted by (resource_id, charge_start), the costliest index's key."""
    day = SEP.replace(day=3)
    spec = [("k1", "i-b", 5), ("k2", "i-a", 7), ("k3", None, 1), ("k4", "i-a", 2), ("k5", "i-b", 1)]
    rows = [
        usage(
            k,
            resource_id=r,
            charge_start=day + dt.timedelta(hours=h),
            charge_end=day + dt.timedelta(hours=h + 1),
        )
        for k, r, h in spec
    ]
    found = batch("s3://cur/2025-09/a1/part-1.csv", rows, assembly_id="a1")
    found.period_start, found.period_end = SEP, OCT
    assert run(pg, found).accepted == 5
    with pg.connect() as conn:
        (name,) = children(conn)
        table = f'"{unit_tables.UNIT_SCHEMA}"."{name}"'
        assert [k for k, _, _ in keys(conn)] == ["k1", "k2", "k3", "k4", "k5"]
        written = conn.exec_driver_sql(f"SELECT line_key FROM ONLY {table} ORDER BY ctid").scalars().all()
        assert written == ["k4", "k2", "k5", "k1", "k3"]  # i-a 02:00, 07:00; i-b 01:00, 05:00; none
        ids = conn.exec_driver_sql(f"SELECT id FROM ONLY {table} ORDER BY id").scalars().all()
        assert ids == list(range(ids[0], ids[0] + 5))
        # the columns the COPY left out hold the table's one value (their DEFAULTs)
        stored = conn.exec_driver_sql(
            f"SELECT DISTINCT source, source_file, provider FROM ONLY {table}"
        ).all()
        assert [tuple(r) for r in stored] == [("bills", "s3://cur/2025-09/a1/part-1.csv", "aws")]

        def plan(query: str) -> str:
            return "\n".join(conn.exec_driver_sql("EXPLAIN " + query).scalars())

        # the file's CHECK lets the planner skip the table for another file, as the index found nothing
        assert name not in plan(
            "SELECT * FROM billing_line WHERE source_file = 's3://cur/2025-09/a1/part-2.csv'"
        )
        assert name in plan("SELECT * FROM billing_line WHERE source_file = 's3://cur/2025-09/a1/part-1.csv'")
        # and a re-import's per-file delete of another file (table by table) deletes nothing of it
        other = store.delete_lines(conn, "bills", files=["s3://cur/2025-09/a1/part-2.csv"], sparing=(0,))
        mine = store.delete_lines(conn, "bills", files=["s3://cur/2025-09/a1/part-1.csv"], sparing=(0,))
        assert (other.lines, mine.lines) == (0, 5)
        conn.rollback()


@pytest.mark.postgres
def test_ids_drawn_are_the_sequences_own_values(pg: Engine) -> None:
    """One range when nobody else drew meanwhile, else the values themselves (a sequence stepping
    by 3 stands in for another session drawing between ours)."""
    with pg.connect() as conn:
        conn.exec_driver_sql("CREATE TEMPORARY SEQUENCE drawn_plain")
        conn.exec_driver_sql("CREATE TEMPORARY SEQUENCE drawn_gaps INCREMENT BY 3")
        assert unit_tables.draw_ids(conn, "drawn_plain", 4).tolist() == [1, 2, 3, 4]
        assert unit_tables.draw_ids(conn, "drawn_plain", 2).tolist() == [5, 6]
        assert unit_tables.draw_ids(conn, "drawn_gaps", 4).tolist() == [1, 4, 7, 10]


@pytest.mark.postgres
def test_a_file_name_with_quotes_is_a_literal_in_its_check_and_default(pg: Engine) -> None:
    """The file's name goes into the table's CHECK and DEFAULT as SQL text: quoted, never run."""
    name = "s3://cur/2025-09/o'brien'); DROP TABLE billing_file; --/part-1.csv"
    day = SEP.replace(day=2)
    found = batch(
        name, [usage("q1", charge_start=day, charge_end=day + dt.timedelta(days=1))], assembly_id="a1"
    )
    found.period_start, found.period_end = SEP, OCT
    assert run(pg, found).accepted == 1
    with pg.connect() as conn:
        (table,) = children(conn)
        assert checks(conn, table)["unit_source_file"] == (
            "CHECK (((source_file)::text = "
            "'s3://cur/2025-09/o''brien''); DROP TABLE billing_file; --/part-1.csv'::text))"
        )
        assert keys(conn) == [("q1", name, 2)]
        assert conn.exec_driver_sql("SELECT count(*) FROM billing_file").scalar_one() == 1
