"""Runs left RUNNING by a killed process are closed as ABORTED — and only those.

Real processes: each owner is a child Python that begins a run (``service.runs.begin_run``) and
waits; the test SIGKILLs it, as the OOM killer or an operator would.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, insert
from sqlmodel import Session

from connectors.base import ConnectorStatus
from service.db import make_engine
from service.models import ConnectorRun, ConnectorState
from service.runlocks import owner_gone
from service.runs import abort_orphaned_runs, begin_run, finish_run

T0 = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
NOW = dt.datetime(2025, 9, 2, 12, tzinfo=dt.UTC)

_OWNER = textwrap.dedent(
    """
    import datetime as dt, sys
    from service.db import make_engine
    from service.runs import begin_run
    t0 = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
    run_id = begin_run(make_engine(sys.argv[1]), sys.argv[2], "Synthetic", t0, t0 + dt.timedelta(days=1), t0)
    print(run_id, flush=True)
    sys.stdin.read()  # until the test kills it
    """
)


class Owner:
    """A child process that began run ``run_id`` of ``connector`` and keeps it RUNNING."""

    def __init__(self, url: str, connector: str):
        self.url = url
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _OWNER, url, connector],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._run_id: int | None = None

    @property
    def run_id(self) -> int:
        """The run's id, once the child has begun it (children start in parallel)."""
        if self._run_id is None:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            assert line.strip().isdigit(), f"owner did not start: {line!r}"
            self._run_id = int(line)
        return self._run_id

    def kill(self) -> None:
        assert self.run_id  # killed only once its run is in
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        # PostgreSQL drops a dead client's session (and its advisory lock) when its backend next
        # runs: a moment later, longer on a loaded machine. Wait for that, as a later start would.
        engine = make_engine(self.url)
        try:
            with Session(engine) as session:
                run = session.get(ConnectorRun, self.run_id)
                key = run.owner_lock if run is not None else None
            deadline = time.monotonic() + 10
            while key is not None and not owner_gone(engine, key) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            engine.dispose()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def owners(db_url: str) -> Iterator[list[Owner]]:
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.close()


def _run(engine: Engine, run_id: int) -> ConnectorRun:
    with Session(engine) as session:
        run = session.get(ConnectorRun, run_id)
        assert run is not None
        return run


def _state(engine: Engine, name: str) -> ConnectorState:
    with Session(engine) as session:
        state = session.get(ConnectorState, name)
        assert state is not None
        return state


@pytest.mark.slow
def test_killed_owner_is_aborted_live_one_untouched(engine: Engine, db_url: str, owners: list[Owner]) -> None:
    owners += [Owner(db_url, "dc1"), Owner(db_url, "dc1"), Owner(db_url, "cloud")]
    killed, alive, other = owners
    assert all(o.run_id for o in owners)
    run = _run(engine, killed.run_id)
    assert (run.status, run.owner_host, run.owner_pid) == ("RUNNING", socket.gethostname(), killed.proc.pid)

    assert abort_orphaned_runs(engine, NOW) == []  # every owner alive: nothing to close

    killed.kill()
    aborted = abort_orphaned_runs(engine, NOW)
    assert [r.id for r in aborted] == [killed.run_id]
    run = _run(engine, killed.run_id)
    assert run.status == ConnectorStatus.ABORTED and run.finished_at == NOW
    assert run.error is not None and run.error.startswith(
        f"aborted: its process ({socket.gethostname()} pid {killed.proc.pid}) ended without finishing "
        "it (killed or crashed, or its end could not be written); found at 2025-09-02T12:00:00Z"
    )
    assert "the watermark did not move, so the next run reads the window again" in run.error
    # dc1 has another live run: its status stays RUNNING
    assert _state(engine, "dc1").status == ConnectorStatus.RUNNING
    assert _run(engine, alive.run_id).status == "RUNNING"
    assert _run(engine, other.run_id).status == "RUNNING"

    alive.kill()
    other.kill()
    assert sorted(r.id for r in abort_orphaned_runs(engine, NOW, connector="dc1")) == [alive.run_id]
    state = _state(engine, "dc1")
    assert state.status == ConnectorStatus.ABORTED and state.last_error == _run(engine, alive.run_id).error
    assert _run(engine, other.run_id).status == "RUNNING"  # another connector: not asked about
    assert [r.id for r in abort_orphaned_runs(engine, NOW)] == [other.run_id]
    assert abort_orphaned_runs(engine, NOW) == []  # idempotent


@pytest.mark.slow
def test_next_run_of_the_connector_closes_the_dead_one(
    engine: Engine, db_url: str, owners: list[Owner]
) -> None:
    owners.append(Owner(db_url, "dc1"))
    owners[0].kill()
    run_id = begin_run(engine, "dc1", "Synthetic", T0, T0 + dt.timedelta(hours=1), NOW)
    assert _run(engine, owners[0].run_id).status == ConnectorStatus.ABORTED
    finish_run(engine, "dc1", run_id, ConnectorStatus.OK, {"read": 1, "accepted": 1}, NOW, watermark=T0)
    assert (_run(engine, run_id).status, _state(engine, "dc1").status) == ("OK", "OK")


