"""``agent``: samples that node agents pushed to the service (``gpu-ledger agent``).

It lives in ``service`` (not ``connectors``) because it reads the service's own staging tables:
a connector plugin depends on the SDK only (tests/test_import_direction.py). It is still
registered in the ``gpu_ledger.connectors`` entry-point group as ``agent``.

Agents ``POST /api/v1/batches`` (``service.push``); the endpoint stores each batch in the staging
tables ``pushed_sample`` / ``pushed_device`` / ``pushed_workload`` under the name of the agent
connector whose token it carried. This connector is then an ordinary metrics source run by the
scheduler: ``collect`` reads the staged samples of its name in a window, columnar.

Configuration (one ``[[connectors]]`` table per agent, or one for a fleet sharing a token)::

    [[connectors]]
    type = "agent"
    name = "gpu-node-17"      # agents push with `name = "gpu-node-17"` in their [agent] table
    token = "…"               # DEPRECATED: agents now send a `push:gpu-node-17` API token
                              # (gpu-ledger tokens create); this key is read for one more release
    period_s = 5              # the agents' sampling period: max_gap = 2 × period
    presence_gap_s = 3600     # see docs/ledger-semantics.md
    retention_days = 7        # staged batches received longer ago than this are deleted

Retention: staging is a buffer, not an archive. A connector run deletes batches *received* more
than ``retention_days`` ago (at most once an hour). Re-ingesting a window older than the retention
finds no samples; don't, or raise ``retention_days`` first.

The connector needs the service's database: it is built with ``engine=`` (``bound_connectors``
does it for ``serve``; ``gpu-ledger ingest`` passes it too). Built without one, it is a
configuration error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, Literal

import polars as pl
from pydantic import Field, SecretStr
from sqlalchemy import Engine, delete, select
from sqlmodel import SQLModel

from connectors.sdk import (
    SAMPLE_SCHEMA,
    ConfigurationError,
    ConnectorConfig,
    DeviceInfo,
    SampleBatch,
    Sampling,
    WorkloadInfo,
    to_ms,
)
from connectors.sdk.shapes import DEVICE, DEVICE_FACTS, WORKLOAD, WORKLOAD_FACTS, names
from service.dbtypes import table_of
from service.models import PushedBatch, PushedDevice, PushedSample, PushedWorkload

PRUNE_EVERY = dt.timedelta(hours=1)
# The staging columns read back: the declared attributes (tests/test_shapes_agree.py holds the
# pushed_* tables and DeviceInfo/WorkloadInfo to them).
DEVICE_FIELDS = names(DEVICE)
WORKLOAD_FIELDS = names(WORKLOAD)


class AgentConfig(ConnectorConfig):
    """``type = "agent"``: the samples agents pushed with this connector's ``name`` and ``token``."""

    type: str = "agent"
    token: SecretStr | None = Field(
        None, min_length=16, description="deprecated: bearer token of the agents pushing here"
    )
    period_s: float = Field(5.0, gt=0, le=3600, description="agents' sampling period, seconds")
    presence_gap_s: float = Field(3600.0, gt=0, description="silence that still counts as present")
    retention_days: float = Field(7.0, gt=0, description="days staged batches are kept after receipt")
    # A node (or the service) down for a weekend must drain its spool into the ledger on return,
    # not into rejected/: pushes older than this are refused, so it defaults to the retention.
    backfill_days: float = Field(7.0, gt=0, description="how late a pushed batch may be, in days")


class AgentConnector:
    """Reads staged pushed samples of ``config.name`` (see the module docstring)."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = AgentConfig

    def __init__(
        self,
        config: AgentConfig,
        *,
        engine: Engine | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        if engine is None:
            raise ConfigurationError(
                f'agent connector "{config.name}" must be built with the service database (engine=)'
            )
        self.config, self.engine, self._clock = config, engine, clock
        self.sampling = Sampling.every(config.period_s, presence_gap_s=config.presence_gap_s)
        self._pruned_at: dt.datetime | None = None

    def discover(self) -> list[DeviceInfo]:
        return self._devices()

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Staged samples with ``start <= ts < end``, as one batch (with every device and workload
        this agent described); prunes expired staging first (see the module docstring)."""
        self.prune()
        table = table_of(PushedSample)
        query = select(*(table.c[c] for c in SAMPLE_SCHEMA)).where(
            table.c.agent == self.config.name, table.c.ts_ms >= to_ms(start), table.c.ts_ms < to_ms(end)
        )
        with self.engine.connect() as conn:
            samples = pl.read_database(query, connection=conn, schema_overrides=SAMPLE_SCHEMA)
        if samples.is_empty():
            return
        # Batch ids make replays no-ops; this also covers an agent that lost its spool's sequence.
        # Of readings that disagree the largest value (then share) is kept, the ledger's own rule
        # (service.ledger.normalize), so the result never depends on which batch came first.
        samples = samples.sort(["value", "share"], descending=True).unique(
            subset=["device_id", "ts_ms", "metric", "workload_key"], keep="first"
        )
        yield SampleBatch(samples.select(SAMPLE_SCHEMA.keys()), self._devices(), self._workloads())

    def prune(self, *, force: bool = False) -> int:
        """Delete batches received more than ``retention_days`` ago; the number deleted."""
        now = self._clock()
        if not force and self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return 0
        self._pruned_at = now
        cutoff = now - dt.timedelta(days=self.config.retention_days)
        batches, samples = table_of(PushedBatch), table_of(PushedSample)
        expired = select(batches.c.batch_id).where(
            batches.c.agent == self.config.name, batches.c.received_at < cutoff
        )
        with self.engine.begin() as conn:
            conn.execute(delete(samples).where(samples.c.batch_id.in_(expired)))
            gone = conn.execute(delete(batches).where(batches.c.batch_id.in_(expired))).rowcount
            for model in (PushedDevice, PushedWorkload):
                t = table_of(model)
                conn.execute(delete(t).where(t.c.agent == self.config.name, t.c.updated_at < cutoff))
        return int(gone or 0)

    def _devices(self) -> list[DeviceInfo]:
        rows = self._rows(PushedDevice, (*DEVICE_FIELDS, DEVICE_FACTS))
        return [DeviceInfo(**{**row, DEVICE_FACTS: row[DEVICE_FACTS] or {}}) for row in rows]

    def _workloads(self) -> list[WorkloadInfo]:
        rows = self._rows(PushedWorkload, (*WORKLOAD_FIELDS, WORKLOAD_FACTS))
        return [WorkloadInfo(**{**row, WORKLOAD_FACTS: row[WORKLOAD_FACTS] or {}}) for row in rows]

    def _rows(self, model: type[SQLModel], fields: Iterable[str]) -> list[dict[str, Any]]:
        table = table_of(model)
        with self.engine.connect() as conn:
            result = conn.execute(
                select(*(table.c[f] for f in fields)).where(table.c.agent == self.config.name)
            )
            return [dict(r) for r in result.mappings()]


def bound_connectors(configs: Iterable[ConnectorConfig], engine: Engine) -> dict[str, AgentConnector]:
    """The enabled ``agent`` connectors of ``configs``, built on the service's ``engine`` (for
    ``Scheduler(connectors=…)``: the registry alone cannot give them a database)."""
    return {
        c.name: AgentConnector(c, engine=engine) for c in configs if isinstance(c, AgentConfig) and c.enabled
    }
