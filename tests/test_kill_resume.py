"""SIGKILL the real CLI at random points of ``gpu-ledger migrate`` and ``gpu-ledger ingest``, then
run it again: nothing half-done may stay behind.

* ``migrate``: killed at a random moment of the migration's work (after Alembic's first "Running
  upgrade" line), from an empty database and from one at revision 0002 holding data. After every
  kill the schema is exactly the one the process found or the newest one — never part of a
  revision — and a new ``migrate`` brings it to the newest schema, equal to a clean one.
* ``ingest``: a billing connector (the AWS CUR fixture, re-pricing the month) then a metrics
  connector (``synthetic``, two days in daily transactions, re-priced from the bill), each killed
  at random moments between its run's start and its end, then run to completion. The ledger
  (``ledger_hour``, ``ledger_day``), ``billing_line`` and ``gpu_rate`` then equal an uninterrupted
  run's, row for row (every column but the surrogate id; money as Decimal); every killed run is
  ``ABORTED`` with its end and an error, none is left ``RUNNING``.

Kill moments are drawn from ``random.Random(SEED)`` (``GPU_LEDGER_KILL_SEED`` overrides it) within
the span the work took in the uninterrupted run. A kill "lands mid-work" when it left the work
undone: the schema as it was found (``migrate``), a run still RUNNING (``ingest``). The counts are
printed (``-s``) and asserted to be a majority of the kills.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlmodel import SQLModel

import service.models  # noqa: F401  (every table on SQLModel.metadata)
from service.db import head_revision, make_engine, migrate
from service.models import ConnectorRun, ConnectorState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # real CLI processes, SIGKILLed over and over

SEED = int(os.environ.get("GPU_LEDGER_KILL_SEED", "20251201"))
CLI = str(Path(sys.executable).parent / "gpu-ledger")
FIXTURES = Path(__file__).parent / "fixtures"
MIGRATE_KILLS = 8
# Kills at random moments per connector; one more of each lands for certain. PostgreSQL: fewer
# (the same code paths; its DDL and imports were transactional already), to keep the test short.
INGEST_KILLS = {"sqlite": {"cur": 2, "syn": 4}, "postgres": {"cur": 1, "syn": 2}}
WINDOWS = {
    "cur": ("2025-09-01T00:00Z", "2025-10-01T00:00Z"),
    "syn": ("2025-09-01T00:00Z", "2025-09-03T00:00Z"),
}
COMPARED = ("ledger_hour", "ledger_day", "billing_line", "gpu_rate")


@dataclass
class Tally:
    kills: int = 0
    mid_work: int = 0


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / f"kill-{abs(hash(url))}.toml"
    path.write_text(
        f'database_url = "{url}"\nlog_level = "INFO"\n'
        '[[connectors]]\nname = "syn"\ntype = "synthetic"\nperiod_s = 900\n'
        f'[[connectors]]\nname = "cur"\ntype = "aws_cur"\n'
        f'path = "{FIXTURES / "aws" / "cur2_2025-09_daily.csv"}"\nchunk_rows = 25\n'
    )
    return path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}


_children: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    """A failing assertion must not leave a CLI process running."""
    yield
    while _children:
        proc = _children.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)


def _spawn(config: Path, *args: str, stderr: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [CLI, *args, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=_env(),
    )
    _children.append(proc)
    return proc


def _kill(proc: subprocess.Popen[str]) -> bool:
    """SIGKILL ``proc``; True when it was still running (the kill happened)."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return proc.returncode == -signal.SIGKILL