def test_own_runs_are_never_aborted(engine: Engine) -> None:
    run_id = begin_run(engine, "dc1", "Synthetic", T0, T0 + dt.timedelta(hours=1), NOW)
    assert engine.pool.checkedout() == 0  # the run's lock takes no place in the engine's pool
    assert abort_orphaned_runs(engine, NOW) == []
    assert _run(engine, run_id).status == "RUNNING"
    finish_run(engine, "dc1", run_id, ConnectorStatus.OK, {}, NOW, watermark=T0)
    assert _run(engine, run_id).status == "OK"


def test_run_from_before_owners_were_recorded_is_aborted(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(insert(ConnectorState).values(name="old", type="Synthetic", status="RUNNING"))
        run_id = conn.execute(
            insert(ConnectorRun).values(
                connector="old", window_start=T0, window_end=T0, started_at=T0, status="RUNNING"
            )
        ).inserted_primary_key[0]
    assert [r.id for r in abort_orphaned_runs(engine, NOW)] == [run_id]
    run = _run(engine, run_id)
    assert run.status == "ABORTED" and run.error is not None
    assert run.error.startswith(
        "aborted: the process running it (not recorded: begun before migration 0003) ended without "
        "finishing it"
    )
    assert _state(engine, "old").status == "ABORTED"


def test_sqlite_lock_files_go_with_their_runs(sqlite_url: str) -> None:
    from service.db import make_engine
    from service.runlocks import lock_dir

    engine = make_engine(sqlite_url)
    try:
        run_id = begin_run(engine, "dc1", "Synthetic", T0, T0 + dt.timedelta(hours=1), NOW)
        directory = lock_dir(engine)
        assert directory is not None
        assert os.listdir(directory) == [f"{_run(engine, run_id).owner_lock}.lock"]
        finish_run(engine, "dc1", run_id, ConnectorStatus.OK, {}, NOW)
        assert os.listdir(directory) == []
    finally:
        engine.dispose()


def test_lock_files_of_processes_killed_before_their_run_was_written_are_swept(sqlite_url: str) -> None:
    from service import runlocks
    from service.db import make_engine

    engine = make_engine(sqlite_url)
    try:
        held = runlocks.acquire(engine)  # a run about to be written: its lock stays
        directory = runlocks.lock_dir(engine)
        assert held is not None and directory is not None
        (directory / "12345.lock").touch()  # what a process killed before writing its run leaves
        abort_orphaned_runs(engine, NOW)
        assert os.listdir(directory) == [f"{held.key}.lock"]
        held.release()
    finally:
        engine.dispose()


def test_a_run_whose_end_could_not_be_written_is_not_kept_running(engine: Engine) -> None:
    run_id = begin_run(engine, "dc1", "Synthetic", T0, T0 + dt.timedelta(hours=1), NOW)
    with engine.begin() as conn:  # the end cannot be written: its connector row is gone
        conn.execute(ConnectorState.__table__.delete())
    with pytest.raises(AssertionError):
        finish_run(engine, "dc1", run_id, ConnectorStatus.OK, {}, NOW)
    assert [r.id for r in abort_orphaned_runs(engine, NOW)] == [run_id]
    assert _run(engine, run_id).status == "ABORTED"


def test_without_a_lock_the_owner_pid_on_this_host_decides(engine: Engine) -> None:
    """Where no lock could be taken (a SQLite "file:" URI database), a live pid keeps its run."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    ids = {}
    with engine.begin() as conn:
        for name, pid in (("live", os.getpid()), ("dead", int(ended.stdout))):
            ids[name] = conn.execute(
                insert(ConnectorRun).values(
                    connector=name,
                    window_start=T0,
                    window_end=T0,
                    started_at=T0,
                    status="RUNNING",
                    owner_host=socket.gethostname(),
                    owner_pid=pid,
                )
            ).inserted_primary_key[0]
    assert [r.id for r in abort_orphaned_runs(engine, NOW)] == [ids["dead"]]
    assert _run(engine, ids["live"]).status == "RUNNING"


def test_first_runs_of_a_new_connector_begun_at_once_all_begin(
    engine: Engine, db_url: str, owners: list[Owner]
) -> None:
    """Processes beginning the first runs of one connector at the same moment: each finds no state
    row; the one inserted first is the others' (INSERT … ON CONFLICT DO NOTHING), none fails on its
    key (CI once saw `UNIQUE constraint failed: connector_state.name` here)."""
    owners += [Owner(db_url, "fresh") for _ in range(6)]
    assert len({o.run_id for o in owners}) == 6
    assert _state(engine, "fresh").status == ConnectorStatus.RUNNING
