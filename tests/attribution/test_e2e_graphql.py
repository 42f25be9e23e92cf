"""Issue 16's "done when" for attribution, end to end: a batch with facts ingested through the real
ingest path under the configured rules, ``cost(groupBy: [PROJECT, OWNER_RULE])`` over GraphQL from
the real app, a rule changed in the config, ``gpu-ledger reattribute`` run from the CLI — the cost
moves between projects, the total stays, and the app (whose answer cache is on) answers anew."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from attribution_fleet import DAY0, HOURS, Fleet, price
from sqlalchemy import Engine
from starlette.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app as cli
from service.ledger.ingest import ingest_window
from service.settings import load_settings

END = DAY0 + dt.timedelta(hours=HOURS)
RULES = """
[[attribution]]
name = "project-from-team-label"
source = "k8s.namespace_label:team"
dimension = "project"
match = "(?i)ml-(.*)"
value = "$1"
values = {{ research = "Research" }}

[[attribution]]
name = "cc-project"
source = "docker.label:cost-center"
dimension = "project"
override = {override}
"""
QUERY = """query($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT, OWNER_RULE]) {
  project ownerRule unallocated cost { amount currency } } }"""


def _config(tmp_path: Path, engine: Engine, override: bool) -> Path:
    path = tmp_path / "ledger.toml"
    url = engine.url.render_as_string(hide_password=False)
    path.write_text(
        f'database_url = "{url}"\n[auth]\nanonymous_read = true\n'
        + RULES.format(override=str(override).lower())
    )
    return path


def _cost(client: TestClient) -> list[tuple[Any, ...]]:
    window = {"start": DAY0.isoformat(), "end": END.isoformat()}
    body = client.post("/graphql", json={"query": QUERY, "variables": {"w": window}}).json()
    assert "errors" not in body, body
    return [
        (r["project"], r["ownerRule"], r["unallocated"], r["cost"]["amount"]) for r in body["data"]["cost"]
    ]


def test_change_a_rule_and_reattribute_moves_cost_keeping_the_total(engine: Engine, tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path, engine, override=False))
    price(engine)
    ingest_window(engine, "fleet", Fleet(), DAY0, END, attribution_rules=settings.attribution)
    with TestClient(create_app(settings, engine)) as client:
        first = _cost(client)
        assert first == [
            (None, None, True, "2.000000000"),  # GPU-a's idle hour: nobody's
            ("Research", "project-from-team-label", False, "2.000000000"),
            ("atlas", "source", False, "4.000000000"),  # the source named it; the rule does not override
        ]
        # the cost-center rule now overrides what the source named: first a dry run changes nothing
        config = _config(tmp_path, engine, override=True)
        window = ["--start", DAY0.isoformat(), "--end", END.isoformat(), "--config", str(config)]
        dry = CliRunner().invoke(cli, ["reattribute", *window, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert (
            "1 of 2 owners would be changed, 2 hourly rows would be rewritten, 1 days would be" in dry.stdout
        )
        assert _cost(client) == first
        result = CliRunner().invoke(
            cli,
            ["reattribute", "--start", DAY0.isoformat(), "--end", END.isoformat(), "--config", str(config)],
        )
        assert result.exit_code == 0, result.output
        assert "1 of 2 owners changed, 2 hourly rows rewritten, 1 days rebuilt" in result.stdout
        second = _cost(client)
        assert second == [
            (None, None, True, "2.000000000"),
            ("Research", "project-from-team-label", False, "2.000000000"),
            ("cc-7", "cc-project", False, "4.000000000"),
        ]
        assert sum(Decimal(r[3]) for r in second) == sum(Decimal(r[3]) for r in first) == Decimal(8)
        # filtering by the recorded rule
        q = QUERY.replace(
            "groupBy: [PROJECT, OWNER_RULE]", 'groupBy: [PROJECT], filter: {ownerRule: ["cc-project"]}'
        )
        window = {"start": DAY0.isoformat(), "end": END.isoformat()}
        body = client.post("/graphql", json={"query": q, "variables": {"w": window}}).json()
        assert [(r["project"], r["cost"]["amount"]) for r in body["data"]["cost"]] == [
            ("cc-7", "4.000000000")
        ]
        # run again: nothing changes
        again = CliRunner().invoke(
            cli,
            ["reattribute", "--start", DAY0.isoformat(), "--end", END.isoformat(), "--config", str(config)],
        )
        assert again.exit_code == 0 and "0 of 2 owners changed, 0 hourly rows" in again.stdout
        assert _cost(client) == second


def test_reattribute_cli_refuses_bad_arguments_without_a_traceback(engine: Engine, tmp_path: Path) -> None:
    good = _config(tmp_path, engine, override=False)
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace('match = "(?i)ml-(.*)"', 'match = "(?i)ml-(.*"'))
    cases = [
        (["--start", "yesterday", "--end", END.isoformat(), "--config", str(good)], "--start"),
        (["--start", END.isoformat(), "--end", DAY0.isoformat(), "--config", str(good)],
         "must be after --start"),
        (["--start", DAY0.isoformat(), "--end", END.isoformat(), "--config", str(bad)],
         '[[attribution]] #1 name="project-from-team-label": key "match": Value error, not a valid regex'),
    ]  # fmt: skip
    for args, message in cases:
        result = CliRunner().invoke(cli, ["reattribute", *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output, result.output
