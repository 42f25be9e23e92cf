"""Slurm jobs owned by their accounts, through the real ingest paths on SQLite and PostgreSQL:
the ``slurm`` connector's facts (tests/fixtures/slurm) kept per workload key; a metrics source's
rows for the same jobs — the node agent's ``slurm:<jobid>`` (its attributor reading a process's
cgroup), dcgm-exporter's ``hpc:<jobid>`` — named by ``[[attribution]]`` rules over
``slurm.account`` / ``slurm.partition`` / ``slurm.user``, whether the facts come before the metrics
(at ingest) or after (``reattribute``); hostile accounting lines quarantined; the CLI and the
scheduler run the connector."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

import polars as pl
import pytest
from attribution_fleet import owners, rule, total_cost
from attribution_fleet import price as fleet_price
from slurm_process import job_4711_process
from sqlalchemy import Engine, select

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from connectors.registry import default_registry
from connectors.sdk import ConnectorStatus
from service.attribution.reattribute import reattribute
from service.facts_ingest import ingest_facts
from service.ledger.ingest import ingest_window
from service.models import ConnectorRun, ConnectorState, Rejection, WorkloadFact

SACCT = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "sacct-2026-11-30.txt"
HOUR0 = dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)  # jobs 4711 (physics) and 5000_1 = 5001 (chem) ran
END = HOUR0 + dt.timedelta(hours=2)
RATE = Decimal("3.000000000")
RULES = (
    rule("project-from-slurm-account", "slurm.account", "project"),
    rule("team-from-partition", "slurm.partition", "team", values={"gpu": "ml-platform"}),
    rule("user-from-slurm", "slurm.user", "user"),
)


class NodesConfig(ConnectorConfig):
    pass


@pytest.fixture
def agent(tmp_path: Path) -> WorkloadInfo:
    return job_4711_process(tmp_path)


class Nodes:
    """gpu01 (the node agent's process of job 4711, as its attributor names it) and gpu02
    (dcgm-exporter: ``hpc:5001``, no facts); hour 0 both busy, hour 1 gpu02 idle."""

    def __init__(self, agent: WorkloadInfo) -> None:
        self.agent = agent

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = NodesConfig
    sampling = Sampling.every(60.0)

    def discover(self) -> list[DeviceInfo]:
        return [
            DeviceInfo("gpu01-0", "onprem", gpu_model="H200"),
            DeviceInfo("gpu02-0", "onprem", gpu_model="H200"),
        ]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        t0 = int(HOUR0.timestamp() * 1000)
        rows = []
        for minute in range(120):
            ts = t0 + minute * 60_000
            rows.append(("gpu01-0", ts, "gpu_util", 90.0, "slurm:4711", 1.0))
            rows.append(("gpu02-0", ts, "gpu_util", 40.0, "hpc:5001" if minute < 60 else "", 1.0))
        workloads = [self.agent, WorkloadInfo("hpc:5001", workload="5001")]
        yield SampleBatch(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), self.discover(), workloads)


def price(engine: Engine) -> None:
    fleet_price(engine, "H200", RATE, HOUR0)


def slurm(path: Path = SACCT) -> Any:
    return default_registry().build({"name": "slurm-main", "type": "slurm", "path": str(path)})


def facts(engine: Engine, path: Path = SACCT) -> Any:
    return ingest_facts(engine, "slurm-main", slurm(path), HOUR0, END)


def metrics(engine: Engine, agent: WorkloadInfo) -> None:
    assert agent == WorkloadInfo(
        "slurm:4711", user_name="bob", workload="4711", facts={"slurm.job": "4711", "unix.user": "bob"}
    )
    ingest_window(engine, "nodes", Nodes(agent), HOUR0, END, attribution_rules=RULES)


def hours(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """owners() rows with the hour made relative to HOUR0."""
    h0 = int(HOUR0.timestamp()) // 3600 - int(dt.datetime(2026, 11, 2, tzinfo=dt.UTC).timestamp()) // 3600
    return [(r[0], r[1] - h0, *r[2:]) for r in rows]


OWNED = [
    ("gpu01-0", 0, "slurm:4711", "physics", "ml-platform", "bob", "project-from-slurm-account"),
    ("gpu01-0", 1, "slurm:4711", "physics", "ml-platform", "bob", "project-from-slurm-account"),
    ("gpu02-0", 0, "hpc:5001", "chem", "ml-platform", "alice", "project-from-slurm-account"),
    ("gpu02-0", 1, "", None, None, None, None),
]


def test_facts_first_then_metrics_own_the_jobs_at_ingest(engine: Engine, agent: WorkloadInfo) -> None:
    price(engine)
    result = facts(engine)
    assert (result.status, result.read, result.accepted, result.refused, result.workloads) == (
        ConnectorStatus.OK, 20, 11, 0, 20,
    )  # fmt: skip
    assert result.skipped == {"job steps": 5, "pending jobs": 1, "jobs without GPUs": 3}
    with engine.connect() as conn:
        kept = conn.execute(
            select(WorkloadFact.__table__).where(WorkloadFact.__table__.c.workload_key == "hpc:5001")  # type: ignore[attr-defined]
        ).one()
        run = conn.execute(select(ConnectorRun.__table__)).one()  # type: ignore[attr-defined]
    assert (kept.source, kept.user_name, kept.project) == ("slurm-main", "alice", None)
    assert kept.facts == {
        "slurm.job": "5001", "slurm.user": "alice", "slurm.account": "chem",
        "slurm.partition": "gpu", "slurm.qos": "normal",
    }  # fmt: skip
    assert (run.read, run.accepted, run.rejected, run.ledger_rows, run.status) == (20, 20, 0, 0, "OK")
    metrics(engine, agent)
    assert hours(owners(engine)) == OWNED
    # 3 present device-hours at 3 USD, whoever owns them; each job's hour is its account's
    assert total_cost(engine) == Decimal(12)


def test_metrics_first_then_facts_and_reattribute(engine: Engine, agent: WorkloadInfo) -> None:
    price(engine)
    metrics(engine, agent)
    # Nobody named gpu02's job yet; the agent's own user names gpu01's.
    assert [r[3:] for r in hours(owners(engine))] == [
        (None, None, "bob", "source"), (None, None, "bob", "source"),
        (None, None, None, None), (None, None, None, None),
    ]  # fmt: skip
    facts(engine)
    result = reattribute(engine, RULES, HOUR0, END)
    assert (result.owners_changed, result.rows_changed) == (2, 3)
    assert hours(owners(engine)) == OWNED
    assert total_cost(engine) == Decimal(12)
    again = reattribute(engine, RULES, HOUR0, END)
    assert (again.owners_changed, again.rows_changed) == (0, 0)
    # A rule change moves the cost between projects; the total stays.
    by_qos = (rule("project-from-qos", "slurm.qos", "project", values={"normal": "standard"}), *RULES)
    reattribute(engine, by_qos, HOUR0, END)
    assert {r[3] for r in owners(engine) if r[2]} == {"standard"}
    assert total_cost(engine) == Decimal(12)


def test_a_facts_run_given_the_rules_re_owns_the_rows_written_before_it(
    engine: Engine, agent: WorkloadInfo
) -> None:
    """What serve does: the metrics came first; the slurm run that follows applies the rules to its
    window, so nobody has to run reattribute."""
    price(engine)
    metrics(engine, agent)
    result = ingest_facts(engine, "slurm-main", slurm(), HOUR0, END, attribution_rules=RULES)
    assert (result.status, result.ledger_rows) == (ConnectorStatus.OK, 3)
    assert hours(owners(engine)) == OWNED
    assert total_cost(engine) == Decimal(12)
    again = ingest_facts(engine, "slurm-main", slurm(), HOUR0, END, attribution_rules=RULES)
    assert again.ledger_rows == 0


def test_hostile_accounting_lines_are_quarantined_and_the_rest_kept(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "sacct.txt"
    lines = SACCT.read_text().splitlines()
    lines.insert(
        3, "4712|4712|eve|physics|gpu|normal|COMPLETED|gres/gpu=1|gpu01|tomorrow|2026-11-30T11:30:00|1"
    )
    lines.append("4713|4713|eve|physics")
    path.write_text("\n".join(lines) + "\n")
    result = facts(engine, path)
    assert (result.status, result.read, result.refused, result.workloads) == (
        ConnectorStatus.DEGRADED,
        22,
        2,
        20,
    )
    with engine.connect() as conn:
        rejected = conn.execute(
            select(
                Rejection.__table__.c.file, Rejection.__table__.c.line, Rejection.__table__.c.field
            ).order_by(Rejection.__table__.c.line)  # type: ignore[attr-defined]  # type: ignore[attr-defined]
        ).all()
        run = conn.execute(select(ConnectorRun.__table__)).one()  # type: ignore[attr-defined]
        state = conn.execute(select(ConnectorState.__table__)).one()  # type: ignore[attr-defined]
    assert [tuple(r) for r in rejected] == [(str(path), 4, "Start"), (str(path), 23, None)]
    assert (run.read, run.accepted, run.rejected, run.status) == (22, 20, 2, "DEGRADED")
    assert state.last_error.startswith(
        f"2 of 22 records refused (rejection table, run {run.id}); first: {path}, line 4"
    )
    assert state.watermark is not None


def test_a_broken_source_fails_the_run_and_keeps_nothing(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot read"):
        facts(engine, tmp_path / "gone.txt")
    with engine.connect() as conn:
        state = conn.execute(select(ConnectorState.__table__)).one()  # type: ignore[attr-defined]
        kept = conn.execute(select(WorkloadFact.__table__)).all()  # type: ignore[attr-defined]
    assert (state.status, state.watermark, kept) == ("INVALID_CONFIGURATION", None, [])


def test_the_scheduler_runs_a_facts_connector_on_its_window(engine: Engine) -> None:
    import asyncio

    from service.scheduler import Scheduler

    connector = slurm()
    now = dt.datetime(2026, 11, 30, 23, 10, tzinfo=dt.UTC)
    sched = Scheduler(engine, [connector.config], connectors={"slurm-main": connector}, clock=lambda: now)
    assert asyncio.run(sched.run_once(connector.config, connector)) == "ok"
    with engine.connect() as conn:
        kept = conn.execute(select(WorkloadFact.__table__.c.workload_key)).scalars().all()  # type: ignore[attr-defined]
        state = conn.execute(select(ConnectorState.__table__)).one()  # type: ignore[attr-defined]
    assert len(kept) == 20 and "slurm:7000" in kept
    # the first window: backfill_days (1) back from now, to now rounded up to the hour
    assert (state.status, state.watermark) == ("OK", dt.datetime(2026, 12, 1, tzinfo=dt.UTC))


def test_gpu_ledger_ingest_runs_a_facts_connector(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from service.cli import app

    for var in [v for v in os.environ if v.startswith("GPU_LEDGER_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", sqlite_url)
    bad = tmp_path / "bad.txt"
    bad.write_text(SACCT.read_text() + "4713|4713|eve|physics\n")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[[connectors]]\nname = "slurm-main"\ntype = "slurm"\npath = "{SACCT}"\n\n'
        f'[[connectors]]\nname = "slurm-bad"\ntype = "slurm"\npath = "{bad}"\n'
    )
    window = ["--start", "2026-11-30T00:00Z", "--end", "2026-12-01T00:00Z", "--config", str(config)]
    done = CliRunner().invoke(app, ["ingest", "slurm-main", *window])
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        "slurm-main: OK: 20 records read, 11 kept as facts of 20 workloads, 0 refused, "
        "0 ledger rows re-owned (run 1); "
        "skipped job steps: 5, jobs without GPUs: 3, pending jobs: 1\n"
    )
    degraded = CliRunner().invoke(app, ["ingest", "slurm-bad", *window])
    assert degraded.exit_code == 3
    assert degraded.stdout.startswith(
        "slurm-bad: DEGRADED: 21 records read, 11 kept as facts of 20 workloads, 1 refused"
    )
    assert CliRunner().invoke(app, ["ingest", "slurm-bad", *window, "--allow-degraded"]).exit_code == 0


def test_cost_by_project_over_graphql_shows_the_accounts_and_the_rule(
    engine: Engine, agent: WorkloadInfo, tmp_path: Path
) -> None:
    """Issue 16's "a Slurm job owned by its account lands in cost(groupBy: [PROJECT]) with the
    hand-computed cost, and the rule that named it is shown", through the real app."""
    from starlette.testclient import TestClient

    from service.app import create_app
    from service.settings import load_settings

    price(engine)
    facts(engine)
    metrics(engine, agent)
    config = tmp_path / "ledger.toml"
    url = engine.url.render_as_string(hide_password=False)
    config.write_text(f'database_url = "{url}"\n[auth]\nanonymous_read = true\n')
    query = """query($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT, OWNER_RULE]) {
      project ownerRule unallocated cost { amount currency } } }"""
    window = {"start": HOUR0.isoformat(), "end": END.isoformat()}
    with TestClient(create_app(load_settings(config), engine)) as client:
        body = client.post("/graphql", json={"query": query, "variables": {"w": window}}).json()
    assert "errors" not in body, body
    rows = [
        (r["project"], r["ownerRule"], r["unallocated"], r["cost"]["amount"]) for r in body["data"]["cost"]
    ]
    # 3 USD per GPU-hour: job 4711 (physics) held gpu01 both hours, job 5001 (chem) gpu02 the first
    assert sorted(rows, key=str) == sorted(
        [
            (None, None, True, "3.000000000"),
            ("chem", "project-from-slurm-account", False, "3.000000000"),
            ("physics", "project-from-slurm-account", False, "6.000000000"),
        ],
        key=str,
    )


class OtherCluster(Nodes):
    """Cluster B's nodes (gpu11, gpu12): its job numbers are cluster A's (``slurm:4711``, ``hpc:5001``)."""

    def discover(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(d.device_id.replace("gpu0", "gpu1"), "onprem", gpu_model="H200")
            for d in super().discover()
        ]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        for batch in super().collect(start, end):
            ids = batch.samples["device_id"].cast(pl.String).str.replace("gpu0", "gpu1", literal=True)
            samples = batch.samples.with_columns(ids.cast(batch.samples.schema["device_id"]))
            yield SampleBatch(samples, self.discover(), batch.workloads)


def _cluster_b_sacct(tmp_path: Path) -> Path:
    """Cluster B's accounting: its job 4711 belongs to biology, its 5001 to geology."""
    path = tmp_path / "sacct-b.txt"
    text = SACCT.read_text()
    lines = [
        line.replace("|physics|", "|biology|") if line.startswith("4711") else
        line.replace("|chem|", "|geology|") if line.split("|")[1:2] == ["5001"] else line
        for line in text.splitlines()
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("facts_first", [True, False], ids=["facts-first", "reattribute"])
def test_two_clusters_numbering_jobs_alike_keep_their_own_accounts(
    engine: Engine, agent: WorkloadInfo, tmp_path: Path, facts_first: bool
) -> None:
    def cluster_facts(name: str, path: Path, nodes: str) -> None:
        config = {"name": name, "type": "slurm", "path": str(path), "describes": [nodes]}
        ingest_facts(engine, name, default_registry().build(config), HOUR0, END)

    def cluster_metrics() -> None:
        ingest_window(engine, "nodes-a", Nodes(agent), HOUR0, END, attribution_rules=RULES)
        ingest_window(engine, "nodes-b", OtherCluster(agent), HOUR0, END, attribution_rules=RULES)

    price(engine)
    if facts_first:
        cluster_facts("slurm-a", SACCT, "nodes-a")
        cluster_facts("slurm-b", _cluster_b_sacct(tmp_path), "nodes-b")
        cluster_metrics()
    else:
        cluster_metrics()
        cluster_facts("slurm-a", SACCT, "nodes-a")
        cluster_facts("slurm-b", _cluster_b_sacct(tmp_path), "nodes-b")
        reattribute(engine, RULES, HOUR0, END)
    projects = {(r[0], r[2]): r[3] for r in owners(engine) if r[2]}
    assert projects == {
        ("gpu01-0", "slurm:4711"): "physics", ("gpu02-0", "hpc:5001"): "chem",
        ("gpu11-0", "slurm:4711"): "biology", ("gpu12-0", "hpc:5001"): "geology",
    }  # fmt: skip
    assert total_cost(engine) == Decimal(24)  # 6 present device-hours at 3 USD


def test_without_describes_the_later_cluster_names_both_clusters_jobs(
    engine: Engine, agent: WorkloadInfo, tmp_path: Path
) -> None:
    """The limit ``describes`` lifts: facts that describe every source are shared by key."""
    price(engine)
    ingest_facts(engine, "slurm-a", slurm(), HOUR0, END, clock=lambda: END)
    b = {"name": "slurm-b", "type": "slurm", "path": str(_cluster_b_sacct(tmp_path))}
    ingest_facts(engine, "slurm-b", default_registry().build(b), HOUR0, END)  # updated later: it wins
    ingest_window(engine, "nodes-a", Nodes(agent), HOUR0, END, attribution_rules=RULES)
    assert {r[3] for r in owners(engine) if r[2] == "slurm:4711"} == {"biology"}
