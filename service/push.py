"""``POST /api/v1/batches``: node agents push sample batches into the staging tables.

Wire format (JSON, ``Content-Type: application/json``, ``Authorization: Bearer <token>``)::

    {"batch_id": "<agent-id>:<seq>",           # unique per batch; a replay is acknowledged, not stored
     "agent": "gpu-node-17",                   # the `agent` connector's name (the token must be its)
     "devices": [{"device_id": "GPU-…", "environment": "onprem", …DeviceInfo fields}],
     "workloads": [{"workload_key": "…", …WorkloadInfo fields}],
     "samples": {"device_id": [...], "ts_ms": [...], "metric": [...], "value": [...],
                 "workload_key": [...], "share": [...]}}   # columnar, equal lengths, SAMPLE_SCHEMA units

Answers: 200 ``{"batch_id", "duplicate": false, "samples": n}`` when stored; 200 with
``"duplicate": true`` for a batch id already stored (nothing is stored twice); 400 ``{"error",
"field"}`` naming the first bad field; 401 without a bearer token; 403 for a token no agent
connector has, or one that is not the named agent's; 413 over the body limit. The batch row and its
samples are written in one transaction; devices and workloads are upserted in it too, and a batch
older than the agent connector's watermark moves the watermark back (see ``_rewind_watermark``).
"""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import Callable, Iterable
from typing import Any, Literal

import polars as pl
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from connectors.agent import AgentConfig
from connectors.base import SAMPLE_SCHEMA, ConnectorConfig
from service.metrics_catalog import Metric
from service.models import ConnectorState, PushedBatch, PushedDevice, PushedSample, PushedWorkload
from service.telemetry import Telemetry
from service.timeutil import from_ms

ROUTE = "/api/v1/batches"
Clock = Callable[[], dt.datetime]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class DeviceIn(_Strict):
    device_id: str = Field(min_length=1, max_length=200)
    environment: Literal["onprem", "aws", "gcp", "azure"]
    provider: str | None = None
    account: str | None = None
    region: str | None = None
    cluster: str | None = None
    node: str | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    gpu_model: str | None = None
    gpu_index: int | None = None
    parent_device_id: str | None = None
    mig_profile: str | None = None
    gpu_fraction: float = Field(1.0, gt=0, le=1)
    tdp_w: float | None = None


class WorkloadIn(_Strict):
    workload_key: str = Field(max_length=500)  # '' = unallocated: accepted, nothing to store
    project: str | None = None
    team: str | None = None
    user_name: str | None = None
    namespace: str | None = None
    workload: str | None = None


class SamplesIn(_Strict):
    device_id: list[str]
    ts_ms: list[int]
    metric: list[Literal[tuple(m.value for m in Metric)]]  # type: ignore[valid-type]
    value: list[float]
    workload_key: list[str]
    share: list[float]

    @model_validator(mode="after")
    def _same_length(self) -> SamplesIn:
        n = len(self.device_id)
        for name in ("ts_ms", "metric", "value", "workload_key", "share"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"samples.{name} has {len(getattr(self, name))} values, device_id has {n}")
        return self


class BatchIn(_Strict):
    batch_id: str = Field(min_length=3, max_length=200, pattern=r"^[^:\s]+:\d+$")
    agent: str = Field(min_length=1, max_length=100)
    devices: list[DeviceIn]
    workloads: list[WorkloadIn] = []
    samples: SamplesIn

    @model_validator(mode="after")
    def _known_devices(self) -> BatchIn:
        described = {d.device_id for d in self.devices}
        unknown = sorted(set(self.samples.device_id) - described)
        if unknown:
            raise ValueError(f"samples.device_id {unknown[0]!r} is not in devices")
        return self


class PushMetrics:
    """``gpu_ledger_push_batches_total{agent, outcome}`` (accepted | duplicate | rejected) and
    ``gpu_ledger_push_samples_total{agent}``, registered once per :class:`Telemetry`."""

    def __init__(self, telemetry: Telemetry):
        self.batches = Counter(
            "gpu_ledger_push_batches",
            "Pushed batches by agent connector and outcome (accepted, duplicate, rejected).",
            ["agent", "outcome"],
            registry=telemetry.registry,
        )
        self.samples = Counter(
            "gpu_ledger_push_samples", "Pushed samples stored.", ["agent"], registry=telemetry.registry
        )

    @classmethod
    def of(cls, telemetry: Telemetry) -> PushMetrics:
        existing = getattr(telemetry, "_push_metrics", None)
        if existing is None:
            existing = cls(telemetry)
            telemetry._push_metrics = existing  # type: ignore[attr-defined]
        return existing


