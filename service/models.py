"""Storage: SQLModel tables of the ledger, its prices and its ingestion bookkeeping (docs/design.md §3–5).

Units are in column names (``_s`` seconds, ``_b`` bytes, ``_j`` joules, ``_w`` watts, ``_c`` °C).
Money columns are :class:`service.money.Money` (exact decimals) and always sit beside a currency.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.dbtypes import UTCDateTime
from service.money import FxRateType, Money, Quantity


class DeviceDescription(SQLModel):
    """What a source says about a GPU or MIG instance (``connectors.base.DeviceInfo``, stored)."""

    environment: str = Field(max_length=16, index=True, description="onprem | aws | gcp | azure")
    provider: str | None = Field(default=None, max_length=32)
    account: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=100, description="cloud region or on-prem site")
    cluster: str | None = Field(default=None, max_length=200)
    node: str | None = Field(default=None, max_length=200)
    instance_id: str | None = Field(default=None, max_length=300, description="cloud VM id, joins billing")
    instance_type: str | None = Field(default=None, max_length=100)
    gpu_model: str | None = Field(default=None, max_length=100)
    gpu_index: int | None = None
    parent_device_id: str | None = Field(
        default=None, max_length=200, description="parent GPU of a MIG instance"
    )
    mig_profile: str | None = Field(default=None, max_length=50)
    gpu_fraction: float = Field(default=1.0, description="share of a physical GPU: 1, or MIG slices / 7")
    tdp_w: float | None = Field(default=None, description="board power limit, for estimated energy")
    vendor: str | None = Field(default=None, max_length=16, description="nvidia | amd | intel | huawei")
    # DeviceInfo.tags: attribution facts about the machine (docs/attribution.md), a JSON object
    tags: dict[str, str] | None = Field(default=None, sa_type=JSON, nullable=True)


class Device(DeviceDescription, table=True):
    """One GPU or one MIG instance, with the dimensions its ledger rows inherit."""

    __tablename__ = "device"

    device_id: str = Field(
        primary_key=True, max_length=200, description="GPU-…/MIG-… UUID or <instance>/gpu<i>"
    )
    source: str = Field(max_length=100, description="connector instance that reported it")
    metrics: str = Field(default="", max_length=300, description="comma-separated metric keys seen")
    first_seen: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    last_seen: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class LedgerFacts(SQLModel):
    """Dimensions and additive measures shared by the hourly ledger and its daily rollup."""

    source: str = Field(max_length=100)
    device_id: str = Field(max_length=200)
    workload_key: str = Field(default="", max_length=500, description="'' when nothing occupied the device")
    # device dimensions, copied from Device at ingest so aggregates never join
    environment: str = Field(max_length=16)
    provider: str | None = Field(default=None, max_length=32)
    account: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=100)
    cluster: str | None = Field(default=None, max_length=200)
    node: str | None = Field(default=None, max_length=200)
    instance_id: str | None = Field(default=None, max_length=300)
    instance_type: str | None = Field(default=None, max_length=100)
    gpu_model: str | None = Field(default=None, max_length=100)
    mig_profile: str | None = Field(default=None, max_length=50)
    gpu_fraction: float = 1.0
    vendor: str | None = Field(default=None, max_length=16)
    # workload dimensions
    project: str | None = Field(default=None, max_length=200)
    team: str | None = Field(default=None, max_length=200)
    user_name: str | None = Field(default=None, max_length=200)
    namespace: str | None = Field(default=None, max_length=200)
    workload: str | None = Field(default=None, max_length=300)
    # the [[attribution]] rule that named project (else team, else user); 'source': the connector
    owner_rule: str | None = Field(default=None, max_length=100)
    # time: present = device existed; observed = default metric covered it; busy = ∫ util/100 dt
    default_metric: str = Field(max_length=20, description="sm_active where the device has it, else gpu_util")
    present_s: float = 0.0
    observed_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = Field(default=0.0, description="observed seconds below the idle threshold")
    hist_0_1_s: float = 0.0
    hist_1_5_s: float = 0.0
    hist_5_10_s: float = 0.0
    hist_10_25_s: float = 0.0
    hist_25_50_s: float = 0.0
    hist_50_75_s: float = 0.0
    hist_75_100_s: float = 0.0
    obs_s_gpu_util: float = 0.0
    busy_s_gpu_util: float = 0.0
    idle_s_gpu_util: float = 0.0
    obs_s_sm_active: float = 0.0
    busy_s_sm_active: float = 0.0
    idle_s_sm_active: float = 0.0
    obs_s_tensor_active: float = 0.0
    busy_s_tensor_active: float = 0.0
    idle_s_tensor_active: float = 0.0
    obs_s_mem_bw: float = 0.0
    busy_s_mem_bw: float = 0.0
    idle_s_mem_bw: float = 0.0
    energy_j: float | None = None
    energy_estimated: bool = Field(default=False, description="energy from mean power × time, not a counter")
    mem_used_max_b: float | None = None
    mem_total_b: float | None = None
    temp_max_c: float | None = None
    # cost (docs/design.md §4): cost covers present time; idle_cost is the part spent idle
    cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    idle_cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    energy_cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    currency: str | None = Field(default=None, max_length=3)
    rate_source: str | None = Field(
        default=None, max_length=200, description="billing:… | rate_card:… | tco:…"
    )


class LedgerHour(LedgerFacts, table=True):
    """One (device, UTC hour, workload): the ledger's unit of account (docs/design.md §3.4)."""

    __tablename__ = "ledger_hour"
    __table_args__ = (
        UniqueConstraint("device_id", "hour_start", "workload_key", name="uq_ledger_hour_natural_key"),
        Index("ix_ledger_hour_hour_index", "hour_index"),
        # Keyset pages of HOUR × DEVICE answers stream out of it (migration 0007).
        Index("ix_ledger_hour_hour_device", "hour_index", "device_id"),
        Index("ix_ledger_hour_source_hour", "source", "hour_index"),
    )

    id: int | None = Field(default=None, primary_key=True)
    hour_start: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    hour_index: int = Field(description="hours since 1970-01-01T00Z")
    day_index: int = Field(description="days since 1970-01-01")
    month_index: int = Field(description="calendar months since 1970-01")
    power_avg_w: float | None = None
    mem_used_avg_b: float | None = None


