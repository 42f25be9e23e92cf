"""Every reporting view's sums over a window equal GraphQL's answer to the same question on the demo
fleet plus the billing scenario, on PostgreSQL: money exactly (Decimal), GPU-hours to GraphQL's 6
printed decimals. The views are read as the BI login (a member of the reporting role)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from api.conftest import serve
from reporting.helpers import COLUMN, ENUM, close, gql, instant, keyed, money, view_rows, window
from sqlalchemy import Connection, Engine

#: The session database takes the demo fleet's ingest (~10 s) before the first test.
pytestmark = [pytest.mark.postgres, pytest.mark.slow]

UTC = dt.UTC
#: Cut mid-day at both ends (hourly views); the end hour holds data, so an inclusive end would show.
CUT = (dt.datetime(2025, 9, 1, 3, tzinfo=UTC), dt.datetime(2025, 9, 2, 5, tzinfo=UTC))
#: Whole UTC days: the demo's two and the billing scenario's 2025-09-03.
DAYS = (dt.datetime(2025, 9, 1, tzinfo=UTC), dt.datetime(2025, 9, 4, tzinfo=UTC))
SEPTEMBER = (dt.datetime(2025, 9, 1, tzinfo=UTC), dt.datetime(2025, 10, 1, tzinfo=UTC))


@pytest.fixture(scope="module")
def base(reporting_engine: Engine) -> Iterator[str]:
    yield from serve(reporting_engine)


@pytest.fixture
def bi(bi_engine: Engine) -> Iterator[Connection]:
    with bi_engine.connect() as conn:
        yield conn


def _dims(fields: list[str]) -> str:
    return ", ".join(ENUM[f] for f in fields)


def _group_sql(view: str, time: str, fields: list[str], measures: dict[str, str], extra: list[str]) -> str:
    cols = [time, *(COLUMN[f] for f in fields), *extra]
    sums = [f"{expr} AS {name}" for name, expr in measures.items()]
    return (
        f"SELECT {', '.join(cols)}, {', '.join(sums)} FROM reporting.{view} "
        f"WHERE {time} >= :start AND {time} < :end GROUP BY {', '.join(cols)}"
    )


def _usage_case(base: str, bi: Connection, view: str, time: str, gran: str, fields: list[str], w: Any) -> int:
    answer = gql(
        base,
        f"query($w: TimeWindow!) {{ usage(window: $w, granularity: {gran}, groupBy: [{_dims(fields)}]) "
        f"{{ periodStart {' '.join(fields)} gpuHours effectiveGpuHours idleGpuHours energyKwh }} }}",
        {"w": window(*w)},
    )["usage"]
    measures = {
        "gpu_hours": "sum(gpu_hours)",
        "effective_gpu_hours": "sum(effective_gpu_hours)",
        "idle_gpu_hours": "sum(idle_gpu_hours)",
        "energy_kwh": "sum(energy_kwh)",
    }
    rows = view_rows(bi, _group_sql(view, time, fields, measures, []), {"start": w[0], "end": w[1]})
    got = keyed(rows, [time, *(COLUMN[f] for f in fields)])
    assert answer and len(got) == len(answer), (view, len(got), len(answer))
    for a in answer:
        start = instant(a["periodStart"])
        k = (start if time != "day" else start.date() if start else None, *(a[f] for f in fields))
        v = got[k]
        for name, field in (
            ("gpu_hours", "gpuHours"),
            ("effective_gpu_hours", "effectiveGpuHours"),
            ("idle_gpu_hours", "idleGpuHours"),
            ("energy_kwh", "energyKwh"),
        ):
            assert close(v[name], a[field]), (view, k, name, v[name], a[field])
    return len(answer)


def _cost_case(
    base: str, bi: Connection, view: str, time: str, gran: str, fields: list[str], w: Any
) -> Decimal:
    answer = gql(
        base,
        f"query($w: TimeWindow!) {{ cost(window: $w, granularity: {gran}, groupBy: [{_dims(fields)}]) "
        f"{{ periodStart {' '.join(fields)} cost {{ amount currency }} idleCost {{ amount }} gpuHours "
        "unpricedGpuHours unallocated } }",
        {"w": window(*w)},
    )["cost"]
    measures = {
        "cost": "sum(cost)",
        "idle_cost": "sum(idle_cost)",
        "gpu_hours": "sum(gpu_hours)",
        "unpriced_gpu_hours": "sum(unpriced_gpu_hours)",
    }
    sql = _group_sql(view, time, fields, measures, ["currency", "unallocated"])
    got = keyed(
        view_rows(bi, sql, {"start": w[0], "end": w[1]}),
        [time, *(COLUMN[f] for f in fields), "currency", "unallocated"],
    )
    assert answer and len(got) == len(answer), (view, len(got), len(answer))
    total = Decimal(0)
    for a in answer:
        start = instant(a["periodStart"])
        when = start if time != "day" else start.date() if start else None
        k = (when, *(a[f] for f in fields), a["cost"]["currency"], a["unallocated"])
        v = got[k]
        assert money(v["cost"]) == a["cost"]["amount"], (view, k)
        assert money(v["idle_cost"]) == a["idleCost"]["amount"], (view, k)
        assert close(v["gpu_hours"], a["gpuHours"]) and close(v["unpriced_gpu_hours"], a["unpricedGpuHours"])
        total += Decimal(a["cost"]["amount"])
    return total


def test_hourly_group_view_equals_usage_and_cost(base: str, bi: Connection) -> None:
    assert (
        _usage_case(
            base,
            bi,
            "usage_cost_hourly_v1",
            "hour_start",
            "HOUR",
            ["environment", "project", "gpuModel"],
            CUT,
        )
        > 26
    )
    total = _cost_case(base, bi, "usage_cost_hourly_v1", "hour_start", "HOUR", ["environment", "team"], CUT)
    assert total > 0
    _cost_case(
        base,
        bi,
        "usage_cost_hourly_v1",
        "hour_start",
        "HOUR",
        ["provider", "account", "region", "cluster", "instanceType", "namespace", "user"],
        CUT,
    )


def test_daily_group_view_equals_usage_and_cost(base: str, bi: Connection) -> None:
    _usage_case(
        base,
        bi,
        "usage_cost_daily_v1",
        "day",
        "DAY",
        ["region", "cluster", "instanceType", "namespace", "user"],
        DAYS,
    )
    _cost_case(
        base, bi, "usage_cost_daily_v1", "day", "DAY", ["provider", "account", "project", "gpuModel"], DAYS
    )


def test_device_views_equal_usage_and_cost_by_device_node_workload(base: str, bi: Connection) -> None:
    _usage_case(
        base, bi, "device_usage_cost_hourly_v1", "hour_start", "HOUR", ["device", "node", "workload"], CUT
    )
    _cost_case(base, bi, "device_usage_cost_hourly_v1", "hour_start", "HOUR", ["device", "workload"], CUT)
    _usage_case(base, bi, "device_usage_cost_daily_v1", "day", "DAY", ["device", "project"], DAYS)
    _cost_case(
        base, bi, "device_usage_cost_daily_v1", "day", "DAY", ["node", "workload", "environment"], DAYS
    )


EFFECTIVE = """query($w: TimeWindow!) { effectiveCost(window: $w, groupBy: [ENVIRONMENT, GPU_MODEL]) {
  environment gpuModel gpuHours effectiveGpuHours cost { amount currency }
  costPerGpuHour { amount currency } costPerEffectiveGpuHour { amount currency } metric } }"""


def test_effective_cost_view_equals_effective_cost_per_day_and_over_days(base: str, bi: Connection) -> None:
    day = DAYS[0]
    while day < DAYS[1]:
        answer = gql(base, EFFECTIVE, {"w": window(day, day + dt.timedelta(days=1))})["effectiveCost"]
        rows = view_rows(
            bi, "SELECT * FROM reporting.effective_cost_daily_v1 WHERE day = :d", {"d": day.date()}
        )
        got = keyed(rows, ["environment", "gpu_model", "currency"])
        assert answer and len(got) == len(answer), day
        for a in answer:
            v = got[(a["environment"], a["gpuModel"], a["cost"]["currency"])]
            assert money(v["cost"]) == a["cost"]["amount"]
            for col, field in (
                ("cost_per_gpu_hour", "costPerGpuHour"),
                ("cost_per_effective_gpu_hour", "costPerEffectiveGpuHour"),
            ):
                assert (None if v[col] is None else money(v[col])) == (a[field] and a[field]["amount"]), (
                    day,
                    col,
                )
            assert close(v["gpu_hours"], a["gpuHours"]) and close(
                v["effective_gpu_hours"], a["effectiveGpuHours"]
            )
            assert v["metric"].upper() == a["metric"]
        day += dt.timedelta(days=1)
    # Over several days: the sums of the days are the window's answer (cost exactly).
    answer = gql(base, EFFECTIVE, {"w": window(*DAYS)})["effectiveCost"]
    rows = view_rows(
        bi,
        "SELECT environment, gpu_model, currency, sum(cost) AS cost, sum(gpu_hours) AS gpu_hours, "
        "sum(effective_gpu_hours) AS effective_gpu_hours FROM reporting.effective_cost_daily_v1 "
        "WHERE day >= :a AND day < :b GROUP BY environment, gpu_model, currency",
        {"a": DAYS[0].date(), "b": DAYS[1].date()},
    )
    got = keyed(rows, ["environment", "gpu_model", "currency"])
    assert len(got) == len(answer)
    for a in answer:
        v = got[(a["environment"], a["gpuModel"], a["cost"]["currency"])]
        assert money(v["cost"]) == a["cost"]["amount"]
        assert close(v["effective_gpu_hours"], a["effectiveGpuHours"])


def test_idle_waste_view_equals_idle_waste(base: str, bi: Connection) -> None:
    answer = gql(
        base,
        "query($w: TimeWindow!) { idleWaste(window: $w, granularity: DAY, groupBy: [ENVIRONMENT, PROJECT]) { "
        "periodStart environment project idleGpuHours idleCost { amount currency } allocatedIdleGpuHours "
        "allocatedIdleCost { amount } unallocatedIdleGpuHours unallocatedIdleCost { amount } } }",
        {"w": window(*DAYS)},
    )["idleWaste"]
    rows = view_rows(
        bi,
        "SELECT day, environment, project, currency, sum(idle_gpu_hours) AS idle_h, "
        "sum(allocated_idle_gpu_hours) AS alloc_h, sum(unallocated_idle_gpu_hours) AS free_h, "
        "sum(idle_cost) AS idle_cost, sum(allocated_idle_cost) AS alloc_cost, "
        "sum(unallocated_idle_cost) AS free_cost FROM reporting.idle_waste_daily_v1 "
        "WHERE day >= :a AND day < :b GROUP BY day, environment, project, currency",
        {"a": DAYS[0].date(), "b": DAYS[1].date()},
    )
    got = keyed(rows, ["day", "environment", "project", "currency"])
    assert answer and len(got) == len(answer)
    unallocated = Decimal(0)
    for a in answer:
        start = instant(a["periodStart"])
        assert start is not None
        v = got[(start.date(), a["environment"], a["project"], a["idleCost"]["currency"])]
        assert money(v["idle_cost"]) == a["idleCost"]["amount"]
        assert money(v["alloc_cost"]) == a["allocatedIdleCost"]["amount"]
        assert money(v["free_cost"]) == a["unallocatedIdleCost"]["amount"]
        for col, field in (
            ("idle_h", "idleGpuHours"),
            ("alloc_h", "allocatedIdleGpuHours"),
            ("free_h", "unallocatedIdleGpuHours"),
        ):
            assert close(v[col], a[field]), (col, a)
        unallocated += v["free_cost"]
    assert unallocated > 0  # the demo's unallocated pool is there


RECON = """query($w: TimeWindow!, $t: Float) { reconciliation(window: $w, tolerancePct: $t) {
  provider account resource day billedGpuHours meteredGpuHours gpuHoursVariance gpuHoursVariancePct
  billedCost { amount currency } ledgerCost { amount } costVariance { amount } costVariancePct
  billingLines status } }"""


def _recon(base: str, bi: Connection, tolerance: float | None) -> set[str]:
    variables: dict[str, Any] = {"w": window(*SEPTEMBER)}
    if tolerance is not None:
        variables["t"] = tolerance
        bi.exec_driver_sql(f"SET gpu_ledger.reconciliation_tolerance_pct = '{tolerance}'")
    answer = gql(base, RECON, variables)["reconciliation"]
    rows = view_rows(
        bi,
        "SELECT * FROM reporting.reconciliation_daily_v1 WHERE day >= :a AND day < :b",
        {"a": SEPTEMBER[0].date(), "b": SEPTEMBER[1].date()},
    )
    if tolerance is not None:
        bi.exec_driver_sql("RESET gpu_ledger.reconciliation_tolerance_pct")

    def of_view(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["provider"], r["account"], r["resource_id"], r["day"].isoformat(), r["currency"],
            round(float(r["billed_gpu_hours"]), 6), round(r["metered_gpu_hours"], 6),
            round(r["gpu_hours_variance"], 6),
            None if r["gpu_hours_variance_pct"] is None else round(r["gpu_hours_variance_pct"], 6),
            money(r["billed_cost"]), money(r["ledger_cost"]), money(r["cost_variance"]),
            None if r["cost_variance_pct"] is None else round(float(r["cost_variance_pct"]), 6),
            r["billing_lines"], r["status"],
        )  # fmt: skip

    def of_graphql(a: dict[str, Any]) -> tuple[Any, ...]:
        return (
            a["provider"], a["account"], a["resource"], a["day"], a["billedCost"]["currency"],
            a["billedGpuHours"], a["meteredGpuHours"], a["gpuHoursVariance"], a["gpuHoursVariancePct"],
            a["billedCost"]["amount"], a["ledgerCost"]["amount"], a["costVariance"]["amount"],
            a["costVariancePct"], a["billingLines"], a["status"],
        )  # fmt: skip

    want = sorted(map(of_graphql, answer), key=repr)
    assert sorted(map(of_view, rows), key=repr) == want
    return {a["status"] for a in answer}


def test_reconciliation_view_equals_reconciliation_with_every_status(base: str, bi: Connection) -> None:
    statuses = _recon(base, bi, None)
    assert statuses == {
        "MATCHED", "UNBILLED_USAGE", "UNMONITORED_SPEND", "NO_METRICS", "NO_BILLING",
        "UNKNOWN_INSTANCE_TYPE", "UNUSED_COMMITMENT", "ACCOUNT_ADJUSTMENT",
    }  # fmt: skip
    # The tolerance is a setting of the session (or of the login: ALTER ROLE … SET).
    assert "UNMONITORED_SPEND" not in _recon(base, bi, 50.0)


def test_reconciliation_view_prices_the_bill_with_the_gpu_cost_share(
    reporting_engine: Engine, bi: Connection
) -> None:
    for shared in serve(reporting_engine, gpu_cost_share=Decimal("0.85")):
        answer = gql(shared, RECON, {"w": window(*SEPTEMBER)})["reconciliation"]
    bi.exec_driver_sql("SET gpu_ledger.gpu_cost_share = '0.85'")
    try:
        rows = view_rows(
            bi, "SELECT resource_id, day, billed_cost, status FROM reporting.reconciliation_daily_v1"
        )
    finally:
        bi.exec_driver_sql("RESET gpu_ledger.gpu_cost_share")
    got = {(r["resource_id"], r["day"].isoformat()): (money(r["billed_cost"]), r["status"]) for r in rows}
    assert got == {(a["resource"], a["day"]): (a["billedCost"]["amount"], a["status"]) for a in answer}
    assert got[("i-match", "2025-09-03")][0] == "140.352000000"  # 165.12 x 0.85


def test_unmonitored_spend_view_equals_the_cost_of_unmonitored_devices(base: str, bi: Connection) -> None:
    rows = view_rows(bi, "SELECT * FROM reporting.unmonitored_spend_daily_v1 ORDER BY resource_id")
    assert rows and "i-gap" in {r["resource_id"] for r in rows}
    devices = [f"{r['resource_id']}/unmonitored" for r in rows]
    answer = gql(
        base,
        "query($w: TimeWindow!, $f: LedgerFilter) { cost(window: $w, groupBy: [DEVICE], filter: $f) "
        "{ device cost { amount currency } gpuHours } }",
        {"w": window(*SEPTEMBER), "f": {"device": devices}},
    )["cost"]
    assert {(a["device"], a["cost"]["amount"], a["cost"]["currency"]) for a in answer} == {
        (f"{r['resource_id']}/unmonitored", money(r["cost"]), r["currency"]) for r in rows
    }
    by_device = {a["device"]: a["gpuHours"] for a in answer}
    assert all(close(r["gpu_hours"], by_device[f"{r['resource_id']}/unmonitored"]) for r in rows)


def test_connector_and_device_views_equal_graphql(base: str, bi: Connection) -> None:
    answer = gql(
        base, "{ connectors { name type status watermark lastSuccessAt lastError lastRunFindings } }"
    )
    rows = view_rows(bi, "SELECT * FROM reporting.connector_health_v1 ORDER BY connector")
    assert [
        (r["connector"], r["connector_type"], r["status"], r["watermark"], r["last_success_at"],
         r["last_error"], r["last_run_findings"])
        for r in rows
    ] == [
        (c["name"], c["type"], c["status"], instant(c["watermark"]), instant(c["lastSuccessAt"]),
         c["lastError"], c["lastRunFindings"])
        for c in answer["connectors"]
    ]  # fmt: skip
    assert rows and rows[0]["healthy"] is True and rows[0]["last_run_ledger_rows"] > 0
    runs = view_rows(bi, "SELECT * FROM reporting.connector_runs_v1")
    assert runs and all(r["status"] == "OK" and r["duration_s"] >= 0 for r in runs)
    total = gql(base, "{ devices(first: 1) { totalCount } }")["devices"]["totalCount"]
    assert view_rows(bi, "SELECT count(*) AS n FROM reporting.devices_v1")[0]["n"] == total > 90


# --- version 2 (migration 0016): v1 plus vendor and owner_rule -------------------------------------

V2 = {
    "usage_cost_hourly_v2": ["vendor", "owner_rule"],
    "usage_cost_daily_v2": ["vendor", "owner_rule"],
    "device_usage_cost_hourly_v2": ["vendor", "owner_rule"],
    "device_usage_cost_daily_v2": ["vendor", "owner_rule"],
    "idle_waste_daily_v2": ["vendor", "owner_rule"],
    "devices_v2": ["vendor"],
}


def _columns(bi: Connection, view: str) -> list[str]:
    rows = view_rows(
        bi,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'reporting' "
        "AND table_name = :v ORDER BY ordinal_position",
        {"v": view},
    )
    return [r["column_name"] for r in rows]


@pytest.mark.parametrize("view", sorted(V2))
def test_a_v2_view_is_its_v1_with_the_new_columns_and_the_same_rows(bi: Connection, view: str) -> None:
    v1, v2 = view.replace("_v2", "_v1"), _columns(bi, view)
    # v1 untouched; v2 = v1's columns in v1's order with the new ones beside gpu_model / the workload
    assert [c for c in v2 if c not in V2[view]] == _columns(bi, v1)
    assert v2.index("vendor") == v2.index("gpu_model") + 1
    if "owner_rule" in v2:
        assert v2.index("owner_rule") > v2.index("namespace")
    common = ", ".join(_columns(bi, v1))
    diff = view_rows(
        bi,
        f"SELECT count(*) AS n FROM ((SELECT {common} FROM reporting.{view} EXCEPT ALL "
        f"SELECT {common} FROM reporting.{v1}) UNION ALL (SELECT {common} FROM reporting.{v1} "
        f"EXCEPT ALL SELECT {common} FROM reporting.{view})) AS d",
    )
    assert diff[0]["n"] == 0


def test_the_v2_group_views_equal_usage_and_cost_by_vendor_and_owner_rule(base: str, bi: Connection) -> None:
    assert (
        _usage_case(base, bi, "usage_cost_hourly_v2", "hour_start", "HOUR", ["vendor", "ownerRule"], CUT) > 0
    )
    total = _cost_case(
        base, bi, "usage_cost_daily_v2", "day", "DAY", ["vendor", "ownerRule", "project"], DAYS
    )
    assert total > 0
    _cost_case(base, bi, "device_usage_cost_hourly_v2", "hour_start", "HOUR", ["device", "ownerRule"], CUT)
    _usage_case(base, bi, "device_usage_cost_daily_v2", "day", "DAY", ["vendor", "node"], DAYS)
    seen = view_rows(bi, "SELECT DISTINCT vendor, owner_rule, unallocated FROM reporting.usage_cost_daily_v2")
    assert {r["vendor"] for r in seen} >= {"nvidia"}
    assert {r["owner_rule"] for r in seen if not r["unallocated"]} - {None}  # owners named by someone
    assert {r["owner_rule"] for r in seen if r["unallocated"]} <= {None}


def test_the_v2_device_inventory_names_each_devices_vendor(base: str, bi: Connection) -> None:
    answer = gql(base, "{ devices(first: 500) { edges { node { deviceId vendor } } } }")["devices"]["edges"]
    rows = view_rows(bi, "SELECT device_id, vendor FROM reporting.devices_v2")
    assert {(r["device_id"], r["vendor"]) for r in rows} == {
        (e["node"]["deviceId"], e["node"]["vendor"]) for e in answer
    }
