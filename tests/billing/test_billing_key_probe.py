"""store.existing_keys: a batch's line keys looked up in billing_line through a temporary table
(COPY on PostgreSQL, executemany on SQLite), one join per batch, on both databases."""

from __future__ import annotations

import polars as pl
import pytest
from billing_fakes import lines, usage
from sqlalchemy import Connection, Engine, event

from service.billing import store

# Keys a CSV-fed COPY must carry unchanged: separators, quotes, a newline, an empty string, a NUL-free
# backslash (COPY's text format would read it as an escape), non-ASCII.
ODD = ["a,b", 'say "hi"', "two\nlines", "", "back\\slash", "é€", "  spaced  ", "NULL", "\\N"]


def _store(engine: Engine, source: str, file: str, keys: list[str]) -> None:
    with engine.begin() as conn:
        store.insert_lines(conn, source, lines(file, [usage(k) for k in keys]))


def test_stored_keys_are_found_with_their_file_and_line(engine: Engine) -> None:
    _store(engine, "bills", "f1.csv", ["k1", "k2", *ODD])
    _store(engine, "other", "g.csv", ["k3"])  # another source's key is no duplicate
    with engine.connect() as conn:
        found = store.existing_keys(conn, "bills", ["k2", "k3", "missing", *ODD, "k2"])
    got = sorted(found.iter_rows())
    want = sorted([("k2", "f1.csv", 3), *((k, "f1.csv", 4 + i) for i, k in enumerate(ODD))])
    assert got == want
    assert found.schema == pl.Schema({"line_key": pl.String, "source_file": pl.String, "line_no": pl.Int64})


def test_lines_inserted_earlier_in_the_open_transaction_are_found_and_probes_do_not_mix(
    engine: Engine,
) -> None:
    with engine.connect() as conn:
        conn.begin()
        store.insert_lines(conn, "bills", lines("a.csv", [usage("k1"), usage("k2")]))
        first = store.existing_keys(conn, "bills", ["k1", "x"])
        store.insert_lines(conn, "bills", lines("b.csv", [usage("k3")]))
        # the second probe holds only its own keys: k1 (probed before) is not reported again
        second = store.existing_keys(conn, "bills", ["k3", "k2"])
        conn.commit()
        # a new transaction: the probe table of the committed one is gone, a new one works
        third = store.existing_keys(conn, "bills", ["k1"])
        conn.rollback()
    assert sorted(first.iter_rows()) == [("k1", "a.csv", 2)]
    assert sorted(second.iter_rows()) == [("k2", "a.csv", 3), ("k3", "b.csv", 2)]
    assert sorted(third.iter_rows()) == [("k1", "a.csv", 2)]


def test_no_keys_is_no_query(engine: Engine) -> None:
    statements: list[str] = []
    with engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", lambda *a: statements.append(a[2]))
        found = store.existing_keys(conn, "bills", [])
    assert found.height == 0 and statements == []


def _probe_plan(conn: Connection) -> str:
    """PostgreSQL's plan of the probe's join (the probe table still in this transaction)."""
    explain = (
        "EXPLAIN SELECT l.line_key FROM billing_key_probe AS k JOIN billing_line AS l"
        " ON l.line_key = k.line_key WHERE l.source = 'bills'"
    )
    return "\n".join(r[0] for r in conn.exec_driver_sql(explain))


@pytest.mark.postgres
def test_postgresql_probe_is_one_join_on_the_unique_index(pg_url: str) -> None:
    """PostgreSQL: the keys are COPYed (no key is bound as a parameter) and the join looks each
    probe key up in the (source, line_key) index, never hashing all of billing_line."""
    from service.db import local_settings, make_engine

    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:  # the session database is shared: start from no lines
            conn.exec_driver_sql("TRUNCATE billing_line, billing_file RESTART IDENTITY CASCADE")
        _store(engine, "bills", "f.csv", [f"k{i}" for i in range(3000)])
        statements: list[tuple[str, object]] = []
        with engine.connect() as conn:
            event.listen(conn, "before_cursor_execute", lambda *a: statements.append((a[2], a[3])))
            found = store.existing_keys(conn, "bills", [f"k{i}" for i in range(0, 6000, 2)])
            with local_settings(conn, **store.PROBE_SETTINGS):  # as the probe's join
                plan = _probe_plan(conn)
            conn.rollback()
        assert found.height == 1500
        assert not any("k2" in str(params) for _, params in statements)  # keys travel by COPY
        assert [s for s, _ in statements if s.lstrip().startswith("SELECT")] != []
        assert "Index" in plan and "Seq Scan on billing_line" not in plan, plan
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_probe_looks_each_key_up_even_where_the_planner_would_hash(pg_url: str) -> None:
    """A batch of keys as large as what is stored: left to itself the planner hashes the whole of
    billing_line (a stored month, for every batch). The probe's join turns hash and merge joins off
    for itself alone: it looks each key up in the index, finds every stored key, and the
    transaction's settings are as they were afterwards."""
    from service.db import local_settings, make_engine

    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:  # the session database is shared: start from no lines
            conn.exec_driver_sql("TRUNCATE billing_line, billing_file RESTART IDENTITY CASCADE")
        keys = [f"k{i}" for i in range(20_000)]
        _store(engine, "bills", "f.csv", keys)
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE billing_line")
        statements: list[str] = []
        with engine.connect() as conn:
            event.listen(conn, "before_cursor_execute", lambda *a: statements.append(a[2]))
            found = store.existing_keys(conn, "bills", keys)
            probe = list(statements)
            after = conn.exec_driver_sql(
                "SELECT current_setting('enable_hashjoin'), current_setting('enable_mergejoin')"
            ).one()
            with local_settings(conn, **store.PROBE_SETTINGS):
                plan = _probe_plan(conn)
            conn.rollback()
        assert found.height == 20_000
        joins = [i for i, s in enumerate(probe) if "JOIN billing_line" in s]
        settings = [i for i, s in enumerate(probe) if "set_config(" in s]
        assert len(joins) == 1 and len(settings) == 2 and settings[0] < joins[0] < settings[1]
        assert tuple(after) == ("on", "on")
        assert "Nested Loop" in plan and "Index" in plan and "Hash" not in plan, plan
    finally:
        engine.dispose()
