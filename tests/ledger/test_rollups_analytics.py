"""Every analytic answers the same from the group rollups as from the device-level ledger.

A hand-built ledger: mixed currencies (USD, EUR, unpriced), MIG fractions (1/7, 3/7), split
device-hours (two workloads in one device-hour), unallocated time, NULL dimensions, three days
across a month end. Each question is asked with the rollups (``rollup=True``, the group rollups
chosen where they serve) and with ``rollup=False`` (``ledger_hour`` alone): money must be equal to
the nano, GPU-hours to 1e-6 (float sums in another order), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from ledger_rows import (
    put,  # noqa: F401  (fixture)
    row,
)
from sqlalchemy import Engine, delete, select

from service.analytics.access import ALL, Access
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy, LedgerFilter
from service.analytics.effective import effective_cost
from service.analytics.idle import idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import Window, is_group_source, money_share_sum
from service.models import FxRate, LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHour

UTC = dt.UTC
# ledger_rows.D0 is 2025-01-06; these hours put the ledger over 2025-01-30 … 2025-02-01.
H0 = 24 * 24  # 2025-01-30T00Z, in hours after D0
DAYS = 3


def _ledger_rows() -> list[Any]:
    rows: list[Any] = []
    for h in range(H0, H0 + DAYS * 24):
        k = h - H0
        idle = float((k * 53) % 1800)
        # A whole GPU, on-prem, USD; every third hour unallocated; one hour in five split in two.
        if k % 5 == 0:
            for part, (wl, project, user) in enumerate((("job-1", "alpha", "ann"), ("job-2", "beta", None))):
                rows.append(
                    row(h, "GPU-a", wl, project=project, team="t1", user_name=user, present_s=1800.0,
                        observed_s=1800.0, busy_s=float(300 + part * 100), idle_s=idle / 2,
                        hist_0_1_s=idle / 2, hist_10_25_s=1800.0 - idle / 2, obs_s_sm_active=1800.0,
                        busy_s_sm_active=float(300 + part * 100), idle_s_sm_active=idle / 2,
                        energy_j=float(k * 500), cost="1.050000001", idle_cost=f"0.{k:03d}000007")
                )  # fmt: skip
        else:
            wl = "" if k % 3 == 0 else "job-1"
            rows.append(
                row(h, "GPU-a", wl, project=None if not wl else "alpha", team=None if not wl else "t1",
                    user_name=None if not wl else "ann", busy_s=float((k * 37) % 2000), idle_s=idle,
                    hist_0_1_s=idle, hist_10_25_s=3600.0 - idle, obs_s_sm_active=3600.0,
                    busy_s_sm_active=float((k * 37) % 2000), idle_s_sm_active=idle,
                    energy_j=None if k % 4 == 0 else float(k * 1000), cost=f"2.{k % 997:03d}000001",
                    idle_cost=f"0.000{k % 89:02d}0003", node="n1", instance_id=None)
            )  # fmt: skip
        # Two MIG instances of one AWS GPU, EUR; their even-hour workload has no project (NULL dims).
        for dev, frac, profile in (("MIG-1", 1 / 7, "1g.18gb"), ("MIG-3", 3 / 7, "3g.71gb")):
            rows.append(
                row(h, dev, f"pod-{dev}-{k % 2}", project="beta" if k % 2 else None, team=None,
                    namespace="ml" if dev == "MIG-3" else None, environment="aws", provider="aws",
                    region="us-east-1", gpu_model="H100", instance_type="p5.48xlarge",
                    gpu_fraction=frac, mig_profile=profile, node="ip-10-0-0-1",
                    instance_id="i-0abc", default_metric="gpu_util", busy_s=float(h % 3600),
                    obs_s_gpu_util=3600.0, busy_s_gpu_util=float(h % 3600), idle_s=float(h % 11),
                    hist_0_1_s=float(h % 11), hist_50_75_s=3600.0 - float(h % 11),
                    idle_s_gpu_util=float(h % 11), cost="0.142857143", idle_cost="0.000000007",
                    currency="EUR", rate_source="billing:x")
            )  # fmt: skip
        # A GCP GPU nobody priced (cost and currency NULL), present half the hour, observed less.
        rows.append(
            row(h, "GPU-g", "" if k % 2 else "train", project="gamma" if not k % 2 else None,
                environment="gcp", provider="gcp", region=None, gpu_model=None, present_s=1800.0,
                observed_s=900.0, idle_s=450.0, hist_0_1_s=450.0, hist_75_100_s=450.0,
                obs_s_sm_active=900.0, idle_s_sm_active=450.0, currency=None, rate_source=None)
        )  # fmt: skip
    days = {(dt.datetime(2025, 1, 30, tzinfo=UTC) + dt.timedelta(days=d)).date() for d in range(DAYS)}
    rows += [FxRate(base="EUR", quote="USD", day=d, rate=Decimal("1.0833")) for d in days]
    return rows


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    put(_ledger_rows())


def comparable(rows: list[Any]) -> list[Any]:
    def norm(value: Any) -> Any:
        return round(value, 6) if isinstance(value, float) else value

    return [{k: norm(v) for k, v in dataclasses.asdict(r).items()} for r in rows]


QUERIES = {
    "usage": lambda c, q: usage(c, q),
    "usage_gpu_util": lambda c, q: usage(c, q, "gpu_util"),
    "cost": lambda c, q: cost(c, q),
    "cost_shared_usd": lambda c, q: cost(c, q, IdlePolicy.SHARE_BY_USAGE, "USD"),
    "cost_evenly": lambda c, q: cost(c, q, IdlePolicy.SHARE_EVENLY),
    "idle": lambda c, q: idle_waste(c, q, streak=False),
    "idle_streak": lambda c, q: idle_waste(c, q),
    "idle_10": lambda c, q: idle_waste(c, q, threshold_pct=10.0),
    "effective": lambda c, q: effective_cost(c, q),
}
START = dt.datetime(2025, 1, 30, tzinfo=UTC)
WINDOWS = {
    "whole days": Window(START, START + dt.timedelta(days=DAYS)),
    "cut mid-day": Window(START + dt.timedelta(hours=7), START + dt.timedelta(days=DAYS, hours=-5)),
    "inside one day": Window(START + dt.timedelta(hours=26), START + dt.timedelta(hours=40)),
}
GROUPINGS: list[tuple[Dimension, ...]] = [
    (),
    (Dimension.PROJECT,),
    (Dimension.ENVIRONMENT, Dimension.TEAM),
    (Dimension.GPU_MODEL, Dimension.USER, Dimension.NAMESPACE),
    (Dimension.REGION, Dimension.INSTANCE_TYPE, Dimension.PROVIDER),
    (Dimension.DEVICE,),  # device level: today's path, asked to prove the two agree there too
]
SCOPES = {
    "all": (ALL, LedgerFilter()),
    "project beta": (Access(everything=False, projects=frozenset({"beta"})), LedgerFilter()),
    "filtered": (ALL, LedgerFilter({Dimension.ENVIRONMENT: ["aws", "gcp"]}, unallocated=False)),
    "unallocated only": (ALL, LedgerFilter(unallocated=True)),
}


def _serves_from_groups(q: LedgerQuery) -> bool:
    return is_group_source(q.source())


@pytest.mark.slow
@pytest.mark.parametrize("window_name", list(WINDOWS))
@pytest.mark.parametrize("granularity", list(Granularity), ids=lambda g: g.name)
def test_every_answer_equal_with_and_without_rollups(
    engine: Engine, ledger: None, window_name: str, granularity: Granularity
) -> None:
    # one case per granularity: ~2,000 queries per window otherwise, one worker's minute at the end of
    # the suite while the other waits
    window = WINDOWS[window_name]
    # Every combination on the window that needs both edges; on the others, the combinations that
    # differ only by what the window changes (the suite's time: each case runs every query twice).
    full = window_name == "cut mid-day"
    groupings = GROUPINGS if full else [g for g in GROUPINGS if Dimension.DEVICE not in g]
    scopes = SCOPES if full else {k: SCOPES[k] for k in ("all", "project beta")}
    served = 0
    with engine.connect() as conn:
        for group_by in groupings:
            for scope_name, (access, flt) in scopes.items():
                q = LedgerQuery(window, granularity, group_by, flt, access=access)
                served += _serves_from_groups(q)
                assert _serves_from_groups(q) == (Dimension.DEVICE not in group_by)
                for name, query in QUERIES.items():
                    rolled = query(conn, q)
                    hourly = query(conn, dataclasses.replace(q, rollup=False))
                    where = (name, granularity, group_by, scope_name)
                    if scope_name in ("all", "unallocated only") and name != "idle_10":
                        assert rolled, where
                    assert comparable(rolled) == comparable(hourly), where
    assert served == (len(GROUPINGS) - 1) * len(scopes)


def test_hand_computed_cost_by_project_from_group_rollups(engine: Engine, ledger: None) -> None:
    """The group rollups alone answer: ledger_hour and ledger_day emptied, the answer stays."""
    window = WINDOWS["cut mid-day"]
    q = LedgerQuery(window, Granularity.TOTAL, (Dimension.PROJECT,), access=ALL)
    with engine.connect() as conn:
        before = cost(conn, q)
    with engine.begin() as conn:
        conn.execute(delete(LedgerHour))
        conn.execute(delete(LedgerDay))
    with engine.connect() as conn:
        after = cost(conn, q)
        device_level = cost(conn, dataclasses.replace(q, rollup=False))
    assert device_level == []
    assert comparable(after) == comparable(before)
    # Hand-computed: GPU-g is unpriced (XXX); the EUR MIG rows cost 0.142857143 per instance-hour.
    # Window: 2025-01-30T07Z … 2025-02-01T19Z = 60 hours; MIG rows have project beta when k is odd.
    eur = {(r.key.value(Dimension.PROJECT), r.unallocated): r.cost for r in after if r.currency == "EUR"}
    beta_hours = sum(1 for k in range(7, 67) if k % 2)
    assert eur[("beta", False)] == Decimal("0.142857143") * 2 * beta_hours
    assert eur[(None, False)] == Decimal("0.142857143") * 2 * (60 - beta_hours)
    usd = {(r.key.value(Dimension.PROJECT), r.unallocated): r.cost for r in after if r.currency == "USD"}
    expected_alpha = Decimal(0)
    expected_beta = Decimal(0)
    expected_pool = Decimal(0)
    for k in range(7, 67):
        if k % 5 == 0:
            expected_alpha += Decimal("1.050000001")
            expected_beta += Decimal("1.050000001")
        elif k % 3 == 0:
            expected_pool += Decimal(f"2.{k % 997:03d}000001")
        else:
            expected_alpha += Decimal(f"2.{k % 997:03d}000001")
    assert usd == {
        ("alpha", False): expected_alpha,
        ("beta", False): expected_beta,
        (None, True): expected_pool,
    }


def test_guard_device_level_measures_never_read_group_rollups(engine: Engine, ledger: None) -> None:
    q = LedgerQuery(WINDOWS["whole days"], Granularity.DAY, (Dimension.PROJECT,), access=ALL)
    src = q.source()
    assert is_group_source(src)
    for column in ("device_id", "node", "instance_id", "mig_profile", "source", "workload"):
        assert column not in src.c
    with pytest.raises(TypeError, match="per-row ratio"):
        money_share_sum(src.c.cost, src.c.idle_s, src.c.present_s, "sqlite")
    # per_device, rollup=False, and dimensions the group rollups lack all give the device level
    assert not is_group_source(q.source(per_device=True))
    assert not is_group_source(q.source(rollup=False))
    for dim in (Dimension.DEVICE, Dimension.NODE, Dimension.WORKLOAD):
        grouped = LedgerQuery(q.window, q.granularity, (dim,), access=ALL)
        filtered = LedgerQuery(q.window, q.granularity, (), LedgerFilter({dim: ["x"]}), access=ALL)
        assert not is_group_source(grouped.source())
        assert not is_group_source(filtered.source())
    assert "device_id" in q.source(per_device=True).c


def test_group_rollups_grow_with_groups_not_devices(engine: Engine, put) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    # 50 more GCP GPUs like GPU-g over the same hours: ledger_hour grows, the group rollups do not.
    base = _ledger_rows()
    clones = [
        row(h, f"GPU-g{i}", "" if (h - H0) % 2 else "train", project="gamma" if not (h - H0) % 2 else None,
            environment="gcp", provider="gcp", region=None, gpu_model=None, present_s=1800.0,
            observed_s=900.0, idle_s=450.0, hist_0_1_s=450.0, hist_75_100_s=450.0,
            obs_s_sm_active=900.0, idle_s_sm_active=450.0, currency=None, rate_source=None)
        for i in range(50)
        for h in range(H0, H0 + DAYS * 24)
    ]  # fmt: skip
    put(base + clones)
    with engine.connect() as conn:
        hours = len(conn.execute(select(LedgerHour.id)).all())  # type: ignore[call-overload]
        group_hours = len(conn.execute(select(LedgerGroupHour.id)).all())  # type: ignore[call-overload]
        group_days = len(conn.execute(select(LedgerGroupDay.id)).all())  # type: ignore[call-overload]
        gcp = conn.execute(
            select(LedgerGroupDay.present_s, LedgerGroupDay.hour_rows).where(  # type: ignore[call-overload]
                LedgerGroupDay.environment == "gcp",
                LedgerGroupDay.unallocated.is_(True),  # type: ignore[union-attr]
            )
        ).all()
    split = sum(1 for k in range(DAYS * 24) if k % 5 == 0)
    assert hours == DAYS * 24 * (4 + 50) + split
    assert group_hours == DAYS * 24 * 4 + split  # one group row per device-like group and hour
    # per day: GPU-a alpha, beta, pool; MIG-1 and MIG-3 each beta or no project; GPU-g gamma, pool
    assert group_days == DAYS * (3 + 2 + 2 + 2)
    # the unallocated GCP time: 12 odd hours a day × 51 GPUs × 1800 s
    assert sorted(gcp) == [(12 * 51 * 1800.0, 12 * 51)] * DAYS
