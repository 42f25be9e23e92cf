"""`alerts` and `alertHistory` by caller: a project- or team-scoped token sees the alerts of its
projects or teams only, never an account-wide one; `read` sees all; a caller without a token
nothing. Hostile arguments are answered with errors, never a 500."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import httpx
import pytest
from api.conftest import serve
from sqlalchemy import Engine

from service.auth.tokens import TokenStore
from service.models import AlertEvent, AlertState

T = dt.datetime(2026, 11, 2, 5, tzinfo=dt.UTC)
Put = Callable[[Iterable[Any]], None]
# (rule, kind, subject, project, team)
ALERTS = [
    ("zombie", "idle_workload", "nb-1", "alpha", "ml"),
    ("zombie", "idle_workload", "nb-2", "gamma", "web"),
    ("zombie", "idle_workload", "nb-3", None, "web"),
    ("silent", "connector_silent", "dc1", None, None),
    ("spend", "unmonitored_spend", "aws/111", None, None),
]
SEES = {
    "read": {"nb-1", "nb-2", "nb-3", "dc1", "aws/111"},
    "read:project:alpha": {"nb-1"},
    "read:team:web": {"nb-2", "nb-3"},
    "read:project:nobody": set(),
}


def _rows() -> list[Any]:
    rows: list[Any] = []
    for rule, kind, subject, project, team in ALERTS:
        common: dict[str, Any] = dict(rule=rule, kind=kind, subject_key=f"k/{subject}", subject=subject)
        common.update(project=project, team=team, value=Decimal(3), unit="h", threshold=Decimal(3))
        common["message"] = f"{subject} holds"
        rows.append(
            AlertState(**common, state="FIRING", since=T, first_fired_at=T, last_true_at=T, notified=True)
        )
        rows.append(AlertEvent(**common, state="FIRING", at=T, since=T, notify=True, deliveries="hook: SENT"))
    return rows


@pytest.fixture
def callers(engine: Engine, put: Put) -> Any:
    put(_rows())
    store = TokenStore(engine)
    secrets = {scope: store.create(f"s{i}", [scope])[0] for i, scope in enumerate(SEES)}
    for base in serve(engine, auth={}):
        yield base, secrets


def _post(base: str, secret: str | None, query: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    r = httpx.post(f"{base}/graphql", json={"query": query}, headers=headers, timeout=30)
    assert "Traceback" not in r.text and r.status_code < 500, r.text
    body: dict[str, Any] = r.json()
    return body


WINDOW = '{start: "2026-11-02T00:00:00Z", end: "2026-11-03T00:00:00Z"}'


def test_each_caller_sees_its_alerts(callers: Any) -> None:
    base, secrets = callers
    for scope, expected in SEES.items():
        got = _post(base, secrets[scope], "{ alerts { subject } }")["data"]["alerts"]
        assert {a["subject"] for a in got} == expected, scope
        history = _post(base, secrets[scope], f"{{ alertHistory(window: {WINDOW}) {{ subject }} }}")
        assert {a["subject"] for a in history["data"]["alertHistory"]} == expected, scope
        one = _post(base, secrets[scope], '{ alerts(rule: "silent") { subject } }')["data"]["alerts"]
        assert {a["subject"] for a in one} == expected & {"dc1"}, scope
    anonymous = httpx.post(f"{base}/graphql", json={"query": "{ alerts { subject } }"}, timeout=30)
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("{ alerts(first: -1) { rule } }", "INVALID_ARGUMENT"),
        ("{ alerts(first: 100000) { rule } }", "PAGE_SIZE_TOO_LARGE"),
        ('{ alerts(after: "' + "A" * 9000 + '") { rule } }', "INVALID_ARGUMENT"),
        ('{ alerts(state: FIRING, rule: "' + "x" * 5000 + '") { rule } }', None),
        (
            '{ alertHistory(window: {start: "2026-11-02T00:30:00Z", end: "2026-11-03T00:00:00Z"}) { rule } }',
            "WINDOW_NOT_ALIGNED",
        ),
        (
            '{ alertHistory(window: {start: "2020-01-01T00:00:00Z", end: "2026-11-03T00:00:00Z"}) { rule } }',
            "WINDOW_TOO_LARGE",
        ),
        (
            f'{{ alertHistory(window: {WINDOW}, after: "eyJ4IjoxfQ==") {{ rule }} }}',
            "INVALID_ARGUMENT",
        ),
    ],
)
def test_hostile_arguments(callers: Any, query: str, code: str | None) -> None:
    base, secrets = callers
    body = _post(base, secrets["read"], query)
    if code is None:
        assert body == {"data": {"alerts": []}}
    else:
        assert body["errors"][0]["extensions"]["code"] == code, body


def test_history_pages_newest_first(callers: Any) -> None:
    base, secrets = callers
    seen: list[str] = []
    after = ""
    while True:
        arg = f', after: "{after}"' if after else ""
        page = _post(
            base, secrets["read"], f"{{ alertHistory(window: {WINDOW}, first: 2{arg}) {{ subject cursor }} }}"
        )
        rows = page["data"]["alertHistory"]
        seen += [r["subject"] for r in rows]
        if len(rows) < 2:
            break
        after = rows[-1]["cursor"]
    assert seen == ["aws/111", "dc1", "nb-3", "nb-2", "nb-1"]
