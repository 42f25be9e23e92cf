"""Slurm: who owns a GPU job, from the scheduler's accounting (``sacct --parsable2``).

The GPU-hours themselves come from the metrics sources, which see Slurm jobs as ``slurm:<jobid>``
(the node agent reads the job's cgroup, connectors/cgroups.py) or ``hpc:<jobid>`` (dcgm-exporter's
``hpc_job`` label). This connector says whose those jobs are: per GPU job it gives both keys with
the facts ``slurm.job``, ``slurm.account``, ``slurm.partition``, ``slurm.user`` and ``slurm.qos``,
and the job's user as the owner Slurm itself names, so ``[[attribution]]`` rules can turn an
account into a project (docs/slurm.md).

What it reads — the accounting command it runs, or the same output recorded in a file::

    TZ=UTC sacct --allusers --parsable2 --allocations --duplicates \\
        --starttime 2026-11-30T00:00:00 --endtime 2026-12-01T00:00:00 \\
        --format JobID,JobIDRaw,User,Account,Partition,QOS,State,AllocTRES,NodeList,Start,End,Elapsed

(the flags XDMoD's ``xdmod-slurm-helper`` uses, with the header kept so columns are found by name;
a ``--noheader`` file is read with the configured ``fields``); or ``sacct --json`` — the JSON
slurmrestd's ``/slurmdb/v0.0.4x/jobs`` answers too — put into the same fields
(:func:`parse_sacct_json`). Times are read in ``time_zone`` (sacct prints the local time of the
machine that runs it: run it with ``TZ=UTC``, as this connector and XDMoD do); an explicit offset
(``SLURM_TIME_FORMAT=%Y-%m-%dT%H:%M:%S%z``) is honoured.

Job ids: ``JobIDRaw`` is the number the job's cgroup (``job_<id>``) and ``$SLURM_JOB_ID`` carry —
an array task's own id (``JobID`` ``123_4``), a heterogeneous component's own id (``123+1``) —
so keys use it; ``JobID`` as sacct shows it becomes the workload's name. Step records
(``123.batch``, ``123.extern``, ``123.0``) are skipped: the allocation is the job's. A job's GPUs are
AllocTRES's ``gres/gpu=N`` (what XDMoD counts), else the sum of its typed ``gres/gpu:<type>=N``.
Pending jobs (nothing allocated yet) and jobs without GPUs are skipped and counted; a running job's
``End`` is ``Unknown``. Every other record that cannot be read is refused with its file, line, field
and reason; ``read == accepted + skipped + refused``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx
import polars as pl
from pydantic import Field, SecretStr, field_validator, model_validator

from connectors.sdk import (
    ConfigurationError,
    ConnectorConfig,
    ConnectorError,
    FactsConnectorConfig,
    FatalSourceError,
    RefusedRow,
    RetriableError,
    WorkloadInfo,
)
from connectors.sdk.facts import FactsBatch

if TYPE_CHECKING:
    from collections.abc import Callable

#: The sacct fields this connector reads (``--format``), in the order a ``--noheader`` file has them.
SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "JobIDRaw",
    "User",
    "Account",
    "Partition",
    "QOS",
    "State",
    "AllocTRES",
    "NodeList",
    "Start",
    "End",
    "Elapsed",
)
#: Fields without which a record cannot be read (QOS, NodeList and Elapsed are optional).
REQUIRED_FIELDS: tuple[str, ...] = ("JobID", "JobIDRaw", "User", "Account", "Partition", "State", "AllocTRES")
REQUIRED_TIME_FIELDS: tuple[str, ...] = ("Start", "End")
#: Job states (the first word: ``CANCELLED by 1234``) from sacct(1) "JOB STATE CODES".
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
ACTIVE_STATES = frozenset({"RUNNING", "REQUEUED", "RESIZING", "SUSPENDED"})
PENDING_STATE = "PENDING"
KNOWN_STATES = ENDED_STATES | ACTIVE_STATES | {PENDING_STATE}
#: Longest text value kept (a fact's bound in the push API); longer is refused, not cut.
MAX_VALUE_CHARS = 300
MAX_LINE_CHARS = 65_536
MAX_GPUS_PER_JOB = 1_000_000
# ``123``, ``123_4``, ``123_[5-9%2]`` (an array's pending remainder), ``123+0``, each with an optional
# step suffix (``.batch``, ``.extern``, ``.interactive``, ``.0``, ``.4294967292``).
_JOB_ID = r"^\d{1,10}(?:_(?:\d{1,10}|\[[0-9,\-%]{1,200}\]))?(?:\+\d{1,10})?(?:\.[A-Za-z0-9_]{1,30})?$"
_RAW_ID = r"^\d{1,10}$"
# AllocTRES: `name=value` pairs (`billing=8,cpu=8,gres/gpu:h200=1,gres/gpu=1,mem=200G,node=1`).
_TRES = r"^(?:[^=,]+=[^=,]*(?:,[^=,]+=[^=,]*)*)?$"
_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$"
_TIME_OFFSET = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:Z|[+-]\d{2}:?\d{2})$"
_NO_TIME = ("Unknown", "None", "")
_CONTROL = r"[\x00-\x1f\x7f\ufffd]"


class SlurmConfig(FactsConnectorConfig):
    """``[[connectors]] type = "slurm"``: where the accounting records come from.

    ``path``: a recorded ``sacct --parsable2`` file (read each run). Without it the connector runs
    ``sacct`` (``sacct``: its path) with ``TZ=UTC`` for each window, adding ``clusters`` and
    ``extra_args`` to the flags in the module docstring. ``output = "json"`` reads ``sacct --json``
    (or a saved slurmrestd ``/slurmdb/v0.0.4x/jobs`` answer) instead; with ``url`` it asks
    slurmrestd itself (``api_version``, ``user_name``, ``token``: its JWT). ``fields``: the columns of a
    file without a header line, in order. ``time_zone``: the zone of times written without an offset.
    ``describes``: the metrics sources of this cluster, where several clusters feed one ledger
    (:class:`~connectors.sdk.config.FactsConnectorConfig`).
    """

    type: Literal["slurm"] = "slurm"
    interval_s: float = 900.0
    path: str | None = None
    output: Literal["parsable2", "json"] = "parsable2"
    #: slurmrestd instead of sacct: its base URL, the API release and the JWT (``scontrol token``)
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$", max_length=500)
    api_version: str = Field(default="v0.0.40", pattern=r"^v0\.0\.\d{2}$")
    user_name: str | None = Field(default=None, max_length=100)
    token: SecretStr | None = None
    sacct: str = "sacct"
    clusters: str | None = Field(default=None, max_length=200, pattern=r"^[A-Za-z0-9_.,-]+$")
    extra_args: list[str] = Field(default_factory=list, max_length=50)
    fields: list[str] = Field(default_factory=lambda: list(SACCT_FIELDS), min_length=1, max_length=100)
    time_zone: str = "UTC"
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_bytes: int = Field(default=256 * 1024 * 1024, gt=0)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown IANA time zone {name!r}") from None
        return name

    @model_validator(mode="after")
    def _one_source(self) -> SlurmConfig:
        if self.path is not None and self.url is not None:
            raise ValueError("give path (a recorded file) or url (slurmrestd), not both")
        if self.url is not None and self.output != "json":
            raise ValueError('slurmrestd answers JSON: set output = "json" with url')
        return self

    @model_validator(mode="after")
    def _fields_known(self) -> SlurmConfig:
        missing = [f for f in (*REQUIRED_FIELDS, *REQUIRED_TIME_FIELDS) if f not in self.fields]
        if missing:
            raise ValueError(f"fields lacks {', '.join(missing)}")
        return self


@dataclass(frozen=True, slots=True)
class SacctRecords:
    """A parsed sacct output: ``jobs`` one row per GPU job record (columns ``line``, ``job_id``,
    ``job_id_raw``, ``user``, ``account``, ``partition``, ``qos``, ``state``, ``gpus``, ``start``,
    ``end`` (null while running), ``node_list``); counts that add up to ``read``."""

    jobs: pl.DataFrame
    read: int
    skipped: dict[str, int] = field(default_factory=dict)
    refused: list[RefusedRow] = field(default_factory=list)


def parse_sacct(
    text: str, *, file: str, fields: Sequence[str] = SACCT_FIELDS, time_zone: str = "UTC"
) -> SacctRecords:
    """Read ``sacct --parsable2`` (or ``--parsable``: a trailing ``|``) output, with or without its
    header line; ``file`` names it in refusals. Vectorized: the lines are one Polars column."""
    # Lines end at "\n" only (str.splitlines would also split at \x1c, \u2028…: line numbers
    # would no longer be the file's).
    lines = pl.Series("raw", text.split("\n"), dtype=pl.String).str.strip_suffix("\r")
    frame = (
        pl.DataFrame([lines]).with_row_index("line", offset=1).filter(pl.col("raw").str.strip_chars() != "")
    )
    names = list(fields)
    header_line: int | None = None
    trailing = False
    if frame.height:
        first = frame.row(0, named=True)
        cells = first["raw"].removesuffix("|").split("|")
        if {c.lower() for c in cells} >= {"jobid", "jobidraw"}:
            header_line, names = first["line"], cells
            trailing = first["raw"].endswith("|")  # --parsable ends every line with the delimiter
            frame = frame.slice(1)
    known = {n.lower(): n for n in SACCT_FIELDS}
    names = [known.get(n.lower(), n) for n in names]
    absent = [n for n in (*REQUIRED_FIELDS, *REQUIRED_TIME_FIELDS) if n not in names]
    if absent:
        where = f"the header (line {header_line})" if header_line else "the configured fields"
        raise ConnectorError(f"{file}: {where} lacks {', '.join(absent)}")
    raw = pl.col("raw").str.strip_suffix("|") if trailing else pl.col("raw")
    frame = frame.with_columns(raw.str.split("|").alias("cells"))
    checks: list[tuple[pl.Expr, str | None, pl.Expr]] = [
        (
            pl.col("raw").str.len_chars() > MAX_LINE_CHARS,
            None,
            pl.lit(f"longer than {MAX_LINE_CHARS} characters"),
        ),
        (
            pl.col("raw").str.contains("\ufffd", literal=True),
            None,
            pl.lit("not UTF-8 text"),
        ),
        (
            pl.col("cells").list.len() != len(names),
            None,
            pl.format(
                "{} fields, {} {}",
                pl.col("cells").list.len(),
                pl.lit("the header has" if header_line else "the configured fields are"),
                pl.lit(len(names)),
            ),
        ),
    ]
    frame = frame.with_columns(_first_failure(checks))
    bad_shape = frame.filter(pl.col("__reason").is_not_null())
    jobs = frame.filter(pl.col("__reason").is_null()).select(
        "line", "raw", *[pl.col("cells").list.get(i).alias(n) for i, n in enumerate(names)]
    )
    return _checked(jobs, bad_shape.select("line", "__reason", "raw"), file=file, time_zone=time_zone)


def _checked(jobs: pl.DataFrame, bad_shape: pl.DataFrame, *, file: str, time_zone: str) -> SacctRecords:
    """The records (``line``, ``raw`` and sacct's fields as text) read, skipped or refused;
    ``bad_shape`` (``line``, ``__reason``, ``raw``) the records already refused whole."""
    for optional in ("QOS", "NodeList"):
        if optional not in jobs.columns:
            jobs = jobs.with_columns(pl.lit("").alias(optional))
    jobs = _typed(jobs, time_zone)
    step = pl.col("job_id").str.contains(".", literal=True)
    pending = pl.col("state") == PENDING_STATE
    record_checks: list[tuple[pl.Expr, str | None, pl.Expr]] = [
        (~pl.col("job_id").str.contains(_JOB_ID), "JobID", pl.format("not a job id: {}", _shown("job_id"))),
        (step, "__step", pl.lit("")),
        (
            ~pl.col("state").is_in(sorted(KNOWN_STATES)),
            "State",
            pl.format("unknown job state {}", _shown("State")),
        ),
        (pending, "__pending", pl.lit("")),
        (
            ~pl.col("job_id_raw").str.contains(_RAW_ID),
            "JobIDRaw",
            pl.format("not a job id: {}", _shown("job_id_raw")),
        ),
        (
            ~pl.col("AllocTRES").str.contains(_TRES),
            "AllocTRES",
            pl.format("not TRES: {}", _shown("AllocTRES")),
        ),
        (
            ~pl.col("gpu_counts_ok"),
            "AllocTRES",
            pl.format("a GPU count that is not a number: {}", _shown("AllocTRES")),
        ),
        (pl.col("gpus").is_null(), "AllocTRES", pl.lit(f"a GPU count over {MAX_GPUS_PER_JOB}")),
        (pl.col("gpus") == 0, "__no_gpu", pl.lit("")),
        *[
            (
                pl.col(source).str.contains(_CONTROL) | (pl.col(source).str.len_chars() > MAX_VALUE_CHARS),
                source,
                pl.lit(f"control characters or longer than {MAX_VALUE_CHARS} characters"),
            )
            for source in ("User", "Account", "Partition", "QOS", "NodeList")
        ],
        (pl.col("user") == "", "User", pl.lit("empty: a job has a user")),
        (pl.col("start").is_null(), "Start", _time_reason("Start", "a GPU job that ran has a start")),
        (
            pl.col("end").is_null() & pl.col("state").is_in(sorted(ENDED_STATES)),
            "End",
            _time_reason("End", "an ended job has an end"),
        ),
        (
            pl.col("end") < pl.col("start"),
            "End",
            pl.format("{} is before Start {}", _shown("End"), _shown("Start")),
        ),
    ]
    jobs = jobs.with_columns(_first_failure(record_checks))
    outcome = jobs.group_by("__column").len().filter(pl.col("__column").str.starts_with("__"))
    skipped = {
        {"__step": "job steps", "__pending": "pending jobs", "__no_gpu": "jobs without GPUs"}[c]: n
        for c, n in outcome.iter_rows()
    }
    refused_rows = pl.concat(
        [
            bad_shape.select(
                pl.col("line").cast(pl.UInt32), pl.lit(None, pl.String).alias("__column"), "__reason", "raw"
            ),
            jobs.filter(
                pl.col("__reason").is_not_null() & ~pl.col("__column").fill_null("").str.starts_with("__")
            ).select("line", "__column", "__reason", "raw"),
        ]
    ).sort("line")
    refused = [
        RefusedRow(file=file, line=line, column=column, reason=reason, raw=raw_line[:1000])
        for line, column, reason, raw_line in refused_rows.iter_rows()
    ]
    good = jobs.filter(pl.col("__reason").is_null()).select(
        "line",
        "job_id",
        "job_id_raw",
        "user",
        "account",
        "partition",
        "qos",
        "state",
        "gpus",
        "start",
        "end",
        "node_list",
    )
    return SacctRecords(jobs=good, read=jobs.height + bad_shape.height, skipped=skipped, refused=refused)


def parse_sacct_json(text: str, *, file: str) -> SacctRecords:
    """Read ``sacct --json`` output — the JSON slurmrestd's ``/slurmdb/v0.0.4x/jobs`` answers too
    (Slurm's data_parser) — into the same records as the text form: each element of ``jobs`` is a
    record (its ``line`` is its 1-based position there), its fields put as sacct prints them
    (``JobID`` ``5000_1`` from ``array``, ``6000+1`` from ``het``; ``AllocTRES`` from
    ``tres.allocated``; times from ``time.start``/``time.end``, epoch seconds, 0 = unknown), then
    checked by the same rules. A loop per job record builds the columns (the JSON is a tree)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConnectorError(f"{file}: not JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, list):
        raise ConnectorError(
            f'{file}: no "jobs" list (the output of sacct --json or slurmrestd\'s slurmdb jobs)'
        )
    rows: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for line, job in enumerate(jobs, 1):
        try:
            rows.append({"line": line, "raw": json.dumps(job)[:1000], **_json_fields(job)})
        except (TypeError, ValueError, OverflowError, OSError, AttributeError) as exc:
            bad.append({"line": line, "__reason": f"not a job record: {exc}", "raw": json.dumps(job)[:1000]})
    names = [n for n in SACCT_FIELDS if n != "Elapsed"]
    frame = pl.DataFrame(
        rows, schema={"line": pl.UInt32, "raw": pl.String, **dict.fromkeys(names, pl.String)}
    )
    bad_frame = pl.DataFrame(bad, schema={"line": pl.UInt32, "__reason": pl.String, "raw": pl.String})
    return _checked(frame, bad_frame, file=file, time_zone="UTC")


def _json_fields(job: Any) -> dict[str, str]:
    """One ``jobs`` element as sacct's text fields."""
    raw_id = _json_int(job["job_id"], "job_id")
    array, het = job.get("array") or {}, job.get("het") or {}
    array_job, het_job = (
        _json_int(array.get("job_id", 0), "array.job_id"),
        _json_int(het.get("job_id", 0), "het.job_id"),
    )
    task = _json_number(array.get("task_id"), "array.task_id")
    offset = _json_number(het.get("job_offset"), "het.job_offset")
    if array_job and task is not None:
        job_id = f"{array_job}_{task}"
    elif array_job and array_job != raw_id:
        job_id = f"{array_job}_{raw_id}"
    elif array_job:  # an array's pending remainder: `task` is its index expression
        job_id = f"{array_job}_[{_json_text(array.get('task'), 'array.task')}]"
    elif het_job and offset is not None:
        job_id = f"{het_job}+{offset}"
    else:
        job_id = str(raw_id)
    state = job.get("state")
    current = state.get("current") if isinstance(state, dict) else state
    if isinstance(current, list):
        current = current[0] if current else ""
    allocated = (job.get("tres") or {}).get("allocated") or []
    tres = _json_tres(allocated)
    times = job.get("time") or {}
    return {
        "JobID": job_id,
        "JobIDRaw": str(raw_id),
        "User": _json_text(job.get("user"), "user"),
        "Account": _json_text(job.get("account"), "account"),
        "Partition": _json_text(job.get("partition"), "partition"),
        "QOS": _json_text(job.get("qos"), "qos"),
        "State": _json_text(current, "state.current"),
        "AllocTRES": tres,
        "NodeList": _json_text(job.get("nodes"), "nodes"),
        "Start": _json_time(times.get("start"), "time.start"),
        "End": _json_time(times.get("end"), "time.end"),
    }


def _json_tres(allocated: Any) -> str:
    """``tres.allocated`` (``{"type": "gres", "name": "gpu", "count": 2}``…) as AllocTRES text."""
    parts = []
    for t in allocated:
        kind, name = _json_text(t.get("type"), "tres.type"), _json_text(t.get("name"), "tres.name")
        parts.append(f"{kind}{'/' + name if name else ''}={_json_int(t.get('count'), 'tres.count')}")
    return ",".join(parts)


def _json_number(value: Any, key: str) -> int | None:
    """Slurm's optional numbers: a plain integer, or ``{"set": …, "infinite": …, "number": …}``."""
    if isinstance(value, dict):
        return _json_int(value.get("number"), key) if value.get("set") and not value.get("infinite") else None
    return None if value is None else _json_int(value, key)


def _json_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"{key} is not a count: {str(value)[:100]!r}")
    return value


def _json_text(value: Any, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{key} is not text: {str(value)[:100]!r}")
    return value


def _json_time(value: Any, key: str) -> str:
    seconds = _json_number(value, key)
    if not seconds:
        return "Unknown"
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{key} is not a time: {seconds}") from None


def _shown(column: str) -> pl.Expr:
    """A value in a refusal's reason: quoted, at most 100 characters."""
    return pl.format('"{}"', pl.col(column).str.slice(0, 100))


def _time_reason(column: str, why: str) -> pl.Expr:
    return (
        pl.when(pl.col(column).is_in(_NO_TIME))
        .then(pl.format("{} ({})", _shown(column), pl.lit(why)))
        .otherwise(
            pl.format(
                "not a time: {} (YYYY-MM-DDTHH:MM:SS, an optional UTC offset; a local time that does "
                "not exist or happens twice in the time zone is refused: run sacct with TZ=UTC)",
                _shown(column),
            )
        )
    )


def _first_failure(checks: list[tuple[pl.Expr, str | None, pl.Expr]]) -> list[pl.Expr]:
    """``__column`` and ``__reason`` of the first check a row fails (null when it fails none)."""
    column: Any = pl.lit(None, pl.String)
    reason: Any = pl.lit(None, pl.String)
    for failed, name, why in reversed(checks):
        failed = failed.fill_null(False)
        column = pl.when(failed).then(pl.lit(name, pl.String)).otherwise(column)
        reason = pl.when(failed).then(why).otherwise(reason)
    return [column.alias("__column"), reason.alias("__reason")]


def _typed(jobs: pl.DataFrame, time_zone: str) -> pl.DataFrame:
    """The text columns as the facts and numbers the connector uses."""
    tres = pl.col("AllocTRES")
    untyped = tres.str.extract(r"(?:^|,)gres/gpu=(\d{1,12})(?:,|$)", 1).cast(pl.Int64)
    typed = (
        tres.str.extract_all(r"(?:^|,)gres/gpu:[^=,]+=\d{1,12}")
        .list.eval(pl.element().str.extract(r"=(\d+)$", 1).cast(pl.Int64))
        .list.sum()
    )
    gpus = pl.coalesce(untyped, typed, pl.lit(0, pl.Int64))
    counts_ok = (
        tres.str.extract_all(r"(?:^|,)gres/gpu(?::[^=,]+)?=[^,]*")
        .list.eval(pl.element().str.contains(r"=\d{1,12}$"))
        .list.all()
    )
    return jobs.with_columns(
        counts_ok.fill_null(True).alias("gpu_counts_ok"),
        pl.col("JobID").alias("job_id"),
        pl.col("JobIDRaw").alias("job_id_raw"),
        pl.col("User").alias("user"),
        pl.col("Account").alias("account"),
        pl.col("Partition").alias("partition"),
        pl.col("QOS").alias("qos"),
        pl.col("State").str.split(" ").list.first().str.to_uppercase().alias("state"),
        pl.when(gpus <= MAX_GPUS_PER_JOB).then(gpus).alias("gpus"),
        _utc("Start", time_zone).alias("start"),
        _utc("End", time_zone).alias("end"),
        pl.col("NodeList").alias("node_list"),
    )


def _utc(column: str, time_zone: str) -> pl.Expr:
    """``YYYY-MM-DDTHH:MM:SS`` in ``time_zone`` or with its own offset → UTC; null otherwise."""
    text = pl.col(column)
    local = (
        pl.when(text.str.contains(_TIME))
        .then(text)
        .str.to_datetime("%Y-%m-%dT%H:%M:%S", time_unit="us", strict=False)
        .dt.replace_time_zone(time_zone, ambiguous="null", non_existent="null")
        .dt.convert_time_zone("UTC")
    )
    offset = (
        pl.when(text.str.contains(_TIME_OFFSET))
        .then(text.str.replace(r"Z$", "+0000").str.replace(r"([+-]\d{2}):(\d{2})$", "$1$2"))
        .str.to_datetime("%Y-%m-%dT%H:%M:%S%z", time_unit="us", strict=False)
        .dt.convert_time_zone("UTC")
    )
    return pl.coalesce(local, offset)


def workloads(jobs: pl.DataFrame) -> list[WorkloadInfo]:
    """Per GPU job (the latest record of a requeued one), ``slurm:<JobIDRaw>`` and
    ``hpc:<JobIDRaw>`` with the job's facts; its user is the owner Slurm names."""
    latest = (
        jobs.sort("start", "line")
        .unique("job_id_raw", keep="last", maintain_order=True)
        .sort(pl.col("job_id_raw").cast(pl.UInt64))
    )
    out: list[WorkloadInfo] = []
    for job_id, raw, user, account, partition, qos in latest.select(
        "job_id", "job_id_raw", "user", "account", "partition", "qos"
    ).iter_rows():
        facts = {
            key: value
            for key, value in (
                ("slurm.job", raw),
                ("slurm.user", user),
                ("slurm.account", account),
                ("slurm.partition", partition),
                ("slurm.qos", qos),
            )
            if value
        }
        for prefix in ("slurm", "hpc"):
            out.append(WorkloadInfo(f"{prefix}:{raw}", user_name=user, workload=job_id, facts=facts))
    return out


def gpu_hours_by(jobs: pl.DataFrame, by: str = "account") -> dict[str, Decimal]:
    """GPU-hours of the jobs that ended, per ``by`` (account, user, partition): Σ GPUs × (End −
    Start) over the records in an ended state — XDMoD's job-level ``gpu_count × wall_time`` with
    wall time ``GREATEST(end − start, 0)``, and like XDMoD's shredder it leaves out records of jobs
    that have not ended (RUNNING, and the REQUEUED record ``--duplicates`` shows for a requeued
    job's earlier run). Exact: GPU-seconds are integers, hours are Decimal."""
    seconds = (pl.col("end") - pl.col("start")).dt.total_seconds().clip(lower_bound=0)
    sums = (
        jobs.filter(pl.col("end").is_not_null() & pl.col("state").is_in(sorted(ENDED_STATES)))
        .group_by(by)
        .agg((pl.col("gpus") * seconds).sum().alias("gpu_s"))
        .sort(by)
    )
    return {key: Decimal(int(gpu_s)) / Decimal(3600) for key, gpu_s in sums.iter_rows()}


class SlurmConnector:
    """``slurm``: a :class:`~connectors.sdk.facts.WorkloadFactsSource` over ``sacct`` output."""

    kind: ClassVar[Literal["facts"]] = "facts"
    config_model: ClassVar[type[ConnectorConfig]] = SlurmConfig

    def __init__(
        self, config: SlurmConfig, *, run: Callable[..., subprocess.CompletedProcess[bytes]] | None = None
    ):
        self.config = config
        self._run = run

    def facts(self, start: dt.datetime, end: dt.datetime) -> FactsBatch:
        """The GPU jobs sacct reports for ``[start, end)`` (a file: every GPU job it holds)."""
        text, file = self._read(start, end)
        if self.config.output == "json":
            records = parse_sacct_json(text, file=file)
        else:
            records = parse_sacct(text, file=file, fields=self.config.fields, time_zone=self.config.time_zone)
        return FactsBatch(
            workloads=workloads(records.jobs),
            read=records.read,
            accepted=records.jobs.height,
            skipped=records.skipped,
            refused=records.refused,
        )

    def command(self, start: dt.datetime, end: dt.datetime) -> list[str]:
        """The sacct command for a window (UTC times, as ``TZ=UTC`` makes sacct read them)."""
        fmt = "%Y-%m-%dT%H:%M:%S"
        json_output = self.config.output == "json"
        argv = [self.config.sacct, "--allusers", "--json" if json_output else "--parsable2"]
        argv += ["--allocations", "--duplicates"]
        argv += ["--starttime", start.astimezone(dt.UTC).strftime(fmt)]
        argv += ["--endtime", end.astimezone(dt.UTC).strftime(fmt)]
        argv += [] if json_output else ["--format", ",".join(self.config.fields)]
        argv += ["--clusters", self.config.clusters] if self.config.clusters else []
        return argv + list(self.config.extra_args)

    def _read(self, start: dt.datetime, end: dt.datetime) -> tuple[str, str]:
        limit = self.config.max_bytes
        if self.config.path is not None:
            path = Path(self.config.path)
            try:
                with path.open("rb") as f:
                    data = f.read(limit + 1)
            except OSError as exc:
                raise ConfigurationError(f"{path}: cannot read ({exc.strerror or exc})") from None
            if len(data) > limit:
                raise ConnectorError(f"{path}: larger than max_bytes = {limit}")
            return data.decode("utf-8", errors="replace"), str(path)
        if self.config.url is not None:
            return self._slurmrestd(start, end), self.config.url
        argv = self.command(start, end)
        try:
            done = (self._run or _run_bounded)(argv, timeout_s=self.config.timeout_s, limit=limit)
        except FileNotFoundError:
            raise ConfigurationError(
                f"sacct not found: {argv[0]!r} (set sacct = the command's path)"
            ) from None
        except subprocess.TimeoutExpired:
            raise RetriableError(f"{argv[0]} did not answer within {self.config.timeout_s:g} s") from None
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", errors="replace").strip()[-500:]
            raise RetriableError(f"{argv[0]} exited {done.returncode}: {err or 'no message'}")
        if len(done.stdout) > limit:
            raise ConnectorError(f"{argv[0]}: output larger than max_bytes = {limit}")
        return done.stdout.decode("utf-8", errors="replace"), "sacct"

    def _slurmrestd_get(self, url: str, params: dict[str, str], headers: dict[str, str]) -> bytes:
        limit = self.config.max_bytes
        try:
            with (
                httpx.Client(timeout=self.config.timeout_s) as client,
                client.stream("GET", url, params=params, headers=headers) as response,
            ):
                if response.status_code in (401, 403):
                    raise FatalSourceError(f"{url}: HTTP {response.status_code} (check user_name and token)")
                if response.status_code >= 500 or response.status_code == 429:
                    raise RetriableError(f"{url}: HTTP {response.status_code}")
                if response.status_code != 200:
                    raise FatalSourceError(f"{url}: HTTP {response.status_code}")
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise ConnectorError(f"{url}: answer larger than max_bytes = {limit}")
                return bytes(data)
        except httpx.TransportError as exc:
            raise RetriableError(f"{url}: {type(exc).__name__}: {exc}") from None

    def _slurmrestd(self, start: dt.datetime, end: dt.datetime) -> str:
        """``GET {url}/slurmdb/{api_version}/jobs?start_time=…&end_time=…`` with the JWT headers.
        slurmrestd reads the times in its own zone: the window asked is a day wider on each side
        (more jobs' facts are harmless; a missed job's are not)."""
        assert self.config.url is not None
        fmt = "%Y-%m-%dT%H:%M:%S"
        params = {
            "start_time": (start.astimezone(dt.UTC) - dt.timedelta(days=1)).strftime(fmt),
            "end_time": (end.astimezone(dt.UTC) + dt.timedelta(days=1)).strftime(fmt),
        }
        headers = {"Accept": "application/json"}
        if self.config.user_name:
            headers["X-SLURM-USER-NAME"] = self.config.user_name
        if self.config.token is not None:
            headers["X-SLURM-USER-TOKEN"] = self.config.token.get_secret_value()
        url = f"{self.config.url.rstrip('/')}/slurmdb/{self.config.api_version}/jobs"
        return self._slurmrestd_get(url, params, headers).decode("utf-8", errors="replace")


def _run_bounded(argv: list[str], *, timeout_s: float, limit: int) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (no shell) with ``TZ=UTC``; its output goes to temporary files, of which at
    most ``limit + 1`` bytes of stdout and the last 4 KiB of stderr are read back."""
    env = dict(os.environ, TZ="UTC")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        stdout = out.read(limit + 1)
        err.seek(max(0, err.seek(0, os.SEEK_END) - 4096))
        stderr = err.read()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
