"""Each dashboard page in headless Chromium over the demo fleet: it loads with no console error and
nothing leaving 127.0.0.1 (the ``page`` fixture), shows the numbers this same server's GraphQL API
answers (read off the DOM: every cell carries its exact value in ``data-value`` and shows it
formatted), keeps its state in the URL, and is photographed into docs/screenshots/."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest
from browser.conftest import WINDOW, LiveServer
from browser.dashboard import (
    DAYS,
    hours,
    keys,
    money_value,
    open_view,
    pct,
    screenshot,
    sign_in,
    sum_money,
    texts,
    usd,
    values,
    wait_for,
)

BASE = f"start={DAYS['start']}&end={DAYS['end']}"
M = "{ amount currency }"


@pytest.fixture
def user(page: Any, live_server: LiveServer) -> Any:
    """A page whose tab holds the read token, as after the user pasted it; its clock stopped at
    the end of the demo's week plus six hours (last-seen ages in the screenshots stay put)."""
    sign_in(page, live_server)
    page.clock.set_fixed_time(dt.datetime(2025, 9, 4, 6, tzinfo=dt.UTC))
    return page


def ask(server: LiveServer, query: str, filter: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: A002
    return server.gql(f"query($w: TimeWindow!, $f: LedgerFilter) {{ {query} }}", {"w": WINDOW, "f": filter})


def label(value: str | None) -> str:
    return "(none)" if value is None else value


def url_params(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


# --- overview -------------------------------------------------------------------------------------


def check_overview(page: Any, server: LiveServer, flt: dict[str, Any] | None, top: int) -> None:
    data = ask(
        server,
        f"""cost(window: $w, filter: $f, groupBy: [ENVIRONMENT]) {{ environment cost {M} idleCost {M} }}
        usage(window: $w, filter: $f, groupBy: [ENVIRONMENT]) {{
          environment gpuHours effectiveGpuHours utilizationPct }}
        total: cost(window: $w, filter: $f) {{ cost {M} }}
        totalUsage: usage(window: $w, filter: $f) {{ gpuHours effectiveGpuHours }}
        effectiveCost(window: $w, filter: $f) {{
          environment gpuModel costPerEffectiveGpuHour {M} costPerGpuHour {M} }}
        idleWaste(window: $w, filter: $f, groupBy: [PROJECT]) {{ project idleCost {M} allocatedIdleCost {M}
          unallocatedIdleCost {M} idleGpuHours }}""",
        flt,
    )
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in data["cost"]:
        by_env[label(row["environment"])].append(row)
    shown_cost, shown_cost_text = values(page, "environments", "cost"), texts(page, "environments", "cost")
    assert set(shown_cost) == set(by_env) and by_env
    for env, rows in by_env.items():
        assert shown_cost[env] == money_value(sum_money(rows, "cost")), env
        assert shown_cost_text[env] == usd(sum_money(rows, "cost")["USD"]), env
        assert values(page, "environments", "idleCost")[env] == money_value(sum_money(rows, "idleCost"))
    for row in data["usage"]:
        env = label(row["environment"])
        assert float(values(page, "environments", "gpuHours")[env]) == row["gpuHours"]
        assert texts(page, "environments", "gpuHours")[env] == hours(row["gpuHours"])
        assert texts(page, "environments", "effectiveGpuHours")[env] == hours(row["effectiveGpuHours"])
        assert texts(page, "environments", "utilizationPct")[env] == pct(row["utilizationPct"])
    # totals
    total = sum_money(data["total"], "cost")
    assert page.get_attribute('[data-kpi="cost"] strong', "data-value") == money_value(total)
    assert page.inner_text('[data-kpi="cost"] strong') == usd(total["USD"])
    assert page.inner_text('[data-kpi="gpu-hours"] strong') == hours(data["totalUsage"][0]["gpuHours"])
    # cost per effective GPU-hour, environment × model
    per_effective = values(page, "effective-cost", "costPerEffectiveGpuHour")
    per_effective_text = texts(page, "effective-cost", "costPerEffectiveGpuHour")
    assert len(per_effective) == len(data["effectiveCost"])
    for row in data["effectiveCost"]:
        key = f"{label(row['environment'])}|{label(row['gpuModel'])}"
        money = row["costPerEffectiveGpuHour"]
        if money is None:  # no busy hour (bills of GPUs no metric saw): no such cost
            assert (per_effective[key], per_effective_text[key]) == ("", "—"), key
            continue
        assert per_effective[key] == f"{money['currency']} {money['amount']}", key
        assert per_effective_text[key] == usd(money["amount"]), key
    # idle cost by project: the top N by idle cost
    idle = sorted(data["idleWaste"], key=lambda r: (-Decimal(r["idleCost"]["amount"]), str(r["project"])))[
        :top
    ]
    assert keys(page, "idle") == [label(r["project"]) for r in idle]
    shown_idle = values(page, "idle", "idleCost")
    for row in idle:
        key = label(row["project"])
        assert shown_idle[key] == row["idleCost"]["amount"]
        assert values(page, "idle", "allocatedIdleCost")[key] == row["allocatedIdleCost"]["amount"]
        assert values(page, "idle", "unallocatedIdleCost")[key] == row["unallocatedIdleCost"]["amount"]
        assert texts(page, "idle", "idleGpuHours")[key] == hours(row["idleGpuHours"])


def check_trend(page: Any, server: LiveServer, granularity: str, flt: dict[str, Any] | None) -> None:
    data = ask(
        server,
        f"""cost(window: $w, filter: $f, granularity: {granularity}) {{ periodStart cost {M} }}
        usage(window: $w, filter: $f, granularity: {granularity}) {{ periodStart gpuHours }}""",
        flt,
    )
    periods = sorted({r["periodStart"] for r in data["cost"]})
    assert keys(page, "trend") == periods and periods
    shown = values(page, "trend", "cost")
    for period in periods:
        assert shown[period] == money_value(
            sum_money([r for r in data["cost"] if r["periodStart"] == period], "cost")
        )
    for row in data["usage"]:
        assert float(values(page, "trend", "gpuHours")[row["periodStart"]]) == row["gpuHours"]
    assert page.locator('[data-chart="trend"] canvas').count() == 1  # uPlot drew it


def test_overview(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=overview&{BASE}")
    check_overview(user, live_server, None, top=10)
    check_trend(user, live_server, "WEEK", None)
    screenshot(user, "overview")


def test_overview_state_round_trips_through_the_url(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=overview&{BASE}&environment=onprem&top=3&trend=day")
    assert user.input_value('select[name="environment"]') == "onprem"
    assert user.input_value('select[name="top"]') == "3"
    check_overview(user, live_server, {"environment": ["onprem"]}, top=3)
    check_trend(user, live_server, "DAY", {"environment": ["onprem"]})
    # A change made on the page lands in the URL …
    project = sorted(k for k in keys(user, "idle") if k != "(none)")[0]
    user.select_option('select[name="project"]', project)
    wait_for(user)
    params = url_params(user)
    assert params["project"] == [project] and params["environment"] == ["onprem"] and params["top"] == ["3"]
    flt = {"environment": ["onprem"], "project": [project]}
    check_overview(user, live_server, flt, top=3)
    # Back goes to the view before the change, forward to the one after.
    user.go_back()
    wait_for(user)
    assert "project" not in url_params(user)
    assert user.input_value('select[name="project"]') == ""
    user.go_forward()
    wait_for(user)
    assert user.input_value('select[name="project"]') == project
    # The same address, opened afresh (a shared link), shows the same view.
    shared = user.url
    user.goto("about:blank")
    user.goto(shared)
    wait_for(user)
    assert user.input_value('select[name="project"]') == project
    check_overview(user, live_server, flt, top=3)
    # Another page keeps the window and the filters (not the overview's own settings).
    user.click('#nav a[data-page="utilization"]')
    wait_for(user)
    params = url_params(user)
    assert params["page"] == ["utilization"] and params["project"] == [project] and "top" not in params
    assert user.input_value('select[name="environment"]') == "onprem"


# --- utilization ----------------------------------------------------------------------------------


def hour_of_week(rows: list[dict[str, Any]], zone: str) -> dict[tuple[int, int], float | None]:
    """Σ effective ÷ Σ observed GPU-hours × 100 per local weekday (Monday 0) and hour."""
    eff: dict[tuple[int, int], float] = defaultdict(float)
    obs: dict[tuple[int, int], float] = defaultdict(float)
    for row in rows:
        local = dt.datetime.fromisoformat(row["periodStart"]).astimezone(ZoneInfo(zone))
        key = (local.weekday(), local.hour)
        eff[key] += row["effectiveGpuHours"]
        obs[key] += 0 if row["coveragePct"] is None else row["gpuHours"] * row["coveragePct"] / 100
    return {
        (d, h): (100 * eff[(d, h)] / obs[(d, h)] if obs[(d, h)] > 0 else None)
        for d in range(7)
        for h in range(24)
    }


def test_utilization(user: Any, live_server: LiveServer) -> None:
    zone = "America/New_York"
    open_view(user, live_server, f"page=utilization&{BASE}&tz={zone}")
    assert user.input_value('input[name="tz"]') == zone
    data = ask(
        live_server,
        """hourly: usage(window: $w, filter: $f, granularity: HOUR) {
          periodStart gpuHours effectiveGpuHours coveragePct }
        sm: usage(window: $w, filter: $f, groupBy: [PROJECT], metric: SM_ACTIVE) {
          project utilizationPct gpuHours }
        util: usage(window: $w, filter: $f, groupBy: [PROJECT], metric: GPU_UTIL) {
          project utilizationPct }""",
    )
    expected = hour_of_week(data["hourly"], zone)
    heat_query = (
        f'heat: heatmap(window: $w, filter: $f, timeZone: "{zone}") ' + "{ weekday hour utilizationPct }"
    )
    heat = {(c["weekday"] - 1, c["hour"]): c["utilizationPct"] for c in ask(live_server, heat_query)["heat"]}
    cells = user.eval_on_selector_all(
        '[data-chart="heatmap"] .hm-cell',
        "(cells) => cells.map((c) => [+c.dataset.day, +c.dataset.hour, c.dataset.value, c.textContent])",
    )
    assert len(cells) == 7 * 24
    for day, hour, value, text in cells:
        want = expected[(day, hour)]
        if want is None:
            assert value == "" and text == "", (day, hour)
        else:
            # The page shows the API's heatmap exactly; want, folded here from the hourly rows
            # (gpuHours × coveragePct, each rounded to 6 decimals by the API), agrees to that rounding.
            assert float(value) == heat[(day, hour)], (day, hour)
            assert float(value) == pytest.approx(want, rel=1e-5), (day, hour)
            assert text == f"{Decimal(float(value)).quantize(Decimal('1'), 'ROUND_HALF_UP')}", (day, hour)
    # New York is behind UTC: the demo's weekday-afternoon bursts (UTC 14–23) land earlier there.
    assert expected != hour_of_week(data["hourly"], "UTC")
    sm = values(user, "projects", "smActivePct")
    util = values(user, "projects", "gpuUtilPct")
    assert keys(user, "projects") == [
        label(r["project"]) for r in sorted(data["sm"], key=lambda r: -r["gpuHours"])
    ]
    for row in data["sm"]:
        assert sm[label(row["project"])] == (
            "" if row["utilizationPct"] is None else one_js(row["utilizationPct"])
        )
    for row in data["util"]:
        assert util[label(row["project"])] == (
            "" if row["utilizationPct"] is None else one_js(row["utilizationPct"])
        )
        assert texts(user, "projects", "gpuUtilPct")[label(row["project"])] == pct(row["utilizationPct"])
    screenshot(user, "utilization")


def one_js(value: float) -> str:
    """How JavaScript's String() writes a double that Python's repr writes (they agree but for
    a trailing .0 and exponents, which these percentages never need)."""
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def test_an_unknown_time_zone_falls_back_to_utc(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=utilization&{BASE}&tz=Mars/Olympus_Mons")
    assert "not an IANA time zone" in user.inner_text("#content")
    assert "(UTC)" in user.inner_text("#content h2")


# --- reconciliation -------------------------------------------------------------------------------


def test_reconciliation(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=reconciliation&{BASE}")
    rows = live_server.gql(
        f"""query($w: TimeWindow!) {{ reconciliation(window: $w, groupBy: [PROVIDER, ACCOUNT, DAY]) {{
          provider account day billedGpuHours meteredGpuHours status billedCost {M} ledgerCost {M} }} }}""",
        {"w": WINDOW},
    )["reconciliation"]
    assert rows
    assert keys(user, "reconciliation") == [f"{r['provider']}|{r['account']}|{r['day']}" for r in rows]
    statuses = user.eval_on_selector_all(
        '[data-table="reconciliation"] tbody tr', "(rows) => rows.map((r) => r.dataset.status)"
    )
    assert statuses == [r["status"] for r in rows]
    metered = values(user, "reconciliation", "meteredGpuHours")
    ledger = values(user, "reconciliation", "ledgerCost")
    for r in rows:
        key = f"{r['provider']}|{r['account']}|{r['day']}"
        assert float(metered[key]) == r["meteredGpuHours"]
        assert ledger[key] == f"{r['ledgerCost']['currency']} {r['ledgerCost']['amount']}"
        assert float(values(user, "reconciliation", "billedGpuHours")[key]) == r["billedGpuHours"]
        assert values(user, "reconciliation", "billedCost")[key] == money_value(sum_money([r], "billedCost"))
    assert user.get_attribute('[data-kpi="ledger"] strong', "data-value") == money_value(
        sum_money(rows, "ledgerCost")
    )
    # The demo's bills (tests/browser/demo_bills.py) give every kind of row.
    assert {r["status"] for r in rows} == {
        "MATCHED",
        "UNMONITORED_SPEND",
        "UNBILLED_USAGE",
        "NO_METRICS",
        "NO_BILLING",
    }
    blind = [r for r in rows if r["status"] in ("UNMONITORED_SPEND", "NO_METRICS")]
    assert sum_money(blind, "billedCost")["USD"] > 0
    assert user.inner_text('[data-kpi="unmonitored"] strong') == usd(sum_money(blind, "billedCost")["USD"])
    assert user.get_attribute('[data-kpi="unmonitored"] strong', "data-value") == money_value(
        sum_money(blind, "billedCost")
    )
    screenshot(user, "reconciliation")
    # The status filter is in the URL.
    status = "UNMONITORED_SPEND"
    user.click(f'.chips button[data-status="{status}"]')
    wait_for(user)
    assert url_params(user)["status"] == [status]
    assert keys(user, "reconciliation") == [
        f"{r['provider']}|{r['account']}|{r['day']}" for r in rows if r["status"] == status
    ]


# --- devices --------------------------------------------------------------------------------------

DEVICES = """query($s: String, $a: String, $n: Int!) { devices(search: $s, first: $n, after: $a) {
  totalCount pageInfo { endCursor hasNextPage } edges { node { deviceId source lastSeen } } } }"""


def check_devices(page: Any, server: LiveServer, search: str | None, after: str | None) -> dict[str, Any]:
    answer = server.gql(DEVICES, {"s": search, "a": after, "n": 25})["devices"]
    nodes = [e["node"] for e in answer["edges"]]
    assert keys(page, "devices") == [n["deviceId"] for n in nodes]
    assert page.get_attribute('[data-metric="totalCount"]', "data-value") == str(answer["totalCount"])
    assert values(page, "devices", "source") == {n["deviceId"]: n["source"] for n in nodes}
    assert values(page, "devices", "lastSeen") == {n["deviceId"]: n["lastSeen"] for n in nodes}
    usage = server.gql(
        "query($w: TimeWindow!, $f: LedgerFilter) { usage(window: $w, filter: $f, groupBy: [DEVICE]) "
        "{ device coveragePct } }",
        {"w": WINDOW, "f": {"device": [n["deviceId"] for n in nodes]}},
    )["usage"]
    coverage = values(page, "devices", "coveragePct")
    assert {d: float(v) for d, v in coverage.items()} == {r["device"]: r["coveragePct"] for r in usage}
    return answer


def test_devices(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=devices&{BASE}")
    first = check_devices(user, live_server, None, None)
    assert first["pageInfo"]["hasNextPage"]
    screenshot(user, "devices")
    user.click('.pager button[name="next"]')
    wait_for(user)
    assert url_params(user)["after"] == [first["pageInfo"]["endCursor"]]
    check_devices(user, live_server, None, first["pageInfo"]["endCursor"])
    user.fill('input[name="q"]', "H200")
    user.click('form[role="search"] button[type="submit"]')
    wait_for(user)
    assert url_params(user)["q"] == ["H200"] and "after" not in url_params(user)
    found = check_devices(user, live_server, "H200", None)
    assert 0 < found["totalCount"] < first["totalCount"]
    user.reload()
    wait_for(user)
    assert user.input_value('input[name="q"]') == "H200"
    check_devices(user, live_server, "H200", None)


# --- connectors -----------------------------------------------------------------------------------


def test_connectors(user: Any, live_server: LiveServer) -> None:
    open_view(user, live_server, f"page=connectors&{BASE}")
    connectors = live_server.gql("{ connectors { name status watermark lastError } }")["connectors"]
    assert keys(user, "connectors") == [c["name"] for c in connectors] == ["aws-bills", "demo"]
    for field in ("status", "watermark", "lastError"):
        assert values(user, "connectors", field) == {c["name"]: c[field] or "" for c in connectors}
    assert [c["status"] for c in connectors] == ["OK", "OK"]
    assert connectors[1]["watermark"].startswith(WINDOW["end"][:10])
    screenshot(user, "connectors")
