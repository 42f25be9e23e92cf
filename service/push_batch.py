"""What a pushed batch may hold (``POST /api/v1/batches``), checked before anything is stored.

A refusal is a :class:`BadBatch` naming the first bad field as pydantic does (``samples.value.3``:
column, then row) with a message a person can act on. Three steps, in the endpoint's order:

* :func:`parse_batch` — bytes → :class:`BatchIn`, everything that needs no clock and no
  database: JSON syntax (invalid UTF-8, lone surrogates and nesting deeper than 200 are refused
  by the parser), types, **finite numbers only** (JSON parsers accept ``NaN`` and ``Infinity``
  literals; they cannot be stored faithfully — SQLite turns NaN into NULL — and poison every sum),
  the lengths of the staging columns, no control characters (PostgreSQL cannot store NUL; the
  others forge log lines), caps on devices, workloads and samples, equal column lengths, no
  device or workload described twice, every sample's device described.
* :func:`check_batch` — the sample times against the service's clock and the agent connector's
  ``backfill_days``, then no reading given twice.
* :func:`content_sha256` — the canonical hash that tells a replay from a reused batch id.

Sample *values* are only bounded here (finite, within ±``MAX_VALUE``): a negative reading or a
utilization over 100 % is a sensor's problem, counted and quarantined per sample by the ledger's
own validation (``service.ledger.validate``) while the batch's good readings go on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import TYPE_CHECKING, Annotated, Any, Literal

import polars as pl
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from connectors.sdk.shapes import DEVICE, DEVICE_FACTS, WORKLOAD, WORKLOAD_FACTS, Attribute
from service.metrics_catalog import Metric
from service.timeutil import from_ms, to_ms

MAX_DEVICES = 4096  # a node with 8 GPUs × 7 MIG instances describes 64
MAX_WORKLOADS = 16384
MAX_SAMPLES = 200_000  # ~100 × a default batch (60 s of 8 GPUs × 9 metrics × a few workloads)
MAX_VALUE = 1e15  # no reading is that large (1 PB, 1 PJ); larger ones overflow the ledger's sums
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
MAX_AHEAD = dt.timedelta(hours=1)  # a node's clock may run this far ahead of the service's
# Every JSON value but the last of its array or object is followed by a comma, so commas bound
# the values a body holds: counted before parsing, because the parser's memory is ~60 bytes per
# value whatever the caps say (64 MiB of "0," took 2.1 GB). The largest allowed batch has at
# most _STRUCTURAL commas; the quarter on top is for commas inside strings.
_STRUCTURAL = 6 * MAX_SAMPLES + 16 * MAX_DEVICES + 7 * MAX_WORKLOADS
MAX_COMMAS = _STRUCTURAL * 5 // 4
_CONTROL = frozenset(map(chr, [*range(0x20), 0x7F]))


class BadBatch(ValueError):
    """A batch the service refuses (HTTP 400): ``field`` names the first bad value."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, f"{field}: {message}"


def _printable(text: str) -> str:
    if not _CONTROL.isdisjoint(text):
        raise ValueError("control characters (U+0000–U+001F, U+007F) are not allowed")
    return text