class LedgerDay(LedgerFacts, table=True):
    """Daily rollup of ``ledger_hour`` per (device, workload): rebuilt for every day an ingest touches."""

    __tablename__ = "ledger_day"
    __table_args__ = (
        UniqueConstraint(
            "device_id", "day_index", "workload_key", "currency", name="uq_ledger_day_natural_key"
        ),
        Index("ix_ledger_day_day_index", "day_index"),
    )

    id: int | None = Field(default=None, primary_key=True)
    day_index: int = Field(description="days since 1970-01-01")
    month_index: int
    hours: int = Field(default=0, description="hourly rows folded into this one")


class GpuRate(SQLModel, table=True):
    """A price per GPU-hour for devices matching its scope during [valid_from, valid_to).

    Lower ``precedence`` wins: billing-derived rates (10) beat rate cards (20); the on-prem TCO
    model applies where neither matches. A narrower match (instance id > instance type > GPU
    model > environment only) beats a wider one of the same precedence.
    """

    __tablename__ = "gpu_rate"

    id: int | None = Field(default=None, primary_key=True)
    source_kind: str = Field(max_length=20, description="billing | rate_card")
    source_ref: str = Field(max_length=200, description="rate card name or billing line reference")
    precedence: int = 20
    environment: str = Field(max_length=16, index=True)
    instance_id: str | None = Field(default=None, max_length=300)
    instance_type: str | None = Field(default=None, max_length=100)
    gpu_model: str | None = Field(default=None, max_length=100)
    valid_from: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    valid_to: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    effective_per_gpu_hour: Decimal = Field(sa_type=Money, nullable=False)
    list_per_gpu_hour: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    billed_per_gpu_hour: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    currency: str = Field(max_length=3)


