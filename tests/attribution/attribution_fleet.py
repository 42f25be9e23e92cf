"""A two-GPU fleet with attribution facts, ingested through the real ingest path (shared by the
attribution tests). Every device-hour is present and priced at 2.000000000 USD by a rate card.

hour 0: GPU-a held by ``k8s:ml/train/main`` (namespace label team=ML-research, no owner named by
        the source); GPU-b held by ``docker:abc`` (the source named project "atlas"; label
        cost-center=cc-7)
hour 1: GPU-a idle; GPU-b still ``docker:abc``
GPU-a's node is labelled pool=research-pool.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, ClassVar, Literal

import polars as pl
from sqlalchemy import Engine, func, select
from sqlmodel import Session

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from service.attribution import AttributionRule
from service.ledger.ingest import ingest_window
from service.models import LedgerHour
from service.pricing.rates import RateCardConfig, sync_rate_cards

DAY0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
HOURS = 2
RATE = Decimal("2.000000000")
TRAIN = "k8s:ml/train/main"
DOCKER = "docker:abc"


class FleetConfig(ConnectorConfig):
    pass


class Fleet:
    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = FleetConfig
    sampling = Sampling.every(60.0)

    def discover(self) -> list[DeviceInfo]:
        return [
            DeviceInfo("GPU-a", "onprem", gpu_model="H100", tags={"k8s.node_label:pool": "research-pool"}),
            DeviceInfo("GPU-b", "onprem", gpu_model="H100"),
        ]

    def workloads(self) -> list[WorkloadInfo]:
        return [
            WorkloadInfo(
                TRAIN,
                namespace="ml",
                facts={"k8s.namespace": "ml", "k8s.namespace_label:team": "ML-research"},
            ),
            WorkloadInfo(DOCKER, project="atlas", facts={"docker.label:cost-center": "cc-7"}),
        ]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        t0 = int(DAY0.timestamp() * 1000)
        rows = []
        for minute in range(HOURS * 60):
            ts = t0 + minute * 60_000
            rows.append(("GPU-a", ts, "gpu_util", 50.0, TRAIN if minute < 60 else "", 1.0))
            rows.append(("GPU-b", ts, "gpu_util", 80.0, DOCKER, 1.0))
        yield SampleBatch(
            pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), self.discover(), self.workloads()
        )


def rule(name: str, source: str, dimension: str, **kw: Any) -> AttributionRule:
    return AttributionRule.model_validate({"name": name, "source": source, "dimension": dimension, **kw})


#: The rules the fleet is first ingested with.
RULES_V1 = (
    rule("project-from-team-label", "k8s.namespace_label:team", "project",
         match="(?i)ml-(.*)", value="$1", values={"research": "Research"}),
    rule("team-from-pool", "k8s.node_label:pool", "team", match="(.*)-pool", value="${1}"),
    rule("cc-project", "docker.label:cost-center", "project"),
)  # fmt: skip


def price(
    engine: Engine, gpu_model: str = "H100", rate: Decimal = RATE, valid_from: dt.datetime = DAY0
) -> None:
    """One on-prem USD rate card for ``gpu_model`` (named after it, lower case)."""
    with Session(engine) as session:
        card = RateCardConfig(
            name=gpu_model.lower(), environment="onprem", gpu_model=gpu_model, rate_per_gpu_hour=rate,
            currency="USD", valid_from=valid_from,
        )  # fmt: skip
        sync_rate_cards(session, [card])
        session.commit()


def ingest(engine: Engine, rules: Sequence[AttributionRule] = RULES_V1) -> None:
    price(engine)
    ingest_window(engine, "fleet", Fleet(), DAY0, DAY0 + dt.timedelta(hours=HOURS), attribution_rules=rules)


def owners(engine: Engine) -> list[tuple[Any, ...]]:
    """(device, hour, workload, project, team, user, owner_rule) of every ledger row, in order."""
    h = LedgerHour.__table__
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                h.c.device_id, h.c.hour_index - int(DAY0.timestamp()) // 3600, h.c.workload_key,
                h.c.project, h.c.team, h.c.user_name, h.c.owner_rule,
            ).order_by(h.c.device_id, h.c.hour_index)
        )  # fmt: skip
        return [tuple(r) for r in rows]


def total_cost(engine: Engine, table: Any = LedgerHour) -> Decimal:
    t = table.__table__
    with engine.connect() as conn:
        return Decimal(conn.execute(select(func.sum(t.c.cost))).scalar_one())