def _complete(config: Path, *args: str) -> str:
    result = subprocess.run(
        [CLI, *args, "--config", str(config)], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stdout


# --- migrate --------------------------------------------------------------------------------------


def _schema(url: str) -> list[tuple[str, str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
            return sorted((f"{t} {n}", s) for t, n, s in rows)
    finally:
        engine.dispose()


def _reset(path: Path, revision: str | None) -> str:
    """An empty database file, or one at ``revision`` holding a run and a connector's state."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    if revision is not None:
        migrate(url, revision)
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO connector_state (name, type, status) VALUES ('syn', 'x', 'OK')"))
        engine.dispose()
    return url


def _migrate_until_killed(config: Path, delay_s: float) -> tuple[bool, bool]:
    """Start ``gpu-ledger migrate``; once Alembic says it is upgrading, wait ``delay_s`` and kill.
    (upgrade began, the kill happened)."""
    proc = _spawn(config, "migrate", stderr=subprocess.PIPE)
    assert proc.stderr is not None
    began = False
    for line in proc.stderr:
        if "Running upgrade" in line:
            began = True
            break
    time.sleep(delay_s)
    return began, _kill(proc)


def test_migrate_killed_anywhere_completes_to_a_clean_schema(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    clean = _schema(_reset(tmp_path / "clean.db", "head"))
    path = tmp_path / "killed.db"
    config = _config(tmp_path, f"sqlite:///{path}")
    # How long the migration's transaction lasts here, from each starting point (in-process: the
    # same code the CLI runs, without its start-up).
    spans = {}
    for start in (None, "0002"):
        url = _reset(path, start)
        began = time.monotonic()
        migrate(url)
        spans[start] = time.monotonic() - began

    tally = Tally()
    for attempt in range(2 * MIGRATE_KILLS):  # until MIGRATE_KILLS kills (one may come too late)
        if tally.kills == MIGRATE_KILLS:
            break
        if attempt:
            migrate(url)  # what the next start does to what the last kill left (the CLI: below)
            assert _schema(url) == clean
        start = None if attempt % 2 == 0 else "0002"
        url = _reset(path, start)
        before = _schema(url)
        # The first kill follows "Running upgrade" at once: it lands in the transaction for certain.
        began, killed = _migrate_until_killed(config, rng.uniform(0, spans[start]) if attempt else 0.0)
        assert began
        after = _schema(url)
        # All of the migration or none of it: never part of a revision, never part of one run.
        assert after in (before, clean), f"attempt {attempt}: half-migrated"
        tally.kills += killed
        tally.mid_work += killed and after == before
    assert f"at revision {head_revision()}" in _complete(config, "migrate")
    assert _schema(f"sqlite:///{path}") == clean
    print(f"\nmigrate: {tally.kills} kills, {tally.mid_work} mid-migration (seed {SEED})")
    assert tally.mid_work >= 2, tally


# --- ingest ---------------------------------------------------------------------------------------


def _rows(engine: Engine, table: str) -> list[tuple[object, ...]]:
    """Every row but its id, sorted. Money (Decimal) and every other value exactly; floats to 12
    significant digits: ``ledger_day`` sums hours' floats in SQL, in the order the rows lie, and
    rows written again after a kill lie elsewhere (seen on PostgreSQL: 81367.23355099998 vs
    81367.233551)."""
    t = SQLModel.metadata.tables[table]
    columns = [c for c in t.columns if c.name != "id"]
    with engine.connect() as conn:
        rows = conn.execute(select(*columns)).all()
    return sorted(
        (tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in r) for r in rows), key=repr
    )


def _running(engine: Engine, connector: str) -> set[int]:
    with engine.connect() as conn:
        return set(
            conn.execute(
                select(ConnectorRun.id).where(  # type: ignore[call-overload]
                    ConnectorRun.connector == connector, ConnectorRun.status == "RUNNING"
                )
            ).scalars()
        )


def _ingest_args(connector: str) -> tuple[str, ...]:
    start, end = WINDOWS[connector]
    return ("ingest", connector, "--start", start, "--end", end)


def _until_running(engine: Engine, proc: subprocess.Popen[str], connector: str, known: set[int]) -> float:
    """Wait until ``proc``'s run of ``connector`` is RUNNING; the moment (monotonic), or 0 when the
    process ended first."""
    while proc.poll() is None:
        if _running(engine, connector) - known:
            return time.monotonic()
        time.sleep(0.01)
    return 0.0


def _reference(engine: Engine, config: Path, connector: str) -> float:
    """An uninterrupted ingest; the seconds its run was RUNNING (as far as polling sees)."""
    proc = _spawn(config, *_ingest_args(connector))
    seen = _until_running(engine, proc, connector, set())
    assert seen, "the run was never seen RUNNING"
    while _running(engine, connector) and proc.poll() is None:
        time.sleep(0.01)
    span = time.monotonic() - seen
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    return span


def _kill_ingests(
    engine: Engine, config: Path, connector: str, span_s: float, rng: random.Random, tally: Tally
) -> None:
    """Kill ingests of ``connector`` at random moments until ``INGEST_KILLS`` kills happened (an
    attempt may finish first: the load on the machine varies), then once more as soon as the run
    shows — that kill lands for certain."""
    target = INGEST_KILLS[engine.dialect.name.replace("postgresql", "postgres")][connector]
    for _attempt in range(3 * target):
        if tally.kills >= target:
            break
        _kill_one(engine, config, connector, rng.uniform(0, span_s), tally)
    _kill_one(engine, config, connector, 0.0, tally)


def _kill_one(engine: Engine, config: Path, connector: str, delay_s: float, tally: Tally) -> None:
    known = _running(engine, connector)
    log = config.with_suffix(".stderr")
    with log.open("w") as stderr:
        proc = _spawn(config, *_ingest_args(connector), stderr=stderr.fileno())
        if _until_running(engine, proc, connector, known):
            time.sleep(delay_s)
            tally.kills += _kill(proc)
            tally.mid_work += bool(_running(engine, connector) - known)
            return
        proc.communicate(timeout=30)  # it finished before its run could be seen: not a kill
    assert proc.returncode == 0, log.read_text()[-3000:]


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run's rows per compared table, and how long each connector's run lasted."""

    rows: dict[str, list[tuple[object, ...]]]
    spans: dict[str, float]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """One uninterrupted run (SQLite) for both databases: they store the same ledger, row for row."""
    tmp_path = tmp_path_factory.mktemp("kill-reference")
    url = f"sqlite:///{tmp_path / 'reference.db'}"
    migrate(url)
    engine = make_engine(url)
    try:
        config = _config(tmp_path, url)
        spans = {c: _reference(engine, config, c) for c in ("cur", "syn")}
        rows = {table: _rows(engine, table) for table in COMPARED}
    finally:
        engine.dispose()
    assert all(rows.values()), {t: len(r) for t, r in rows.items()}
    return Reference(rows, spans)


def _ingest_killed_anywhere(tmp_path: Path, reference: Reference, url: str) -> None:
    rng = random.Random(SEED)
    migrate(url)  # (kills during migrate: the test above)
    killed = make_engine(url)
    try:
        config = _config(tmp_path, url)
        tallies = {c: Tally() for c in ("cur", "syn")}
        for connector in ("cur", "syn"):
            _kill_ingests(killed, config, connector, reference.spans[connector], rng, tallies[connector])
            assert _running(killed, connector), "the last kill must leave a RUNNING run"
            if connector == "syn":
                # Any start closes it — here `migrate`, which says so — and the connector stops
                # saying RUNNING. (For `cur`, the completing ingest's own start does it.)
                out = _complete(config, "migrate")
                assert f"aborted 1 run(s) left RUNNING by processes that are gone: {connector} #" in out
                with killed.connect() as conn:
                    state = conn.execute(select(ConnectorState).where(ConnectorState.name == connector)).one()
                assert state.status == "ABORTED" and state.last_error.startswith("aborted: its process (")
            _complete(config, *_ingest_args(connector))

        for table in COMPARED:
            assert _rows(killed, table) == reference.rows[table], (
                f"{table} differs from an uninterrupted run's"
            )
        with killed.connect() as conn:
            runs = conn.execute(select(ConnectorRun)).all()
            states = dict(conn.execute(select(ConnectorState.name, ConnectorState.status)).all())
        assert [r.id for r in runs if r.status == "RUNNING"] == []
        for connector, tally in tallies.items():
            aborted = [r for r in runs if r.connector == connector and r.status == "ABORTED"]
            assert len(aborted) == tally.mid_work, (connector, tally)
            assert all(r.finished_at is not None and r.error.startswith("aborted: ") for r in aborted)
            assert states[connector] == "OK"
            print(f"\ningest {connector}: {tally.kills} kills, {tally.mid_work} mid-run (seed {SEED})")
            assert tally.mid_work >= 1, (connector, tally)
    finally:
        killed.dispose()


def test_ingest_killed_anywhere_resumes_to_the_same_ledger_sqlite(
    tmp_path: Path, reference: Reference
) -> None:
    _ingest_killed_anywhere(tmp_path, reference, f"sqlite:///{tmp_path / 'k.db'}")


@pytest.mark.postgres
def test_ingest_killed_anywhere_resumes_to_the_same_ledger_postgres(
    tmp_path: Path, reference: Reference, fresh_pg_database: Callable[[], AbstractContextManager[str]]
) -> None:
    with fresh_pg_database() as url:
        _ingest_killed_anywhere(tmp_path, reference, url)