def _byte_ordered(length: int) -> String:
    """A VARCHAR compared byte by byte: ``COLLATE "C"`` on PostgreSQL (SQLite's default is already)."""
    return String(length).with_variant(String(length, collation="C"), "postgresql")


class BillingLine(SQLModel, table=True):
    """One normalized billing line item (``connectors.billing.BILLING_SCHEMA`` plus its source).

    Re-importing a file replaces its lines (``source`` + ``source_file``); ``line_key`` is unique
    per source, so the same line in two files (a duplicated export) is refused, not counted twice.
    """

    __tablename__ = "billing_line"
    __table_args__ = (
        # line_key first: its values start with random line item ids, so PostgreSQL sorts the
        # index's keys at a build by their first bytes (abbreviated keys) — 5.2 → 1.0 s of CPU
        # for a 1 M-line month, where (source, line_key) compared whole keys behind a constant
        # source. Lookups give both columns either way.
        UniqueConstraint("line_key", "source", name="uq_billing_line_source_key"),
        Index("ix_billing_line_resource_start", "resource_id", "charge_start"),
        Index("ix_billing_line_source_file", "source", "source_file"),
    )

    # BIGINT for a large organisation's CUR history; INTEGER on SQLite, where only an INTEGER
    # primary key is the auto-numbered rowid.
    id: int | None = Field(
        default=None, primary_key=True, sa_type=BigInteger().with_variant(Integer, "sqlite")
    )
    source: str = Field(max_length=100, description="the billing connector instance")
    source_file: str = Field(max_length=1000)
    line_no: int
    # COLLATE "C" on PostgreSQL: byte order, the order the server's C.UTF-8 default gives, without
    # a strcoll per comparison (index builds: line_key with the unique key 5.2 → 1.0 s, resource_id
    # 3.5 → 2.8 s of CPU per 1 M lines; migration 0015)
    line_key: str = Field(max_length=200, sa_type=_byte_ordered(200))
    provider: str = Field(max_length=32, index=True)
    billing_account: str | None = Field(default=None, max_length=200)
    account: str | None = Field(default=None, max_length=200)
    charge_start: dt.datetime = Field(sa_type=UTCDateTime, nullable=False, index=True)
    charge_end: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    charge_category: str = Field(max_length=20, description="FOCUS ChargeCategory")
    charge_type: str | None = Field(default=None, max_length=60, description="the source's own line type")
    pricing_model: str | None = Field(default=None, max_length=20)
    commitment_id: str | None = Field(default=None, max_length=500)
    resource_id: str | None = Field(default=None, max_length=500, sa_type=_byte_ordered(500))
    resource_name: str | None = Field(default=None, max_length=300)
    service: str | None = Field(default=None, max_length=200)
    sku: str | None = Field(default=None, max_length=300)
    sku_description: str | None = Field(default=None, max_length=500)
    instance_type: str | None = Field(default=None, max_length=100)
    region: str | None = Field(default=None, max_length=100)
    usage_quantity: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    usage_unit: str | None = Field(default=None, max_length=50)
    gpu_count: int | None = None
    gpu_hours: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    is_gpu_sku: bool | None = None
    billed_cost: Decimal = Field(sa_type=Money, nullable=False)
    effective_cost: Decimal = Field(sa_type=Money, nullable=False)
    list_cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    currency: str = Field(max_length=3)
    tags: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class BillingFile(SQLModel, table=True):
    """One imported export file: what it held and how it was counted
    (``rows_read == rows_accepted + rows_refused + rows_skipped``)."""

    __tablename__ = "billing_file"
    __table_args__ = (UniqueConstraint("source", "source_file", name="uq_billing_file_source_file"),)

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=100)
    source_file: str = Field(max_length=1000)
    billing_period_start: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    assembly_id: str | None = Field(default=None, max_length=200, description="AWS CUR assembly")
    rows_read: int
    rows_accepted: int
    rows_refused: int
    rows_skipped: int
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # what an operator should know though the file imported (e.g. currencies without an FX rate)
    notice: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    imported_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class FxRate(SQLModel, table=True):
    """1 ``base`` = ``rate`` ``quote`` on ``day`` (operator-maintained)."""

    __tablename__ = "fx_rate"
    __table_args__ = (UniqueConstraint("base", "quote", "day", name="uq_fx_rate_pair_day"),)

    id: int | None = Field(default=None, primary_key=True)
    base: str = Field(max_length=3)
    quote: str = Field(max_length=3)
    day: dt.date
    rate: Decimal = Field(sa_type=FxRateType, nullable=False)