def _error(status: int, message: str, field: str | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


def _agent_for(token: str, agents: list[AgentConfig]) -> str | None:
    """The agent connector whose token this is; every token is compared, in constant time."""
    found = None
    for config in agents:
        if hmac.compare_digest(token.encode(), config.token.get_secret_value().encode()):
            found = config.name
    return found


def _first_problem(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    message = err["msg"].removeprefix("Value error, ")
    return field, f"{field}: {message}"


def store_batch(engine: Engine, batch: BatchIn, now: dt.datetime, presence_gap_s: float = 3600.0) -> bool:
    """Store ``batch`` in one transaction; False when its id was already stored."""
    s = batch.samples
    # The insert parameters are built column-wise by Polars, not by a Python loop per sample.
    rows = (
        pl.DataFrame(s.model_dump(), schema=SAMPLE_SCHEMA)
        .with_row_index("row_no")
        .with_columns(pl.lit(batch.batch_id).alias("batch_id"), pl.lit(batch.agent).alias("agent"))
        .to_dicts()
    )
    head = {
        "batch_id": batch.batch_id,
        "agent": batch.agent,
        "received_at": now,
        "samples": len(rows),
        "first_ts_ms": min(s.ts_ms, default=None),
        "last_ts_ms": max(s.ts_ms, default=None),
    }
    table = PushedBatch.__table__
    try:
        with engine.begin() as conn:
            if conn.execute(select(table.c.batch_id).where(table.c.batch_id == batch.batch_id)).first():
                return False
            conn.execute(insert(table), [head])
            if rows:
                conn.execute(insert(PushedSample.__table__), rows)
            devices = [d.model_dump() for d in batch.devices]
            _replace(conn, PushedDevice, "device_id", batch.agent, devices, now)
            workloads = [w.model_dump() for w in batch.workloads if w.workload_key]
            _replace(conn, PushedWorkload, "workload_key", batch.agent, workloads, now)
            if head["first_ts_ms"] is not None:
                reach = from_ms(head["first_ts_ms"]) + dt.timedelta(seconds=presence_gap_s)
                _rewind_watermark(conn, batch.agent, reach)
    except IntegrityError:  # the same batch id committed concurrently: that one counts
        return False
    return True


def _rewind_watermark(conn: Any, agent: str, reach: dt.datetime) -> None:
    """Late data (a node cut off from the service for hours, then draining its spool): move the
    connector's watermark back to ``reach`` (first reading + presence gap) when it lies past it, so
    the scheduler's next catch-up window (from watermark − presence_gap − 1 h) re-reads those
    hours. Batches of a healthy agent arrive within that reach and change nothing; without this, a
    backlog beyond it would sit in staging and never reach the ledger. A run in flight can still
    move the watermark past it when it finishes (it keeps the max): rare, and ``gpu-ledger
    ingest`` over those hours repairs it."""
    table = ConnectorState.__table__
    conn.execute(
        update(table).where(table.c.name == agent, table.c.watermark > reach).values(watermark=reach)
    )


def _replace(
    conn: Any, model: Any, key: str, agent: str, items: list[dict[str, Any]], now: dt.datetime
) -> None:
    """Upsert by delete-then-insert: portable, and the whole batch is one transaction anyway."""
    if not items:
        return
    table = model.__table__
    keys = [item[key] for item in items]
    conn.execute(delete(table).where(and_(table.c.agent == agent, table.c[key].in_(keys))))
    conn.execute(insert(table), [{**item, "agent": agent, "updated_at": now} for item in items])


def batches_endpoint(
    engine: Engine, connectors: Iterable[ConnectorConfig], telemetry: Telemetry, clock: Clock
) -> Callable[[Request], Any]:
    """The ``POST /api/v1/batches`` handler for the ``agent`` connectors among ``connectors``."""
    agents = [c for c in connectors if isinstance(c, AgentConfig)]
    gap_s = {c.name: c.presence_gap_s for c in agents}
    metrics = PushMetrics.of(telemetry)

    async def post_batches(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            metrics.batches.labels("", "rejected").inc()
            return _error(401, "missing bearer token (Authorization: Bearer <token>)")
        agent = _agent_for(token.strip(), agents)
        if agent is None:
            metrics.batches.labels("", "rejected").inc()
            return _error(403, "token is not valid for any agent connector")
        try:
            batch = BatchIn.model_validate_json(await request.body())
        except ValidationError as exc:
            metrics.batches.labels(agent, "rejected").inc()
            field, message = _first_problem(exc)
            return _error(400, message, field)
        if batch.agent != agent:
            metrics.batches.labels(agent, "rejected").inc()
            return _error(403, f'token is not valid for agent "{batch.agent}"', "agent")
        stored = await run_in_threadpool(store_batch, engine, batch, clock(), gap_s[agent])
        metrics.batches.labels(agent, "accepted" if stored else "duplicate").inc()
        if stored:
            metrics.samples.labels(agent).inc(len(batch.samples.ts_ms))
        body = {"batch_id": batch.batch_id, "duplicate": not stored, "samples": len(batch.samples.ts_ms)}
        return JSONResponse(body)

    return post_batches
