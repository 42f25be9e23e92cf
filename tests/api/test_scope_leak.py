"""The cross-scope leak walk: every root field, every groupBy dimension and every idle policy, with a
project-scoped and a team-scoped API token sent as ``Authorization: Bearer`` to the real app.

Root fields, dimensions and idle policies are read from the schema by introspection: a new root
field fails :func:`test_every_root_field_is_walked` until it is walked here, and a new dimension or
policy is walked without a change. The ledger: four projects in two teams, each project with its
own device, node, cluster, account, region, user, namespace and workload (so a leaked row shows
by its values), and unallocated pool rows on devices of their own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from conftest import serve
from ledger_rows import at, row
from sqlalchemy import Engine

from service.auth.tokens import TokenStore
from service.models import BillingLine, ConnectorState, DataQualityFinding, Device, GpuRate

TEAMS = {"alpha": "ml", "beta": "ml", "gamma": "web", "delta": "web"}
COST = {"alpha": "3", "beta": "1", "gamma": "2", "delta": "5"}
W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
AGGREGATES = ("usage", "cost", "idleWaste", "effectiveCost")


def _facts(project: str) -> dict[str, Any]:
    team = TEAMS[project]
    cloud = team == "web"
    return {
        "environment": "aws" if cloud else "onprem",
        "provider": "aws" if cloud else "dc1",
        "account": f"acct-{project}",
        "region": f"r-{project}",
        "cluster": f"c-{project}",
        "node": f"node-{project}",
        "gpu_model": "H100" if cloud else "H200",
        "instance_type": f"it-{project}",
        "instance_id": f"i-{project}" if cloud else None,
        "project": project,
        "team": team,
        "user_name": f"u-{project}",
        "namespace": f"ns-{project}",
    }


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    rows: list[Any] = []
    for h in range(2):
        for p in TEAMS:
            rows.append(row(h, f"GPU-{p}", f"job-{p}", cost=COST[p], idle_cost="0.5", **_facts(p)))
        for env in ("onprem", "aws"):
            rows.append(
                row(h, f"GPU-free-{env}", environment=env, node=f"node-free-{env}", cost="1", idle_cost="1")
            )
    devices = [
        Device(device_id=d, source="test", environment="onprem", first_seen=at(0), last_seen=at(2))
        for d in [*(f"GPU-{p}" for p in TEAMS), "GPU-free-onprem", "GPU-free-aws", "GPU-never-held"]
    ]
    line = BillingLine(
        source="cur", source_file="cur.csv", line_no=1, line_key="1", provider="aws", account="acct-gamma",
        charge_start=at(0), charge_end=at(1), charge_category="Usage", resource_id="i-gamma",
        billed_cost=Decimal("9"), effective_cost=Decimal("9"), currency="USD",
    )  # fmt: skip
    rate = GpuRate(
        source_kind="rate_card", source_ref="card", precedence=20, environment="aws", valid_from=at(0),
        effective_per_gpu_hour=Decimal("2"), currency="USD",
    )  # fmt: skip
    state = ConnectorState(name="cur", type="aws_cur", status="OK")
    finding = DataQualityFinding(
        connector="cur", run_id=1, source_file="cur.csv", provider="aws", rule="negative_usage",
        column_name="UsageAmount", reason="negative", count=1, examples='[{"line": 2, "value": "-1"}]',
        period_start=at(0), period_end=at(2), recorded_at=at(2),
    )  # fmt: skip
    put([*rows, *devices, line, rate, state, finding])


class Caller:
    """One token's view of the running app over HTTP."""

    def __init__(self, base: str, secret: str) -> None:
        self.base, self.headers = base, {"Authorization": f"Bearer {secret}"}

    def post(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        r = httpx.post(
            f"{self.base}/graphql",
            json={"query": query, "variables": variables or {}},
            headers=self.headers,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert "Traceback" not in r.text
        body: dict[str, Any] = r.json()
        return body

    def data(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self.post(query, variables)
        assert "errors" not in body, body
        result: dict[str, Any] = body["data"]
        return result


@pytest.fixture
def callers(engine: Engine, ledger: None) -> Iterator[dict[str, Caller]]:
    store = TokenStore(engine)
    scopes = {"alpha": "read:project:alpha", "web": "read:team:web", "all": "read"}
    secrets = {name: store.create(f"leak-{name}", [scope])[0] for name, scope in scopes.items()}
    for base in serve(engine, auth={}):  # no anonymous access: every call carries a token
        yield {name: Caller(base, secret) for name, secret in secrets.items()}


def _schema(caller: Caller) -> tuple[list[str], list[str], list[str]]:
    """Root fields, Dimension values and IdlePolicy values, by introspection."""
    d = caller.data(
        """{ __schema { queryType { fields { name } } }
             dims: __type(name: "Dimension") { enumValues { name } }
             policies: __type(name: "IdlePolicy") { enumValues { name } } }"""
    )
    roots = [f["name"] for f in d["__schema"]["queryType"]["fields"]]
    return (
        roots,
        [v["name"] for v in d["dims"]["enumValues"]],
        [v["name"] for v in d["policies"]["enumValues"]],
    )


def _camel(dim: str) -> str:
    head, *rest = dim.lower().split("_")
    return head + "".join(p.title() for p in rest)


def _allowed(caller: str, project: str | None, team: str | None) -> bool:
    return {"alpha": project == "alpha", "web": team == "web", "all": True}[caller]


def _aggregates(
    caller: Caller, groupings: dict[str, list[str]], policies: list[str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every aggregate root field (cost once per idle policy) per grouping, in one request:
    ``{grouping: {field: rows}}`` (fields ``usage``, ``idleWaste``, ``effectiveCost``, ``cost_<POLICY>``)."""
    money = "{ amount currency }"
    parts = []
    for name, group_by in groupings.items():
        fields = " ".join(_camel(d) for d in dict.fromkeys([*group_by, "PROJECT", "TEAM"]))
        args = f"window: $w, groupBy: [{', '.join(group_by)}]"
        parts += [
            f"{name}__usage: usage({args}) {{ {fields} cursor gpuHours }}",
            f"{name}__idleWaste: idleWaste({args}) {{ {fields} cursor idleGpuHours idleCost {money} }}",
            f"{name}__effectiveCost: effectiveCost({args}) {{ {fields} cursor gpuHours cost {money} }}",
            *(
                f"{name}__cost_{p}: cost({args}, idlePolicy: {p}) "
                f"{{ {fields} cursor unallocated cost {money} }}"
                for p in policies
            ),
        ]
    data = caller.data(f"query($w: TimeWindow!) {{ {' '.join(parts)} }}", {"w": W})
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(dict)
    for alias, rows in data.items():
        name, _, field = alias.partition("__")
        out[name][field] = rows
    return out


def _totals(rows: list[dict[str, Any]], measure: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        value = r[measure]
        if isinstance(value, dict):
            out[value["currency"]] += Decimal(value["amount"])
        else:
            out["h"] += Decimal(repr(value))
    return dict(out)


MEASURE = {"usage": "gpuHours", "idleWaste": "idleCost", "effectiveCost": "cost", "cost": "cost"}


def _walk_aggregates(callers: dict[str, Caller], dims: list[str], policies: list[str]) -> None:
    for name in ("alpha", "web"):
        caller = callers[name]
        for pair in (dims[i : i + 2] for i in range(0, len(dims), 2)):  # 2 dimensions a request
            # Grouped with PROJECT and TEAM too, every row names whose it is; grouped by the
            # dimension alone, only values (and totals) of the scope's own rows may appear.
            groupings = {f"{d}_a": [d, "PROJECT", "TEAM"] for d in pair} | {d: [d] for d in pair}
            answers = _aggregates(caller, groupings, policies)
            for dim in pair:
                _check(name, dim, answers[f"{dim}_a"], answers[dim])


def _check(
    name: str, dim: str, attributed: dict[str, list[dict[str, Any]]], alone: dict[str, list[dict[str, Any]]]
) -> None:
    key = _camel(dim)
    for field, rows in attributed.items():
        assert rows, (name, dim, field)
        for r in rows:
            assert _allowed(name, r["project"], r["team"]), (name, dim, field, r)
            assert r.get("unallocated") in (None, False), (name, dim, field, r)
        assert {r[key] for r in alone[field]} <= {r[key] for r in rows}, (name, dim, field)
        measure = MEASURE[field.split("_")[0]]
        assert _totals(alone[field], measure) == _totals(rows, measure), (name, dim, field)


@pytest.mark.slow
def test_every_root_field_is_walked(callers: dict[str, Caller]) -> None:
    roots, dims, policies = _schema(callers["all"])
    walked = {*AGGREGATES, "devices", "reconciliation", "billingLines", "rates", "connectors", "dataQuality"}
    walked.add("heatmap")
    walked.add("breakEven")  # account-wide: FORBIDDEN below
    walked |= {"alerts", "alertHistory"}  # walked caller by caller in tests/alerts/test_alerts_scope.py
    walked |= {"forecast", "demandCapacity"}  # the scope's groups only; capacity FORBIDDEN below
    assert set(roots) == walked, f"walk the new root field(s) {set(roots) - walked} in this test"
    assert "PROJECT" in dims and "TEAM" in dims and len(policies) >= 3

    _walk_aggregates(callers, dims, policies)

    # The control: the same walk's unrestricted answer holds every project and the pool.
    everyone = _aggregates(callers["all"], {"p": ["PROJECT"]}, policies)["p"]
    assert {r["project"] for r in everyone["usage"]} == {None, *TEAMS}
    assert any(r["unallocated"] for r in everyone["cost_SEPARATE"])

    # heatmap: the scope's own hours and idle cost only (its usage and idleWaste totals).
    for name in ("alpha", "web"):
        d = callers[name].data(
            """query($w: TimeWindow!) { heatmap(window: $w, timeZone: "Europe/Berlin") {
            gpuHours idleCost { amount currency } } usage(window: $w) { gpuHours }
            idleWaste(window: $w) { idleCost { amount currency } } }""",
            {"w": W},
        )
        assert sum(c["gpuHours"] for c in d["heatmap"]) == d["usage"][0]["gpuHours"], name
        cells = [{"idleCost": m} for c in d["heatmap"] for m in c["idleCost"]]
        assert _totals(cells, "idleCost") == _totals(d["idleWaste"], "idleCost"), name

    # devices: only those the scope's projects held, on every page.
    def devices(caller: Caller) -> list[str]:
        ids: list[str] = []
        after = None
        while True:
            page = caller.data(
                "query($a: String){ devices(first: 2, after: $a) { totalCount edges { node { deviceId } } "
                "pageInfo { hasNextPage endCursor } } }",
                {"a": after},
            )["devices"]
            ids += [e["node"]["deviceId"] for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                assert page["totalCount"] == len(ids)
                return ids
            after = page["pageInfo"]["endCursor"]

    assert devices(callers["alpha"]) == ["GPU-alpha"]
    assert devices(callers["web"]) == ["GPU-delta", "GPU-gamma"]
    assert len(devices(callers["all"])) == 7

    # Account-wide fields: FORBIDDEN for a scoped caller, with no data; answered for `read`.
    account_wide = {
        "reconciliation": "reconciliation(window: $w) { account billingLines }",
        "billingLines": "billingLines(first: 5) { totalCount edges { node { account } } }",
        "rates": "rates(window: $w) { environment }",
        "connectors": "connectors { name }",
        "dataQuality": "dataQuality(window: $w) { rule rows examples { file } }",
    }
    for field, selection in account_wide.items():
        windowed = "$w" in selection
        query = f"query($w: TimeWindow!) {{ {selection} }}" if windowed else f"{{ {selection} }}"
        variables = {"w": W} if windowed else {}
        for name in ("alpha", "web"):
            body = callers[name].post(query, variables)
            assert body["data"] is None, (field, body)
            [error] = body["errors"]
            assert error["extensions"]["code"] == "FORBIDDEN", (field, error)
            assert error["message"] == f"{field} is account-wide data: it needs the `read` scope"
        assert callers["all"].data(query, variables)[field]
    # breakEven prices with the sites' TCO and the account's bills: account-wide, FORBIDDEN alike
    # (no [[sites]] here, so the `read` caller's answer is empty).
    query = "query($w: TimeWindow!) { breakEven(window: $w) { site } }"
    for name in ("alpha", "web"):
        body = callers[name].post(query, {"w": W})
        assert body["data"] is None and body["errors"][0]["extensions"]["code"] == "FORBIDDEN", body
    assert callers["all"].data(query, {"w": W}) == {"breakEven": []}
    # forecast: the scope's own groups only (a week of history: it fits whole days);
    # demandCapacity counts every project's GPUs as installed: account-wide, FORBIDDEN.
    week = {"start": at(0).isoformat(), "end": at(24 * 7).isoformat()}
    query = """query($w: TimeWindow!) { forecast(window: $w, horizonDays: 2, groupBy: [PROJECT, TEAM]) {
        groups { project team gpuHours { total } cost { total { amount currency } } } } }"""
    for name in ("alpha", "web"):
        groups = callers[name].data(query, {"w": week})["forecast"]["groups"]
        assert groups and all(_allowed(name, g["project"], g["team"]) for g in groups), (name, groups)
    query = "query($w: TimeWindow!) { demandCapacity(window: $w) { environment saturatedHours } }"
    for name in ("alpha", "web"):
        body = callers[name].post(query, {"w": W})
        assert body["data"] is None and body["errors"][0]["extensions"]["code"] == "FORBIDDEN", body
    assert callers["all"].data(query, {"w": W})["demandCapacity"]


def test_a_project_token_costs_only_its_project(callers: dict[str, Caller]) -> None:
    query = """query($w: TimeWindow!){ cost(window: $w, groupBy: [PROJECT]) {
        project unallocated cost { amount currency } } }"""
    assert callers["alpha"].data(query, {"w": W})["cost"] == [
        {"project": "alpha", "unallocated": False, "cost": {"amount": "6.000000000", "currency": "USD"}}
    ]
    assert len(callers["all"].data(query, {"w": W})["cost"]) == 5  # the pool and four projects
    # Asking for another project by filter, or for the pool, finds nothing either.
    for flt in ({"project": ["beta"]}, {"team": ["web"]}, {"unallocated": True}):
        for policy in ("SEPARATE", "SHARE_BY_USAGE", "SHARE_EVENLY"):
            asked = query.replace(
                "groupBy: [PROJECT]", f"groupBy: [PROJECT], filter: $f, idlePolicy: {policy}"
            )
            asked = asked.replace("query($w: TimeWindow!)", "query($w: TimeWindow!, $f: LedgerFilter)")
            assert callers["alpha"].data(asked, {"w": W, "f": flt})["cost"] == [], (flt, policy)