class ConnectorState(SQLModel, table=True):
    """Where each connector instance stands: its watermark and health (see ConnectorStatus)."""

    __tablename__ = "connector_state"

    name: str = Field(primary_key=True, max_length=100)
    type: str = Field(max_length=50)
    status: str = Field(max_length=30)
    watermark: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    last_run_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    last_success_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # the last run's warnings that did not fail it (e.g. currencies without an FX rate)
    notice: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class ConnectorRun(SQLModel, table=True):
    """One ingestion of one window by one connector; read = accepted + rejected."""

    __tablename__ = "connector_run"

    id: int | None = Field(default=None, primary_key=True)
    connector: str = Field(max_length=100, index=True)
    window_start: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    window_end: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    started_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    finished_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    status: str = Field(max_length=30)
    read: int = 0
    accepted: int = 0
    rejected: int = 0
    ledger_rows: int = 0
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # Who runs it (service.runlocks): the process holds lock ``owner_lock`` until the run ends, so
    # a RUNNING run whose lock is free belongs to a process that is gone (then it is ABORTED).
    # Host and pid say which process it was; null on runs from before migration 0003.
    owner_host: str | None = Field(default=None, max_length=255)
    owner_pid: int | None = None
    owner_lock: int | None = None
    # data-quality findings of the run: rows imported although they break a rule (billing)
    findings: int = Field(default=0, sa_column_kwargs={"server_default": "0"})


class Rejection(SQLModel, table=True):
    """A quarantined input record with the reason it was refused."""

    __tablename__ = "rejection"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, index=True)
    connector: str = Field(max_length=100)
    file: str | None = Field(default=None, max_length=500)
    line: int | None = None
    field: str | None = Field(default=None, max_length=100)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    raw: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class DataQualityFinding(SQLModel, table=True):
    """Rows of one export file that were imported although they break a rule
    (``connectors.billing.Finding``): counted per (rule, column, reason, provider), with the first
    few as examples. A file's findings are replaced with its lines when it is imported again."""

    __tablename__ = "data_quality_finding"
    __table_args__ = (
        Index("ix_data_quality_finding_file", "connector", "source_file"),
        Index("ix_data_quality_finding_period", "period_start"),
    )

    id: int | None = Field(default=None, primary_key=True)
    connector: str = Field(max_length=100, description="the billing connector instance")
    run_id: int = Field(index=True, description="the connector_run that imported the file")
    source_file: str = Field(max_length=1000)
    provider: str | None = Field(default=None, max_length=32, description="where a file holds several")
    rule: str = Field(max_length=60, description="stable snake_case id: unknown_value, negative_usage…")
    column_name: str | None = Field(default=None, max_length=200, description="as the file spells it")
    reason: str = Field(sa_column=Column(Text, nullable=False))
    count: int = Field(description="rows imported that break the rule")
    examples: str = Field(
        sa_column=Column(Text, nullable=False), description='JSON list of {"line": n, "value": text}'
    )
    # the file's billing period, else the window of the run that read it
    period_start: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    period_end: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    recorded_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


# --- push staging: what node agents sent, before the `agent` connector ingests it --------------