def _text(max_length: int, min_length: int = 0) -> Any:
    """A string that fits its staging column (PostgreSQL refuses longer ones) and prints as one line."""
    return Annotated[str, Field(min_length=min_length, max_length=max_length), AfterValidator(_printable)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _field(a: Attribute) -> tuple[Any, Any]:
    """(type, default) of a pushed attribute, as pydantic's ``create_model`` takes them."""
    if a.choices:
        kind: Any = Literal[a.choices]
    elif a.kind is str:
        kind = _text(a.max_length or 0, a.min_length)
    else:
        kind = a.kind
    if a.nullable:
        kind = kind | None
    if a.kind in (int, float):
        # bounds on the field, as the hand-written models had them, so refusals read the same
        return kind, Field(... if a.required else a.default, gt=a.gt, ge=a.ge, le=a.le)
    return kind, ... if a.required else a.default


#: Attribution facts (``DeviceInfo.tags``, ``WorkloadInfo.facts``): source key → value, bounded.
MAX_FACTS = 200
_FactKey, _FactValue = _text(300, 1), _text(300)
_Facts: Any = Annotated[dict[_FactKey, _FactValue], Field(max_length=MAX_FACTS)]  # type: ignore[valid-type]


def _model(name: str, attributes: tuple[Attribute, ...], facts: str) -> type[_Strict]:
    """A push model with one field per declared attribute, in declaration order (the order
    ``content_sha256`` hashes), then the description's attribution facts under ``facts``."""
    fields: dict[str, Any] = {a.name: _field(a) for a in attributes}
    fields[facts] = (_Facts, {})
    return create_model(name, __base__=_Strict, __module__=__name__, **fields)


if TYPE_CHECKING:
    # What this module reads by name; the fields are connectors.sdk.shapes.DEVICE and WORKLOAD.

    class DeviceIn(_Strict):
        device_id: str

    class WorkloadIn(_Strict):
        workload_key: str  # '' = unallocated: accepted, nothing to store

else:
    DeviceIn = _model("DeviceIn", DEVICE, DEVICE_FACTS)
    WorkloadIn = _model("WorkloadIn", WORKLOAD, WORKLOAD_FACTS)


class SamplesIn(_Strict):
    device_id: list[str] = Field(max_length=MAX_SAMPLES)  # each one a described device (BatchIn)
    ts_ms: list[int] = Field(max_length=MAX_SAMPLES)  # bounds need the clock: check_batch
    # The Literal is built from the catalog at import (pydantic reads it; a type checker cannot).
    metric: list[Literal[tuple(m.value for m in Metric)]] = Field(max_length=MAX_SAMPLES)  # type: ignore[valid-type]
    value: list[Annotated[float, Field(ge=-MAX_VALUE, le=MAX_VALUE)]] = Field(max_length=MAX_SAMPLES)
    workload_key: list[str] = Field(max_length=MAX_SAMPLES)
    share: list[Annotated[float, Field(ge=0, le=1)]] = Field(max_length=MAX_SAMPLES)

    @model_validator(mode="after")
    def _same_length(self) -> SamplesIn:
        n = len(self.device_id)
        for name in ("ts_ms", "metric", "value", "workload_key", "share"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"samples.{name} has {len(getattr(self, name))} values, device_id has {n}")
        return self


class BatchIn(_Strict):
    batch_id: str = Field(min_length=3, max_length=200, pattern=r"^[^:\s\x00-\x1f\x7f]+:\d+$")
    agent: Annotated[str, Field(min_length=1, max_length=100), AfterValidator(_printable)]
    devices: list[DeviceIn] = Field(max_length=MAX_DEVICES)
    workloads: list[WorkloadIn] = Field([], max_length=MAX_WORKLOADS)
    samples: SamplesIn


def _first_problem(exc: ValidationError) -> BadBatch:
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    return BadBatch(field, err["msg"].removeprefix("Value error, "))


def _first_repeat(items: list[Any], key: str, where: str) -> None:
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        value = getattr(item, key)
        if value in seen:
            raise BadBatch(f"{where}.{i}.{key}", f"{value!r} repeats {where}.{seen[value]}")
        seen[value] = i


def _check_references(batch: BatchIn) -> None:
    """What a model validator cannot name precisely: repeats and references, by index."""
    _first_repeat(batch.devices, "device_id", "devices")
    _first_repeat(batch.workloads, "workload_key", "workloads")
    described = {d.device_id for d in batch.devices}
    s = batch.samples
    if not described.issuperset(s.device_id):
        i = next(i for i, d in enumerate(s.device_id) if d not in described)
        raise BadBatch(f"samples.device_id.{i}", f"{s.device_id[i][:200]!r} is not in devices")
    # Unknown workload keys are accepted: the ledger keeps them unattributed (no project or team),
    # as a sampler that describes no workloads would. Only their length and characters matter here.
    for key in set(s.workload_key):
        if len(key) > 500 or not _CONTROL.isdisjoint(key):
            i = s.workload_key.index(key)
            raise BadBatch(
                f"samples.workload_key.{i}",
                "longer than 500 characters" if len(key) > 500 else "control characters are not allowed",
            )


def parse_batch(body: bytes) -> BatchIn:
    """The batch ``body`` holds, or :class:`BadBatch` naming the first problem (CPU-bound: call
    it off the event loop)."""
    commas = body.count(b",")
    if commas > MAX_COMMAS:
        raise BadBatch(
            "body",
            f"holds more values than a batch may ({commas:,} commas, at most {MAX_COMMAS:,}): "
            f"ship smaller batches (at most {MAX_SAMPLES:,} samples)",
        )
    try:
        batch = BatchIn.model_validate_json(body)
    except ValidationError as exc:
        raise _first_problem(exc) from None
    _check_references(batch)
    return batch


def _when(ts_ms: int) -> str:
    try:
        return f"{ts_ms} ({from_ms(ts_ms).isoformat().replace('+00:00', 'Z')})"
    except (OverflowError, ValueError):
        return str(ts_ms)


def backfill_start(now: dt.datetime, backfill_days: float) -> dt.datetime:
    """``now − backfill_days``, never before 2000-01-01 (nor an overflow, whatever the setting)."""
    if backfill_days * 86_400 >= (now - EARLIEST).total_seconds():
        return EARLIEST
    return now - dt.timedelta(days=backfill_days)


def check_batch(batch: BatchIn, now: dt.datetime, backfill_days: float, connector: str) -> None:
    """Refuse sample times the ledger cannot use, then readings given twice.

    Before 2000-01-01 or more than ``MAX_AHEAD`` past ``now``: a wrong clock, and a 1970 row
    would rewind the watermark decades. Older than ``backfill_days`` before ``now``: refused
    rather than stored, because the scheduler never reads that far back on its own (the rows
    would sit in staging, silently missing from the ledger) and moving the watermark there
    would make the next run re-read more than ``backfill_days``; refused, the agent keeps the
    batch in its ``rejected/`` folder and logs why, so a person can raise ``backfill_days`` and
    send it again.
    """
    ts = batch.samples.ts_ms
    if not ts:
        return
    earliest_ms, latest_ms = to_ms(EARLIEST), to_ms(now + MAX_AHEAD)
    cutoff = backfill_start(now, backfill_days)
    low_ms = to_ms(cutoff)
    if min(ts) < low_ms or max(ts) > latest_ms:
        i, t = next((i, t) for i, t in enumerate(ts) if t < low_ms or t > latest_ms)
        field = f"samples.ts_ms.{i}"
        if t < earliest_ms:
            raise BadBatch(field, f"{_when(t)} is before 2000-01-01: the node's clock is wrong")
        if t > latest_ms:
            raise BadBatch(
                field,
                f"{_when(t)} is more than 1 h after the service's clock ({_when(to_ms(now))}): "
                "the node's clock is wrong (NTP?)",
            )
        raise BadBatch(
            field,
            f"{_when(t)} is older than backfill_days = {backfill_days:g} of agent connector "
            f'"{connector}" allows (before {_when(to_ms(cutoff))}): raise backfill_days and send '
            "the batch again from the agent's rejected/ folder",
        )
    _check_repeats(batch.samples)


def _check_repeats(s: SamplesIn) -> None:
    """One reading per (device, time, metric, workload): two that disagree have no right answer,
    and the agent connector keeps an arbitrary one of them."""
    frame = pl.DataFrame(
        {"device_id": s.device_id, "ts_ms": s.ts_ms, "metric": s.metric, "workload_key": s.workload_key},
        schema={"device_id": pl.String, "ts_ms": pl.Int64, "metric": pl.String, "workload_key": pl.String},
    ).with_row_index("row")
    key = ["device_id", "ts_ms", "metric", "workload_key"]
    repeats = frame.filter(pl.struct(key).is_duplicated())  # in batch order; empty for a good batch
    seen: dict[tuple[Any, ...], int] = {}
    for row, *reading in repeats.select("row", *key).iter_rows():
        if tuple(reading) in seen:
            raise BadBatch(
                f"samples.ts_ms.{row}",
                f"row {row} repeats row {seen[tuple(reading)]}: the same device_id, ts_ms, metric "
                "and workload_key (one reading each)",
            )
        seen[tuple(reading)] = row


#: Fields a batch gained after :func:`content_sha256` was first defined, per list (issue 16: the
#: vendor and the attribution facts). Each is left out of the hash when no item of the batch sets it,
#: so a batch spooled by an older agent and replayed after the upgrade is still a duplicate, not a
#: conflict. A field added to a pushed description later goes here.
LATER_FIELDS: dict[str, tuple[str, ...]] = {
    "devices": ("vendor", DEVICE_FACTS),
    "workloads": (WORKLOAD_FACTS,),
}


def content_sha256(batch: BatchIn) -> str:
    """SHA-256 of the batch's canonical JSON (pydantic's field order, defaults filled in).

    Canonical, not the raw bytes: the agent rebuilds the body from its spool for every attempt,
    and another client, or the agent after an upgrade, may order keys, space or spell numbers
    (``1`` vs ``1.0``) differently; the same content must still be a duplicate, not a conflict.
    """
    exclude: dict[str, Any] = {}
    for items, fields in LATER_FIELDS.items():
        unset = {f for f in fields if not any(getattr(item, f) for item in getattr(batch, items))}
        if unset:
            exclude[items] = {"__all__": unset}
    return hashlib.sha256(batch.model_dump_json(exclude=exclude).encode()).hexdigest()
