"""Benchmark: importing one month of a large organisation's AWS CUR 2.0 (issue 5).

    .venv/bin/python bench/billing_import.py [--rows 1000000] [--format csv|parquet] [--gzip] [--repeat 2]
        [--chunk-rows 20000] [--postgres postgresql://postgres@127.0.0.1:5432/postgres] [--skip-sqlite]
        [--skip-parse] [--skip-reprice] [--reimport] [--profile-reprice] [--profile-import]

Generates (NumPy/Polars, seeded, so the same arguments give the same bytes) a CUR 2.0 CSV of
September 2025 at HOURLY granularity with the fixture's columns
(``tests/fixtures/aws/cur2_2025-09_daily.csv``):

* GPU instances (p5.48xlarge, p5e.48xlarge, p4d.24xlarge, g6e.12xlarge, g5.12xlarge, g5.xlarge,
  g6.xlarge, g4dn.xlarge), each running one block of hours: on demand (``Usage``/``BoxUsage``),
  spot (``Usage``/``SpotUsage``) or covered by a Compute Savings Plan
  (``SavingsPlanCoveredUsage`` + ``SavingsPlanNegation``), plus one data-transfer line per
  instance-hour; the plan's hourly ``SavingsPlanRecurringFee``;
* other spend: EBS volumes and snapshots, S3 storage and requests, data transfer out, CloudWatch,
  non-GPU EC2 instances — one line per resource-hour — and a few month-long tax lines;

so GPU instances carry ``--gpu-share`` of the rows (default 15 %). Every row has its own
``identity_line_item_id``. The file is cached under ``--workdir``.

Each phase runs in a child process of its own, so its peak RSS (``VmHWM``) is that phase's:

1. ``parse``: ``AwsCurConnector(path=…).read(start, end)`` consumed, batches dropped as they come;
2. ``import``: ``ingest_billing`` into a freshly migrated database, re-pricing hook disabled;
3. ``reprice``: ``service.billing.rates.reprice`` over the month on the imported database (no
   metrics are ingested, so every billed GPU instance-hour becomes an unmonitored-spend row).

``--reimport`` (PostgreSQL) imports the same file a second time into the same database and checks
that the stored lines, their billed and effective sums are unchanged (a re-import is a no-op).
On PostgreSQL the import row's notes give ``server_cpu_s``: CPU seconds of the server processes
serving the benchmark's database (read from ``/proc``: the server must run on this machine), so
a figure taken on a shared, loaded machine still says what the import cost the server.
``--format parquet`` writes the month as CUR 2.0 Parquet (times as UTC timestamps, numbers as
doubles, ``product`` and ``resource_tags`` as JSON text) instead of CSV.

(2) and (3) run on SQLite (a file under ``--workdir``) and, with ``--postgres ADMIN_URL``, on a
database created on that server for the run and dropped afterwards. ``--profile-reprice`` runs
reprice once more under cProfile on a copy of the imported SQLite file, ``--profile-import`` the
import into a fresh SQLite file; each prints the top 15 functions by cumulative time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The allocator policy the server runs with (service/__init__.py); it must be set before polars loads.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:10000,muzzy_decay_ms:10000")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

START = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
END = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
HOURS = int((END - START).total_seconds() // 3600)
PAYER = "999988887777"
ACCOUNTS = [f"{n:012d}" for n in (111122223333, 222233334444, 333344445555, 444455556666, 555566667777)]
SP_ARN = "arn:aws:savingsplans::999988887777:savingsplan/3f2a9c1e-7b4d-4e8a-9c6f-1a2b3c4d5e6f"
SOURCE = "bench-cur"

#: The fixture's header, in its order.
COLUMNS = [
    "identity_line_item_id", "identity_time_interval", "bill_invoice_id", "bill_invoicing_entity",
    "bill_billing_entity", "bill_bill_type", "bill_payer_account_id", "bill_payer_account_name",
    "bill_billing_period_start_date", "bill_billing_period_end_date", "line_item_usage_account_id",
    "line_item_usage_account_name", "line_item_line_item_type", "line_item_usage_start_date",
    "line_item_usage_end_date", "line_item_product_code", "line_item_usage_type", "line_item_operation",
    "line_item_availability_zone", "line_item_resource_id", "line_item_usage_amount",
    "line_item_normalization_factor", "line_item_normalized_usage_amount", "line_item_currency_code",
    "line_item_unblended_rate", "line_item_unblended_cost", "line_item_blended_rate",
    "line_item_blended_cost", "line_item_line_item_description", "line_item_tax_type",
    "line_item_legal_entity", "product_product_family", "product_servicecode", "product_instance_type",
    "product_instance_family", "product_region_code", "product_location", "product_sku", "product",
    "pricing_term", "pricing_unit", "pricing_public_on_demand_rate", "pricing_public_on_demand_cost",
    "reservation_effective_cost", "reservation_reservation_a_r_n", "savings_plan_savings_plan_a_r_n",
    "savings_plan_savings_plan_rate", "savings_plan_savings_plan_effective_cost",
    "savings_plan_total_commitment_to_date", "savings_plan_used_commitment", "savings_plan_offering_type",
    "savings_plan_payment_option", "savings_plan_purchase_term", "savings_plan_region",
    "savings_plan_start_time", "savings_plan_end_time",
    "savings_plan_recurring_commitment_for_billing_period",
    "savings_plan_amortized_upfront_commitment_for_billing_period", "resource_tags", "cost_category",
]  # fmt: skip

# (instance type, GPUs, vCPU, memory, on-demand $/h, weight in the fleet)
GPU_TYPES = [
    ("p5.48xlarge", 8, 192, "2048 GiB", 55.04, 0.12),
    ("p5e.48xlarge", 8, 192, "2048 GiB", 63.296, 0.04),
    ("p4d.24xlarge", 8, 96, "1152 GiB", 21.96, 0.10),
    ("g6e.12xlarge", 4, 48, "384 GiB", 10.493, 0.08),
    ("g5.12xlarge", 4, 48, "192 GiB", 5.672, 0.16),
    ("g5.xlarge", 1, 4, "16 GiB", 1.006, 0.18),
    ("g6.xlarge", 1, 4, "16 GiB", 0.8048, 0.22),
    ("g4dn.xlarge", 1, 4, "16 GiB", 0.526, 0.10),
]
SP_DISCOUNT, SPOT_DISCOUNT = 0.7, 0.4
# (kind, product code, usage type, operation, unit, $ per unit, units per hour (lo, hi), family, weight)
OTHER = [
    ("ebs", "AmazonEC2", "EBS:VolumeUsage.gp3", "CreateVolume-Gp3", "GB-Mo", 0.08, (0.05, 3.0),
     "Storage", 0.30),
    ("snap", "AmazonEC2", "EBS:SnapshotUsage", "CreateSnapshot", "GB-Mo", 0.05, (0.01, 2.0),
     "Storage Snapshot", 0.06),
    ("ec2", "AmazonEC2", "BoxUsage", "RunInstances", "Hrs", 0.0, (1.0, 1.0), "Compute Instance", 0.30),
    ("s3", "AmazonS3", "TimedStorage-ByteHrs", "StandardStorage", "GB-Mo", 0.023, (0.1, 50.0),
     "Storage", 0.10),
    ("s3req", "AmazonS3", "Requests-Tier1", "PutObject", "Requests", 0.000005, (10.0, 50000.0),
     "API Request", 0.05),
    ("dto", "AWSDataTransfer", "DataTransfer-Out-Bytes", "", "GB", 0.09, (0.001, 20.0),
     "Data Transfer", 0.12),
    ("cw", "AmazonCloudWatch", "CW:MetricMonitorUsage", "MetricStorage", "Metrics", 0.3 / 720,
     (10.0, 400.0), "Metric", 0.07),
]  # fmt: skip
OTHER_EC2 = [
    ("m5.xlarge", 0.192),
    ("c6i.2xlarge", 0.34),
    ("r6i.4xlarge", 1.008),
    ("t3.medium", 0.0416),
    ("m7g.large", 0.0816),
]
TEAMS = ["llm-research", "inference", "vision", "platform", "data-eng", "search", "ads", "finance"]


def _iso(hours: np.ndarray) -> list[str]:
    return [(START + dt.timedelta(hours=int(h))).strftime("%Y-%m-%dT%H:%M:%SZ") for h in hours]


def _hex_ids(rng: np.random.Generator, n: int) -> pl.Series:
    """``n`` distinct 52-hex-digit line item ids (the fixture's shape)."""
    raw = rng.integers(0, 256, size=(n, 26), dtype=np.uint8)
    raw[:, :4] = np.frombuffer(rng.permutation(n).astype(">u4").tobytes(), dtype=np.uint8).reshape(n, 4)
    table = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    digits = np.empty((n, 52), dtype=np.uint8)
    digits[:, 0::2], digits[:, 1::2] = table[raw >> 4], table[raw & 15]
    return pl.Series(digits.view("S52").ravel()).cast(pl.String)


def _money(values: np.ndarray) -> np.ndarray:
    return np.round(values, 9)


def generate(rows: int, gpu_share: float, seed: int) -> tuple[pl.DataFrame, dict[str, int]]:
    """The month's CUR as a frame of text/number columns, and counts of what is in it."""
    rng = np.random.default_rng(seed)
    target_gpu = int(rows * gpu_share)

    # --- GPU instances: one running block each, hourly lines
    pool = max(16, target_gpu // 100)
    weights = np.array([t[5] for t in GPU_TYPES])
    g_type = rng.choice(len(GPU_TYPES), size=pool, p=weights / weights.sum())
    g_mode = rng.choice(3, size=pool, p=[0.45, 0.2, 0.35])  # on demand, spot, Savings Plan
    g_h0 = rng.integers(0, HOURS // 2, size=pool)
    g_len = np.minimum(HOURS - g_h0, rng.integers(24, HOURS, size=pool))
    per_hour = np.where(g_mode == 2, 3, 2)  # + one data-transfer line an hour
    cum = np.cumsum(g_len * per_hour)
    n_inst = max(1, int(np.searchsorted(cum, target_gpu, side="right")))
    g_type, g_mode, g_h0, g_len, per_hour = (a[:n_inst] for a in (g_type, g_mode, g_h0, g_len, per_hour))
    inst = np.repeat(np.arange(n_inst), g_len)
    hour = np.concatenate([np.arange(h0, h0 + n) for h0, n in zip(g_h0, g_len, strict=True)])
    last = np.r_[inst[1:] != inst[:-1], True]
    amount = np.where(last, rng.choice([1.0, 0.5, 0.25], size=len(inst)), 1.0)
    price = np.array([t[4] for t in GPU_TYPES])[g_type[inst]]
    mode = g_mode[inst]
    od = _money(amount * price)
    sp_rate = np.round(price * SP_DISCOUNT, 6)
    spot_rate = np.round(price * SPOT_DISCOUNT, 6)
    inst_ids = np.array([f"i-0{v:016x}" for v in rng.integers(0, 2**62, size=n_inst)])

    # --- everything else: one line per resource-hour, resources of a kind filling whole months
    sp_hours = np.unique(hour[mode == 2]) if (mode == 2).any() else np.array([], dtype=np.int64)
    n_tax = len(ACCOUNTS)
    n_gpu = int(len(inst) + (mode == 2).sum() + len(inst))
    n_other = max(0, rows - n_gpu - len(sp_hours) - n_tax)
    ow = np.array([o[8] for o in OTHER])
    o_kind = np.sort(rng.choice(len(OTHER), size=n_other, p=ow / ow.sum()))
    o_pos = np.arange(n_other) - np.searchsorted(o_kind, o_kind)  # index within its kind
    o_hour = o_pos % HOURS
    o_res = o_kind * 10_000_000 + o_pos // HOURS  # one resource per kind and month of hours

    frames = []
    gpu_res_tags = rng.integers(0, 300, size=n_inst)

    def column(name: str, v: object, n: int) -> pl.Series:
        if isinstance(v, np.ndarray) and v.dtype == object:  # text or None: not an Object column
            return pl.Series(name, v.tolist(), dtype=pl.String)
        return pl.Series(name, v if isinstance(v, np.ndarray | list) else [v] * n)

    def part(n: int, **cols: object) -> None:
        frames.append(pl.DataFrame([column(k, v, n) for k, v in cols.items()]))

    type_names = np.array([t[0] for t in GPU_TYPES])
    products = np.array(
        [
            json.dumps(
                {"product_name": "Amazon Elastic Compute Cloud", "vcpu": str(t[2]), "memory": t[3],
                 "gpu": str(t[1]), "operating_system": "Linux", "tenancy": "Shared", "capacitystatus": "Used"}
            )
            for t in GPU_TYPES
        ]
    )  # fmt: skip
    tag_pool = np.array(
        [
            json.dumps(
                {"user_team": TEAMS[i % len(TEAMS)], "user_project": f"project-{i % 97}",
                 "user_cost_center": f"cc-{1000 + i % 41}"}
            )
            for i in range(300)
        ]
    )  # fmt: skip
    g_acct = np.array(ACCOUNTS)[np.arange(n_inst) % len(ACCOUNTS)]
    t_of = type_names[g_type[inst]]
    usage_prefix = np.where(mode == 1, "SpotUsage:", "BoxUsage:")

    def gpu_lines(sel: np.ndarray, kind: str, unblended: np.ndarray, *, negation: bool = False) -> None:
        n = int(sel.sum())
        i = inst[sel]

        def sp_only(values: np.ndarray) -> np.ndarray:
            return np.where(mode[sel] == 2, _money(values), np.nan)

        rate = np.where(mode[sel] == 1, spot_rate[sel], price[sel])
        part(
            n,
            line_item_line_item_type=np.full(n, kind),
            _hour=hour[sel],
            line_item_usage_account_id=g_acct[i],
            line_item_product_code="AmazonEC2",
            line_item_usage_type=np.char.add(usage_prefix[sel], t_of[sel]),
            line_item_operation=np.where(mode[sel] == 1, "RunInstances:SV001", "RunInstances"),
            line_item_resource_id=None if negation else inst_ids[i],
            line_item_usage_amount=np.zeros(n) if negation else amount[sel],
            line_item_unblended_rate=-rate if negation else rate,
            line_item_unblended_cost=unblended,
            line_item_line_item_description=np.char.add("Linux ", np.char.add(t_of[sel], " instance-hour")),
            product_product_family="Compute Instance",
            product_servicecode="AmazonEC2",
            product_instance_type=t_of[sel],
            product_instance_family="GPU instance",
            product=products[g_type[i]],
            pricing_term=np.where(mode[sel] == 1, "Spot", "OnDemand"),
            pricing_unit="Hrs",
            pricing_public_on_demand_rate=None if negation else price[sel],
            pricing_public_on_demand_cost=None if negation else od[sel],
            savings_plan_savings_plan_a_r_n=np.where(mode[sel] == 2, SP_ARN, None),
            savings_plan_savings_plan_rate=None if negation else sp_only(sp_rate[sel]),
            savings_plan_savings_plan_effective_cost=None
            if negation
            else sp_only(amount[sel] * sp_rate[sel]),
            resource_tags=np.full(n, "{}") if negation else tag_pool[gpu_res_tags[i]],
        )

    every = np.ones(len(inst), dtype=bool)
    od_sel, spot_sel, sp_sel = mode == 0, mode == 1, mode == 2
    gpu_lines(od_sel, "Usage", od[od_sel])
    gpu_lines(spot_sel, "Usage", _money(amount[spot_sel] * spot_rate[spot_sel]))
    gpu_lines(sp_sel, "SavingsPlanCoveredUsage", od[sp_sel])
    gpu_lines(sp_sel, "SavingsPlanNegation", -od[sp_sel], negation=True)
    gb = np.round(rng.uniform(0.01, 40.0, size=len(inst)), 6)
    part(
        len(inst),
        line_item_line_item_type="Usage",
        _hour=hour[every],
        line_item_usage_account_id=g_acct[inst],
        line_item_product_code="AWSDataTransfer",
        line_item_usage_type="DataTransfer-Regional-Bytes",
        line_item_operation="InterZone-In",
        line_item_resource_id=inst_ids[inst],
        line_item_usage_amount=gb,
        line_item_unblended_rate=0.01,
        line_item_unblended_cost=_money(gb * 0.01),
        line_item_line_item_description="$0.01 per GB - regional data transfer",
        product_product_family="Data Transfer",
        product_servicecode="AWSDataTransfer",
        product='{"product_name": "AWS Data Transfer", "transfer_type": "IntraRegion"}',
        pricing_term="OnDemand",
        pricing_unit="GB",
        pricing_public_on_demand_rate=0.01,
        pricing_public_on_demand_cost=_money(gb * 0.01),
        resource_tags=tag_pool[gpu_res_tags[inst]],
    )
    if len(sp_hours):
        covered = np.bincount(hour[sp_sel], weights=amount[sp_sel] * sp_rate[sp_sel], minlength=HOURS)
        commitment = float(np.round(np.quantile(covered[sp_hours], 0.8), 3))
        used = _money(np.minimum(covered[sp_hours], commitment))
        part(
            len(sp_hours),
            line_item_line_item_type="SavingsPlanRecurringFee",
            _hour=sp_hours,
            line_item_usage_account_id=PAYER,
            line_item_product_code="ComputeSavingsPlans",
            line_item_usage_type="ComputeSP:1yrNoUpfront",
            line_item_resource_id=SP_ARN,
            line_item_usage_amount=1.0,
            line_item_unblended_rate=commitment,
            line_item_unblended_cost=commitment,
            line_item_line_item_description="1 year No Upfront Compute Savings Plan",
            product_product_family="Savings Plan",
            product_servicecode="ComputeSavingsPlans",
            product="{}",
            savings_plan_savings_plan_a_r_n=SP_ARN,
            savings_plan_total_commitment_to_date=commitment,
            savings_plan_used_commitment=used,
            savings_plan_recurring_commitment_for_billing_period=round(commitment * HOURS, 3),
            savings_plan_amortized_upfront_commitment_for_billing_period=0.0,
            resource_tags="{}",
        )

    # other spend, built per kind
    for k, (kind, code, utype, op, unit, per_unit, (lo, hi), family, _) in enumerate(OTHER):
        sel = o_kind == k
        n = int(sel.sum())
        if not n:
            continue
        res = o_res[sel] - k * 10_000_000
        res_rng = np.random.default_rng([seed, k])
        n_res = int(res.max()) + 1
        size = res_rng.uniform(lo, hi, size=n_res)[res]
        qty = np.round(size * res_rng.uniform(0.8, 1.2, size=n), 6)
        if kind == "ec2":
            which = res_rng.integers(0, len(OTHER_EC2), size=n_res)[res]
            ec2_type = np.array([t for t, _ in OTHER_EC2])[which]
            rate = np.array([r for _, r in OTHER_EC2])[which]
            usage_type = np.char.add("BoxUsage:", ec2_type)
            qty = np.ones(n)
            product = np.char.add(
                np.char.add('{"product_name": "Amazon Elastic Compute Cloud", "instance_type": "', ec2_type),
                '", "operating_system": "Linux"}',
            )
            inst_type: object = ec2_type
        else:
            rate = np.full(n, per_unit)
            usage_type = np.full(n, utype)
            product = np.full(n, json.dumps({"product_name": code, "usage_family": family}))
            inst_type = None
        prefix = {"ebs": "vol-0", "snap": "snap-0", "ec2": "i-0", "s3": "bucket-", "s3req": "bucket-",
                  "dto": "i-0", "cw": None}[kind]  # fmt: skip
        ids = None if prefix is None else np.array([f"{prefix}{kind[:2]}{v:014x}" for v in range(n_res)])[res]
        cost = _money(qty * rate)
        part(
            n,
            line_item_line_item_type="Usage",
            _hour=o_hour[sel],
            line_item_usage_account_id=np.array(ACCOUNTS)[res % len(ACCOUNTS)],
            line_item_product_code=code,
            line_item_usage_type=usage_type,
            line_item_operation=op or None,
            line_item_resource_id=ids,
            line_item_usage_amount=qty,
            line_item_unblended_rate=rate,
            line_item_unblended_cost=cost,
            line_item_line_item_description=f"{family} usage",
            product_product_family=family,
            product_servicecode=code,
            product_instance_type=inst_type,
            product=product,
            pricing_term="OnDemand",
            pricing_unit=unit,
            pricing_public_on_demand_rate=rate,
            pricing_public_on_demand_cost=cost,
            resource_tags=tag_pool[res_rng.integers(0, 300, size=n_res)[res]],
        )
    part(
        n_tax,
        line_item_line_item_type="Tax",
        _hour=np.zeros(n_tax, dtype=np.int64),
        _end_hour=np.full(n_tax, HOURS, dtype=np.int64),
        line_item_usage_account_id=np.array(ACCOUNTS),
        line_item_product_code="AmazonEC2",
        line_item_usage_type="Tax",
        line_item_usage_amount=1.0,
        line_item_unblended_cost=np.round(rng.uniform(100, 5000, size=n_tax), 2),
        line_item_line_item_description="Tax for product code AmazonEC2",
        line_item_tax_type="VAT",
        product="{}",
        resource_tags="{}",
    )

    frame = pl.concat(frames, how="diagonal_relaxed")
    n = frame.height
    h = frame["_hour"].to_numpy()
    h_end = (
        frame["_end_hour"].fill_null(pl.Series(h + 1)).to_numpy() if "_end_hour" in frame.columns else h + 1
    )
    stamps = pl.Series(_iso(np.arange(HOURS + 1)))
    start_s, end_s = stamps.gather(h), stamps.gather(h_end)
    order = rng.permutation(n)  # a real export is not sorted by type; keep the generator honest
    frame = frame.with_columns(
        identity_line_item_id=_hex_ids(rng, n),
        identity_time_interval=start_s + "/" + end_s,
        line_item_usage_start_date=start_s,
        line_item_usage_end_date=end_s,
        bill_invoice_id=pl.lit("2143298765"),
        bill_invoicing_entity=pl.lit("Amazon Web Services, Inc."),
        bill_billing_entity=pl.lit("AWS"),
        bill_bill_type=pl.lit("Anniversary"),
        bill_payer_account_id=pl.lit(PAYER),
        bill_payer_account_name=pl.lit("acme-payer"),
        bill_billing_period_start_date=pl.lit("2025-09-01T00:00:00Z"),
        bill_billing_period_end_date=pl.lit("2025-10-01T00:00:00Z"),
        line_item_usage_account_name=pl.col("line_item_usage_account_id").replace_strict(
            {a: f"account-{i}" for i, a in enumerate([*ACCOUNTS, PAYER])}, default=None
        ),
        line_item_availability_zone=pl.lit("us-east-1a"),
        line_item_currency_code=pl.lit("USD"),
        line_item_blended_rate=pl.col("line_item_unblended_rate"),
        line_item_blended_cost=pl.col("line_item_unblended_cost"),
        line_item_legal_entity=pl.lit("Amazon Web Services, Inc."),
        product_region_code=pl.lit("us-east-1"),
        product_location=pl.lit("US East (N. Virginia)"),
        product_sku=pl.col("line_item_usage_type").hash(seed).cast(pl.String).str.slice(0, 16),
        savings_plan_offering_type=pl.when(pl.col("savings_plan_savings_plan_a_r_n").is_not_null()).then(
            pl.lit("ComputeSavingsPlans")
        ),
        cost_category=pl.lit('{"business_unit": "ml-platform"}'),
    )
    for column in COLUMNS:
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(column))
    frame = frame.select(
        pl.col(c).fill_nan(None) if frame.schema[c].is_float() else pl.col(c) for c in COLUMNS
    )[order]
    if frame["identity_line_item_id"].n_unique() != n:
        raise RuntimeError("line item ids are not unique; change --seed")
    gpu_rows = n_gpu
    return frame, {
        "rows": n,
        "gpu_instances": n_inst,
        "gpu_rows": gpu_rows,
        "gpu_instance_hours": len(inst),
        "savings_plan_fee_rows": len(sp_hours),
        "other_rows": n_other + n_tax,
    }


def tiled_file(args: argparse.Namespace) -> tuple[Path, dict[str, int]]:
    """``--tile N``: the seeded file of N rows written ``rows / N`` times over, each copy's line
    item ids made its own (their last two hex digits set to the copy's number; the generated ids
    differ in their first eight), so a month of ``rows`` lines costs a pass over bytes instead of a
    generation in memory. Each resource-hour then has that many copies of its lines."""
    copies = args.rows // args.tile
    if copies * args.tile != args.rows or not 1 <= copies <= 256 or args.format != "csv" or args.gzip:
        raise SystemExit("--tile: rows must be 1..256 times the tile, CSV, not gzip")
    base, info = cur_file(argparse.Namespace(**{**vars(args), "rows": args.tile, "tile": None}))
    path = base.with_name(base.name.replace(f"_{args.tile}_", f"_{args.rows}_tiled{copies}_"))
    meta = path.with_name(path.name + ".json")
    if path.exists() and meta.exists():
        return path, json.loads(meta.read_text())
    t0 = time.perf_counter()
    tmp = path.with_name(path.name + ".part")
    with tmp.open("wb") as out:
        for copy in range(copies):
            mark = b"%02x" % copy
            with base.open("rb") as f:
                header = f.readline()
                if copy == 0:
                    out.write(header)
                while block := f.readlines(1 << 26):
                    out.write(b"".join(line[:50] + mark + line[52:] for line in block))
    tmp.rename(path)
    scaled = {
        k: v * copies
        for k, v in info.items()
        if k in ("rows", "gpu_rows", "savings_plan_fee_rows", "other_rows")
    }
    info = {**info, **scaled, "bytes": path.stat().st_size, "generate_s": info["generate_s"]}
    info["write_s"] = round(time.perf_counter() - t0, 2)
    meta.write_text(json.dumps(info))
    return path, info


def cur_file(args: argparse.Namespace) -> tuple[Path, dict[str, int]]:
    """The generated file (cached by its arguments) and what is in it."""
    if getattr(args, "tile", None):
        return tiled_file(args)
    name = f"cur2_2025-09_hourly_{args.rows}_s{args.seed}_g{args.gpu_share:g}.{args.format}"
    name += ".gz" if args.gzip and args.format == "csv" else ""
    path = Path(args.workdir) / "cur" / name
    meta = path.with_name(path.name + ".json")
    if path.exists() and meta.exists():
        return path, json.loads(meta.read_text())
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    frame, info = generate(args.rows, args.gpu_share, args.seed)
    t1 = time.perf_counter()
    tmp = path.with_name(path.name + ".part")
    if args.format == "parquet":
        # as a CUR 2.0 Parquet export types them: times as UTC timestamps, numbers as doubles
        times = [c for c in frame.columns if c.endswith(("_date", "_time")) and frame[c].dtype == pl.String]
        frame = frame.with_columns(
            pl.col(c).str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_zone="UTC", time_unit="ms") for c in times
        )
        frame.write_parquet(tmp, compression="snappy", row_group_size=100_000)
    else:
        compression = "gzip" if args.gzip else "uncompressed"
        frame.write_csv(tmp, float_scientific=False, compression=compression, check_extension=False)
    tmp.rename(path)
    info |= {"bytes": path.stat().st_size, "generate_s": round(t1 - t0, 2),
             "write_s": round(time.perf_counter() - t1, 2)}  # fmt: skip
    meta.write_text(json.dumps(info))
    return path, info


# --- phases (each in a child process) ----------------------------------------------------------


def _rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _profiled(stats_file: str | None, fn: object, *a: object, **kw: object) -> object:
    """``fn(*a, **kw)``, under cProfile (stats dumped to ``stats_file``) when one is given."""
    if not stats_file:
        return fn(*a, **kw)  # type: ignore[operator]
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(fn, *a, **kw)  # type: ignore[arg-type]
    finally:
        profiler.dump_stats(stats_file)


def run_phase(args: argparse.Namespace) -> None:
    from connectors.aws_cur import AwsCurConfig, AwsCurConnector
    from service.db import make_engine

    connector = AwsCurConnector(AwsCurConfig(name=SOURCE, path=args.file, chunk_rows=args.chunk_rows))
    base = _rss_mb()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    detail: dict[str, object] = {}
    if args.phase == "parse":
        lines = refused = batches = 0
        for batch in connector.read(START, END):
            if isinstance(batch, Exception):
                raise batch
            batches += 1
            lines += batch.lines.height
            refused += len(batch.refused)
        detail = {"lines": lines, "refused": refused, "batches": batches}
    elif args.phase == "import":
        from service.billing.ingest import ingest_billing

        engine = make_engine(args.db)
        call = (ingest_billing, engine, SOURCE, connector, START, END)
        result = _profiled(args.profile, *call, after_import=lambda *a: None)
        server = _server_cpu_s(engine)
        engine.dispose()
        detail = {"lines": result.accepted, "refused": result.refused, "status": str(result.status)}
        if server is not None:
            detail["server_cpu_s"] = round(server, 1)
    elif args.phase == "reprice":
        from sqlalchemy import func, select

        from service.billing.rates import reprice
        from service.models import BillingLine

        engine = make_engine(args.db)
        with engine.connect() as conn:
            stored = conn.execute(select(func.count()).select_from(BillingLine)).scalar_one()
        base, wall0 = _rss_mb(), time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        r = _profiled(args.profile, reprice, engine, START, END)
        engine.dispose()
        detail = {"lines": stored, "resources": r.resources, "rates": r.rates,
                  "device_rows": r.device_rows, "unmonitored_rows": r.unmonitored_rows}  # fmt: skip
    wall = time.perf_counter() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    # Not ru_maxrss: Linux carries the high-water mark of the image a child replaced by exec (the
    # forked parent's RSS) into the child's ru_maxrss. VmHWM belongs to this process's own memory.
    print("RESULT " + json.dumps({"wall": wall, "cpu": cpu, "peak_mb": _rss_mb("VmHWM"),
                                  "ru_maxrss_mb": cpu1.ru_maxrss / 1024,
                                  "base_mb": base, **detail}))  # fmt: skip


def _server_cpu_s(engine: object) -> float | None:
    """PostgreSQL on this machine: CPU seconds of the server processes serving the benchmark's
    database (its pooled connections live until the engine is disposed; a server shared with other
    work is not counted). None elsewhere."""
    from sqlalchemy import text

    if engine.dialect.name != "postgresql":  # type: ignore[attr-defined]
        return None
    with engine.connect() as conn:  # type: ignore[attr-defined]
        pids = (
            conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"))
            .scalars()
            .all()
        )
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None  # another machine's server
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def child(phase: str, file: Path, db: str, args: argparse.Namespace, profile: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--phase", phase, "--file", str(file), "--db", db,
           "--chunk-rows", str(args.chunk_rows)]  # fmt: skip
    if profile:
        cmd += ["--profile", profile]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"phase {phase} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


# --- the parent: machine, file, phases, table -------------------------------------------------


def machine() -> str:
    cpu = next(
        (x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines()
         if x.startswith("model name")),
        platform.processor() or platform.machine(),
    )  # fmt: skip
    mem = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
    gib = int(mem.split()[1]) / 1024**2
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME", platform.system())
    except OSError:
        os_name = platform.system()
    threads = os.environ.get("POLARS_MAX_THREADS", "default")
    return (
        f"{cpu}, {os.cpu_count()} cores, {gib:.1f} GiB, {os_name}, Python {platform.python_version()}, "
        f"polars {pl.__version__}, numpy {np.__version__}, POLARS_MAX_THREADS={threads}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def _row(run: int, phase: str, db: str, r: dict) -> str:
    rate = r["lines"] / r["wall"] if r["wall"] else float("nan")
    notes = ("server_cpu_s", "batches", "resources", "rates", "unmonitored_rows")
    extra = ", ".join(f"{k} {r[k]:,}" for k in notes if k in r)
    if r.get("refused"):
        extra += f", REFUSED {r['refused']:,}"
    return (
        f"| {run} | {phase} | {db} | {r['lines']:,} | {r['wall']:.1f} | {r['cpu']:.1f} | {rate:,.0f} | "
        f"{r['peak_mb']:,.0f} | {r['base_mb']:,.0f} | {extra} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--gpu-share", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--format", choices=["csv", "parquet"], default="csv", help="of the generated file")
    parser.add_argument("--tile", type=int, help="generate this many rows, write them rows/tile times")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--chunk-rows", type=int, default=20_000)  # AwsCurConfig.chunk_rows' default
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpu-ledger-bench"))
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="also import/reprice on this server")
    parser.add_argument(
        "--db-prefix", default="bench_billing", help="PostgreSQL: the run's database is PREFIX_<pid>_<run>"
    )
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--skip-parse", action="store_true")
    parser.add_argument("--profile-reprice", action="store_true", help="also: reprice under cProfile")
    parser.add_argument("--profile-import", action="store_true", help="also: import under cProfile (SQLite)")
    parser.add_argument("--reimport", action="store_true", help="PostgreSQL: import the same file again")
    parser.add_argument("--skip-reprice", action="store_true")
    parser.add_argument("--phase", choices=["parse", "import", "reprice"], help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        run_phase(args)
        return

    from sqlalchemy import text

    from service.db import make_engine, migrate

    print(f"machine: {machine()}")
    path, info = cur_file(args)
    print(
        f"file: {path} ({info['bytes'] / 1e6:,.0f} MB{', gzip' if args.gzip else ''}; generated in "
        f"{info['generate_s']} s + written in {info['write_s']} s): {info['rows']:,} rows = "
        f"{info['gpu_rows']:,} GPU-instance rows ({info['gpu_rows'] / info['rows']:.1%}: "
        f"{info['gpu_instances']} instances, {info['gpu_instance_hours']:,} instance-hours) + "
        f"{info['savings_plan_fee_rows']} Savings Plan fee rows + {info['other_rows']:,} other rows; "
        f"chunk_rows {args.chunk_rows:,}"
    )
    print()
    print(
        "| run | phase | database | rows | wall s | CPU s | rows/s | peak RSS MB | RSS after imports MB "
        "| notes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    work = Path(args.workdir)
    for run in range(1, args.repeat + 1):
        if not args.skip_parse:
            print(_row(run, "parse", "–", child("parse", path, "", args)), flush=True)
        if not args.skip_sqlite:
            db_path = work / f"bench_{os.getpid()}_{run}.db"
            for p in work.glob(f"{db_path.name}*"):
                p.unlink()
            url = f"sqlite:///{db_path}"
            migrate(url)
            print(_row(run, "import", "SQLite", child("import", path, url, args)), flush=True)
            if args.profile_reprice and run == 1:
                copy = work / f"profile_{os.getpid()}.db"
                shutil.copyfile(db_path, copy)
                for suffix in ("-wal", "-shm"):
                    if Path(f"{db_path}{suffix}").exists():
                        shutil.copyfile(f"{db_path}{suffix}", f"{copy}{suffix}")
            if not args.skip_reprice:
                print(_row(run, "reprice", "SQLite", child("reprice", path, url, args)), flush=True)
            for p in work.glob(f"{db_path.name}*"):
                p.unlink()
        if args.postgres:
            name = f"{args.db_prefix}_{os.getpid()}_{run}"
            admin = make_engine(args.postgres, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            url = args.postgres.rsplit("/", 1)[0] + f"/{name}"
            try:
                migrate(url)
                print(_row(run, "import", "PostgreSQL", child("import", path, url, args)), flush=True)
                if args.reimport:
                    before = _stored(url)
                    print(_row(run, "re-import", "PostgreSQL", child("import", path, url, args)), flush=True)
                    after = _stored(url)
                    print(f"stored lines, Σ billed, Σ effective, max id: before {before}, after {after}")
                    assert before[:3] == after[:3], "re-importing the same file changed the stored lines"
                if not args.skip_reprice:
                    print(_row(run, "reprice", "PostgreSQL", child("reprice", path, url, args)), flush=True)
            finally:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                admin.dispose()
    if args.profile_reprice and not args.skip_sqlite:
        copy = work / f"profile_{os.getpid()}.db"
        _print_profile("reprice (on a copy of run 1's SQLite file)", path, f"sqlite:///{copy}", args)
        for p in work.glob(f"{copy.name}*"):
            p.unlink()
    if args.profile_import:
        db_path = work / f"profile_import_{os.getpid()}.db"
        migrate(f"sqlite:///{db_path}")
        _print_profile("import (fresh SQLite file)", path, f"sqlite:///{db_path}", args, phase="import")
        for p in work.glob(f"{db_path.name}*"):
            p.unlink()


def _stored(url: str) -> tuple[object, ...]:
    """What ``billing_line`` holds: lines, Σ billed, Σ effective cost, the largest id."""
    from sqlalchemy import text

    from service.db import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = "SELECT count(*), sum(billed_cost), sum(effective_cost), max(id) FROM billing_line"
            return tuple(conn.execute(text(query)).one())
    finally:
        engine.dispose()


def _print_profile(what: str, path: Path, url: str, args: argparse.Namespace, phase: str = "reprice") -> None:
    import pstats

    stats_file = Path(args.workdir) / f"{phase}_{os.getpid()}.prof"
    r = child(phase, path, url, args, profile=str(stats_file))
    print(f"\n{what} under cProfile: wall {r['wall']:.1f} s; top 15 by cumulative time:\n")
    pstats.Stats(str(stats_file)).sort_stats("cumulative").print_stats(15)
    stats_file.unlink()


if __name__ == "__main__":
    main()