class PushedBatch(SQLModel, table=True):
    """One batch an agent pushed to ``POST /api/v1/batches``; its id makes a replay a no-op."""

    __tablename__ = "pushed_batch"
    __table_args__ = (Index("ix_pushed_batch_agent_received", "agent", "received_at"),)

    batch_id: str = Field(primary_key=True, max_length=200, description="<agent-id>:<seq>")
    agent: str = Field(max_length=100, description="the `agent` connector (token) it was pushed to")
    received_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    samples: int = Field(default=0, description="rows in pushed_sample")
    content_sha256: str | None = Field(
        default=None, max_length=64, description="hash of the batch's body: a replay must match it"
    )
    first_ts_ms: int | None = Field(default=None, sa_type=BigInteger)
    last_ts_ms: int | None = Field(default=None, sa_type=BigInteger)


class PushedSample(SQLModel, table=True):
    """One pushed reading (``connectors.base.SAMPLE_SCHEMA`` plus where it came from)."""

    __tablename__ = "pushed_sample"
    __table_args__ = (Index("ix_pushed_sample_agent_ts", "agent", "ts_ms"),)

    batch_id: str = Field(primary_key=True, max_length=200)
    row_no: int = Field(primary_key=True, description="position in the batch")
    agent: str = Field(max_length=100)
    device_id: str = Field(max_length=200)
    ts_ms: int = Field(sa_type=BigInteger, description="ms since the Unix epoch, UTC")
    metric: str = Field(max_length=20)
    value: float
    workload_key: str = Field(default="", max_length=500)
    share: float = 1.0


class PushedDevice(DeviceDescription, table=True):
    """A device as its agent last described it."""

    __tablename__ = "pushed_device"

    agent: str = Field(primary_key=True, max_length=100)
    device_id: str = Field(primary_key=True, max_length=200)
    updated_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class PushedWorkload(SQLModel, table=True):
    """A workload as its agent last described it (``connectors.base.WorkloadInfo`` fields)."""

    __tablename__ = "pushed_workload"

    agent: str = Field(primary_key=True, max_length=100)
    workload_key: str = Field(primary_key=True, max_length=500)
    project: str | None = Field(default=None, max_length=200)
    team: str | None = Field(default=None, max_length=200)
    user_name: str | None = Field(default=None, max_length=200)
    namespace: str | None = Field(default=None, max_length=200)
    workload: str | None = Field(default=None, max_length=300)
    facts: dict[str, str] | None = Field(default=None, sa_type=JSON, nullable=True)
    updated_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class WorkloadFact(SQLModel, table=True):
    """What a source last said about a workload, kept so ``gpu-ledger reattribute`` can apply the
    current ``[[attribution]]`` rules to stored ledger rows: its facts, and the owner the source
    itself named (a rule may have overwritten the ledger's copy). docs/attribution.md."""

    __tablename__ = "workload_fact"

    source: str = Field(primary_key=True, max_length=100, description="the connector instance")
    workload_key: str = Field(primary_key=True, max_length=500)
    facts: dict[str, str] | None = Field(default=None, sa_type=JSON, nullable=True)
    project: str | None = Field(default=None, max_length=200, description="as the source named it")
    team: str | None = Field(default=None, max_length=200, description="as the source named it")
    user_name: str | None = Field(default=None, max_length=200, description="as the source named it")
    updated_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class FactScope(SQLModel, table=True):
    """Which metrics sources a facts connector's ``workload_fact`` rows describe: its ``describes``
    key as its last run had it (null, or no row: every source). Two clusters' schedulers that number
    jobs alike each describe their own cluster's sources (service/attribution/shared_facts.py)."""

    __tablename__ = "fact_scope"

    source: str = Field(primary_key=True, max_length=100, description="the facts connector")
    describes: list[str] | None = Field(default=None, sa_type=JSON, nullable=True)
    updated_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class WorkloadFactDay(SQLModel, table=True):
    """What a source said about a workload for one UTC day its ledger rows cover, so that
    ``gpu-ledger reattribute`` re-decides a day with the facts of that day, not with a later day's
    (a pod relabelled in June must not move May). Written by every ingest of the day, the last one
    winning; ``workload_fact`` keeps the latest, for days ingested before this table existed."""

    __tablename__ = "workload_fact_day"

    source: str = Field(primary_key=True, max_length=100, description="the connector instance")
    workload_key: str = Field(primary_key=True, max_length=500)
    day_index: int = Field(primary_key=True, description="UTC days since 1970-01-01")
    facts: dict[str, str] | None = Field(default=None, sa_type=JSON, nullable=True)
    project: str | None = Field(default=None, max_length=200, description="as the source named it")
    team: str | None = Field(default=None, max_length=200, description="as the source named it")
    user_name: str | None = Field(default=None, max_length=200, description="as the source named it")


