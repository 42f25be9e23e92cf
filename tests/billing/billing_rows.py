"""Hand-written billing lines and cloud ledger rows for the billing tests (exact values in, exact out)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete, select
from sqlmodel import Session

from service.models import BillingLine, Device, GpuRate, LedgerDay, LedgerHour
from service.timeutil import hour_index, month_index

DAY3 = dt.datetime(2025, 9, 3, tzinfo=dt.UTC)
R1 = "i-0d1e4c9a2f7b3e801"
_keys = itertools.count(1)


def at(hours: int) -> dt.datetime:
    return DAY3 + dt.timedelta(hours=hours)


def line(resource: str | None, start: dt.datetime, end: dt.datetime, cost: str, **kw: Any) -> BillingLine:
    """One billing line; ``cost`` is effective = billed = list unless given."""
    n = next(_keys)
    values: dict[str, Any] = {
        "id": n,  # fixed ids: billingLines pages are ordered by id
        "source": "bills",
        "source_file": "f.csv",
        "line_no": n,
        "line_key": f"k{n}",
        "provider": "aws",
        "account": "111122223333",
        "charge_start": start,
        "charge_end": end,
        "charge_category": "Usage",
        "resource_id": resource,
        "region": "us-east-1",
        "currency": "USD",
        "effective_cost": Decimal(cost),
        "billed_cost": Decimal(cost),
        "list_cost": Decimal(cost),
    }
    values.update({k: Decimal(v) if isinstance(v, str) and k.endswith(("_cost", "_hours", "quantity")) else v
                   for k, v in kw.items()})  # fmt: skip
    return BillingLine(**values)


def p5_day(cost: str = "660.48", hours: str = "12", resource: str = R1) -> BillingLine:
    """R1's 09-03 daily line: 12 instance-hours of p5.48xlarge (8 GPUs) at 55.04."""
    return line(
        resource, DAY3, at(24), cost, instance_type="p5.48xlarge", usage_quantity=Decimal(hours),
        usage_unit="Hrs", gpu_count=8, gpu_hours=Decimal(hours) * 8, pricing_model="on_demand",
    )  # fmt: skip


def ledger(
    h: int, device: str, instance: str, present: float = 3600.0, idle: float = 0.0, **kw: Any
) -> LedgerHour:
    start = at(h)
    values: dict[str, Any] = {
        "source": "cw",
        "device_id": device,
        "workload_key": "",
        "environment": "aws",
        "provider": "aws",
        "account": "111122223333",
        "instance_id": instance,
        "instance_type": "p5.48xlarge",
        "gpu_model": "H100",
        "default_metric": "gpu_util",
        "present_s": present,
        "observed_s": present,
        "idle_s": idle,
        "hour_start": start,
        "hour_index": hour_index(start),
        "day_index": hour_index(start) // 24,
        "month_index": month_index(start),
    }
    values.update(kw)
    return LedgerHour(**values)


def device(device_id: str, instance: str, **kw: Any) -> Device:
    values: dict[str, Any] = {
        "device_id": device_id, "source": "cw", "environment": "aws", "provider": "aws",
        "account": "111122223333", "instance_id": instance, "instance_type": "p5.48xlarge",
        "first_seen": DAY3, "last_seen": at(24),
    }  # fmt: skip
    values.update(kw)
    return Device(**values)


def present_8(resource: str, hours: range, idle: float = 0.0) -> list[Any]:
    """8 GPUs of ``resource`` present in ``hours`` (with their devices)."""
    out: list[Any] = [device(f"{resource}/gpu{g}", resource) for g in range(8)]
    out += [ledger(h, f"{resource}/gpu{g}", resource, idle=idle) for h in hours for g in range(8)]
    return out


def add(engine: Engine, rows: list[Any]) -> None:
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()


def hours(engine: Engine) -> list[LedgerHour]:
    with Session(engine) as session:
        stmt = select(LedgerHour).order_by(LedgerHour.hour_index, LedgerHour.device_id)
        return list(session.execute(stmt).scalars())


def days(engine: Engine) -> list[LedgerDay]:
    with Session(engine) as session:
        return list(session.execute(select(LedgerDay).order_by(LedgerDay.device_id)).scalars())


def rates(engine: Engine) -> list[GpuRate]:
    with Session(engine) as session:
        stmt = select(GpuRate).order_by(GpuRate.instance_id, GpuRate.valid_from)
        return list(session.execute(stmt).scalars())


def empty(engine: Engine) -> None:
    """Delete the rows these tests write (a hypothesis example starts from an empty ledger)."""
    with engine.begin() as conn:
        for table in (LedgerHour, LedgerDay, GpuRate, BillingLine, Device):
            conn.execute(delete(table))


def snapshot(engine: Engine) -> tuple[list[dict[str, Any]], ...]:
    """Every ledger, rollup, rate and device row without its surrogate id, for exact comparison."""

    def strip(rows: list[Any]) -> list[dict[str, Any]]:
        return sorted((r.model_dump(exclude={"id"}) for r in rows), key=repr)

    with Session(engine) as session:
        devices = list(session.execute(select(Device)).scalars())
    return strip(hours(engine)), strip(days(engine)), strip(rates(engine)), strip(devices)


def scenario() -> list[Any]:
    """One of each reconciliation status on 2025-09-03 (AWS account 111122223333 unless said)."""
    g5 = {"instance_type": "g5.12xlarge"}
    return [
        p5_day(),  # R1: 96 GPU-h billed, no metrics -> NO_METRICS
        p5_day("165.12", "3", "i-match"), *present_8("i-match", range(0, 3)),  # 24 = 24 -> MATCHED
        line("i-over", at(3), at(4), "22.688", usage_quantity=Decimal(1), gpu_count=4, gpu_hours=Decimal(4),
             **g5),
        *[ledger(3, f"i-over/gpu{g}", "i-over", **g5) for g in range(6)],  # 6 > 4 -> UNBILLED_USAGE
        p5_day("220.16", "4", "i-gap"), *present_8("i-gap", range(0, 2)),  # 16 < 32 -> UNMONITORED_SPEND
        *present_8("i-nobill", range(5, 6)),  # metered, never billed -> NO_BILLING
        line("i-unknown", DAY3, at(24), "100", instance_type="p9.48xlarge", usage_quantity=Decimal(10)),
        line(None, DAY3, at(24), "746.88", provider="azure", account="sub", charge_type="UnusedReservation",
             pricing_model="commitment", instance_type="Standard_ND96isr_H100_v5"),
        line("vol-1", DAY3, at(24), "4.8", service="AmazonEC2", usage_unit="GB-Mo"),  # no GPUs: no row
    ]  # fmt: skip


def csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """A CSV file's header and records (the csv module)."""
    parsed = list(csv.reader(io.StringIO(path.read_text())))
    return parsed[0], parsed[1:]


def render_csv(header: list[str], body: list[list[str]]) -> bytes:
    """A header and records as CSV bytes (LF line ends)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *body])
    return out.getvalue().encode()