class DeviceTagDay(SQLModel, table=True):
    """A device's tags (instance tags, node labels: attribution facts) as its source reported them
    for one UTC day its ledger rows cover; ``device.tags`` keeps the latest. As ``workload_fact_day``."""

    __tablename__ = "device_tag_day"

    device_id: str = Field(primary_key=True, max_length=200)
    day_index: int = Field(primary_key=True, description="UTC days since 1970-01-01")
    tags: dict[str, str] | None = Field(default=None, sa_type=JSON, nullable=True)


# --- access: API tokens (service.auth.tokens) -----------------------------------------------


class ApiToken(SQLModel, table=True):
    """An API token: its secret is shown once at creation and stored only as a SHA-256 hash."""

    __tablename__ = "api_token"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=100, unique=True)
    secret_sha256: str = Field(max_length=64, unique=True, description="hex SHA-256 of the secret")
    scopes: str = Field(sa_column=Column(Text, nullable=False), description="space-separated scopes")
    created_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    expires_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    revoked_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    last_used_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)


# --- answer cache: which state of the ledger an answer was computed from ---------------------


class LedgerVersion(SQLModel, table=True):
    """One row (``id`` 1) whose ``version`` goes up by one in the same transaction as every
    committed write that can change an API answer (``service.ledger.version.bump``). A cached answer
    is keyed by it, so an answer computed before a commit is never served after it, in any process."""

    __tablename__ = "ledger_version"

    id: int = Field(default=1, primary_key=True, sa_column_kwargs={"autoincrement": False})
    version: int = Field(default=0, sa_type=BigInteger, description="bumped by every answer-changing commit")


# --- dashboard rollups: the ledger summed over devices, per hour and per day (service.ledger.rollups)


class LedgerGroupFacts(SQLModel):
    """``ledger_hour`` summed over the devices that share every non-device dimension an answer may be
    grouped or filtered by. Device-level columns (device_id, node, instance_id, mig_profile, source,
    workload_key, workload) are not kept: a question about them reads the device-level ledger."""

    # keys (NULL is one group, as in GROUP BY)
    environment: str = Field(max_length=16)
    provider: str | None = Field(default=None, max_length=32)
    account: str | None = Field(default=None, max_length=200)
    region: str | None = Field(default=None, max_length=100)
    cluster: str | None = Field(default=None, max_length=200)
    instance_type: str | None = Field(default=None, max_length=100)
    gpu_model: str | None = Field(default=None, max_length=100)
    vendor: str | None = Field(default=None, max_length=16)
    gpu_fraction: float = Field(default=1.0, description="kept as a key: GPU-hours weigh seconds by it")
    project: str | None = Field(default=None, max_length=200)
    team: str | None = Field(default=None, max_length=200)
    user_name: str | None = Field(default=None, max_length=200)
    namespace: str | None = Field(default=None, max_length=200)
    owner_rule: str | None = Field(default=None, max_length=100)
    unallocated: bool = Field(default=False, description="workload_key = '' (time nobody held)")
    default_metric: str = Field(max_length=20)
    currency: str | None = Field(default=None, max_length=3)
    rate_source: str | None = Field(default=None, max_length=200)
    # measures: sums of the hours' (seconds, joules, money), maxima of the hours' maxima
    hour_rows: int = Field(default=0, description="ledger_hour rows folded into this one")
    present_s: float = 0.0
    observed_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = 0.0
    hist_0_1_s: float = 0.0
    hist_1_5_s: float = 0.0
    hist_5_10_s: float = 0.0
    hist_10_25_s: float = 0.0
    hist_25_50_s: float = 0.0
    hist_50_75_s: float = 0.0
    hist_75_100_s: float = 0.0
    obs_s_gpu_util: float = 0.0
    busy_s_gpu_util: float = 0.0
    idle_s_gpu_util: float = 0.0
    obs_s_sm_active: float = 0.0
    busy_s_sm_active: float = 0.0
    idle_s_sm_active: float = 0.0
    obs_s_tensor_active: float = 0.0
    busy_s_tensor_active: float = 0.0
    idle_s_tensor_active: float = 0.0
    obs_s_mem_bw: float = 0.0
    busy_s_mem_bw: float = 0.0
    idle_s_mem_bw: float = 0.0
    energy_j: float | None = None
    energy_estimated: bool = False
    mem_used_max_b: float | None = None
    mem_total_b: float | None = None
    temp_max_c: float | None = None
    cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    idle_cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)
    energy_cost: Decimal | None = Field(default=None, sa_type=Money, nullable=True)


class LedgerGroupHour(LedgerGroupFacts, table=True):
    """Per UTC hour: rebuilt with ``ledger_day`` for every day an ingest touches."""

    __tablename__ = "ledger_group_hour"
    __table_args__ = (Index("ix_ledger_group_hour_hour_index", "hour_index"),)

    id: int | None = Field(default=None, primary_key=True)
    hour_index: int = Field(description="hours since 1970-01-01T00Z")
    day_index: int
    month_index: int


class LedgerGroupDay(LedgerGroupFacts, table=True):
    """Per UTC day: the sum of the day's ``ledger_group_hour`` rows."""

    __tablename__ = "ledger_group_day"
    __table_args__ = (Index("ix_ledger_group_day_day_index", "day_index"),)

    id: int | None = Field(default=None, primary_key=True)
    day_index: int
    month_index: int


class LedgerRetention(SQLModel, table=True):
    """One row (``id`` 1): ``ledger_hour`` holds no hour before ``hours_before`` (``gpu-ledger prune``
    dropped them); ``ledger_day`` and the group rollups keep those days, and no writer may rebuild them."""

    __tablename__ = "ledger_retention"

    id: int = Field(default=1, primary_key=True, sa_column_kwargs={"autoincrement": False})
    hours_before: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)


class LedgerHourSegment(SQLModel, table=True):
    """One UTC day of ``ledger_hour`` as an Arrow IPC file (service/ledger/segments.py): its rows
    sorted by (hour, device, workload) with the columns device-level usage answers read; rebuilt
    with the day's other rollups in the transaction that rewrote any of its hours."""

    __tablename__ = "ledger_hour_segment"

    day_index: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    hour_rows: int = Field(description="ledger_hour rows of the day: the file's rows")
    arrow: bytes = Field(sa_type=LargeBinary, nullable=False)


class AlertState(SQLModel, table=True):
    """Where each alert stands: one row per (rule, subject), kept across restarts and processes
    (service/alerts/store.py). ``notified`` says whether the current firing was announced."""

    __tablename__ = "alert_state"

    rule: str = Field(primary_key=True, max_length=100, description="the [[alerts]] rule's name")
    subject_key: str = Field(
        primary_key=True, max_length=600, description="what fired: source/workload, project…"
    )
    kind: str = Field(max_length=40)
    state: str = Field(max_length=10, description="FIRING | RESOLVED")
    subject: str = Field(max_length=600, description="for a person: workload name, project, connector")
    project: str | None = Field(
        default=None, max_length=200, description="scopes the alert (null: account-wide)"
    )
    team: str | None = Field(default=None, max_length=200)
    value: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    unit: str = Field(default="", max_length=10, description="of value and threshold: h, s, or a currency")
    threshold: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    message: str = Field(sa_column=Column(Text, nullable=False))
    since: dt.datetime = Field(sa_type=UTCDateTime, nullable=False, description="the current state began")
    first_fired_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    last_true_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False, description="condition last held")
    notified: bool = Field(default=False, description="the current firing was sent to the channels")
    last_fire_notified_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)


class AlertEvent(SQLModel, table=True):
    """History: one row per state change of an alert (fired, resolved) and per delayed announcement."""

    __tablename__ = "alert_event"
    __table_args__ = (Index("ix_alert_event_at", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    rule: str = Field(max_length=100)
    subject_key: str = Field(max_length=600)
    kind: str = Field(max_length=40)
    state: str = Field(max_length=10, description="FIRING | RESOLVED")
    at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    subject: str = Field(max_length=600)
    project: str | None = Field(default=None, max_length=200)
    team: str | None = Field(default=None, max_length=200)
    value: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    unit: str = Field(default="", max_length=10)
    threshold: Decimal | None = Field(default=None, sa_type=Quantity, nullable=True)
    message: str = Field(sa_column=Column(Text, nullable=False))
    since: dt.datetime = Field(
        sa_type=UTCDateTime, nullable=False, description="the state began (before ``at`` when announced late)"
    )
    notify: bool = Field(description="sent to the rule's channels (false: held back by min_interval)")
    deliveries: str = Field(
        default="",
        sa_column=Column(Text, nullable=False),
        description="per channel: SENT | PENDING | RETRYING … | FAILED (why) | DROPPED, from alert_delivery",
    )


class AlertDelivery(SQLModel, table=True):
    """The outbox: one row per announcement (``alert_event``) and channel, written in the
    evaluation's transaction and sent after it commits; a failed send is retried at later
    evaluations, in order per channel, until it is sent or too old (service/alerts/outbox.py)."""

    __tablename__ = "alert_delivery"
    __table_args__ = (Index("ix_alert_delivery_status_channel", "status", "channel", "event_id"),)

    event_id: int = Field(
        foreign_key="alert_event.id", primary_key=True, sa_column_kwargs={"autoincrement": False}
    )
    channel: str = Field(primary_key=True, max_length=100, description="the [[alert_channels]] name")
    position: int = Field(default=0, description="the channel's place in the rule's list (the text's order)")
    status: str = Field(max_length=10, description="PENDING | SENT | FAILED (gave up) | DROPPED")
    attempts: int = Field(default=0, description="sends tried (each one with the channel's own retries)")
    next_attempt_at: dt.datetime = Field(
        sa_type=UTCDateTime, nullable=False, description="PENDING: due from then (also a claim's lease)"
    )
    last_error: str = Field(default="", sa_column=Column(Text, nullable=False))
    sent_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)


class AlertEvaluation(SQLModel, table=True):
    """One row (``id`` 1), updated first by every evaluation: its row lock makes evaluations of
    several processes take turns (service/alerts/store.py)."""

    __tablename__ = "alert_evaluation"

    id: int = Field(default=1, primary_key=True, sa_column_kwargs={"autoincrement": False})
    evaluated_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    evaluations: int = 0


class ReportDelivery(SQLModel, table=True):
    """A scheduled report claimed for one period (``[[reports]]``, service/reports/schedule.py): the
    row is written before the e-mail is sent, so neither a restart nor a second scheduler sends a
    period twice; ``sent_at`` is set once the relay accepted it."""

    __tablename__ = "report_delivery"

    name: str = Field(primary_key=True, max_length=100)
    period: str = Field(primary_key=True, max_length=10)
    claimed_at: dt.datetime = Field(sa_type=UTCDateTime, nullable=False)
    sent_at: dt.datetime | None = Field(default=None, sa_type=UTCDateTime, nullable=True)
    recipients: int = 0
