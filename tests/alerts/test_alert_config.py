"""The [[alerts]] and [[alert_channels]] tables through load_settings: good ones load, hostile or
mistaken ones are ConfigErrors naming the table and key — and never repeating a webhook URL."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from service.alerts.rules import BudgetForecastRule, IdleWorkloadRule, WebhookChannel
from service.settings import ConfigError, load_settings

SECRET_PATH = "/services/T1/B2/very-secret-token"

GOOD = f"""
[smtp]
host = "smtp.example.com"
from_addr = "ledger@example.com"

[[alert_channels]]
name = "ops"
type = "slack"
url = "https://hooks.example.com{SECRET_PATH}"

[[alert_channels]]
name = "mail"
type = "email"
to = ["finops@example.com"]

[[alerts]]
name = "zombie"
kind = "idle_workload"
hours = 6
channels = ["ops", "mail"]

[[alerts]]
name = "budget"
kind = "budget_forecast"
group = "team"
budgets = {{ research = "20000.50" }}
currency = "EUR"
"""


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "c.toml"
    path.write_text(textwrap.dedent(text))
    return load_settings(path)


def test_good_tables_load(tmp_path: Path) -> None:
    settings = _load(tmp_path, GOOD)
    zombie, budget = settings.alerts  # type: ignore[attr-defined]
    assert isinstance(zombie, IdleWorkloadRule) and zombie.hours == 6 and zombie.min_interval_h == 4
    assert zombie.channels == ("ops", "mail")
    assert isinstance(budget, BudgetForecastRule)
    assert budget.budgets == {"research": Decimal("20000.50")} and budget.currency == "EUR"
    ops = settings.alert_channels[0]  # type: ignore[attr-defined]
    assert isinstance(ops, WebhookChannel) and ops.timeout_s == 10 and ops.retries == 3
    assert ops.give_up_after_h == 24
    assert SECRET_PATH not in repr(settings) and "very-secret" not in str(settings)


def test_channel_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_ALERT_CHANNELS__OPS__URL", "https://other.example.com/hook/t0ken")
    settings = _load(tmp_path, GOOD)
    ops = settings.alert_channels[0]  # type: ignore[attr-defined]
    assert ops.url.get_secret_value() == "https://other.example.com/hook/t0ken"


def _channel(url: str) -> str:
    return f"""
    [[alert_channels]]
    name = "ops"
    type = "webhook"
    url = "{url}"
    """


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            _channel("file:///etc/passwd"),
            r'key "url": Value error, must be an http:// or https:// URL, not .file. one',
        ),
        (_channel("ftp://hooks.example.com/x"), r"not 'ftp' one"),
        (_channel("gopher://hooks.example.com/x"), r"not 'gopher' one"),
        (_channel("/relative/path"), r"not a relative one|not 'a relative' one"),
        (_channel("https:///no-host"), "URL has no host"),
        (_channel("http://hooks.example.com:99999/x"), "not a valid URL"),
        (_channel("https://h.example.com/" + "a" * 2100), "longer than 2000"),
        (
            '[[alert_channels]]\nname = "ops"\ntype = "webhook"\nurl = "https://h.example.com/x"\n'
            "timeout_s = 3600\n",
            r'key "timeout_s"',
        ),
        (
            '[[alert_channels]]\nname = "ops"\ntype = "webhook"\nurl = "https://h.example.com/x"\n'
            "give_up_after_h = 0\n",
            r'key "give_up_after_h": Input should be greater than 0',
        ),
        (
            '[[alert_channels]]\nname = "m"\ntype = "email"\nto = ["a@example.com"]\ngive_up_after_h = 169\n'
            '[smtp]\nhost = "127.0.0.1"\nfrom_addr = "a@example.com"\n',
            r'key "give_up_after_h": Input should be less than or equal to 168',
        ),
        (
            '[[alert_channels]]\nname = "ops"\ntype = "webhook"\nurl = "https://h.example.com/x"\n'
            "give_up_after_h = nan\n",
            r'key "give_up_after_h": Input should be a finite number',
        ),
        (
            '[[alerts]]\nname = "z"\nkind = "connector_silent"\nhours = inf\n',
            r'key "hours": Input should be a finite number',
        ),
        ('[[alert_channels]]\nname = "ops"\ntype = "pager"\n', r"does not match any of the expected tags"),
        (
            '[[alert_channels]]\nname = "m"\ntype = "email"\nto = ["a@example.com"]\n',
            r"need the \[smtp\] table",
        ),
        (
            '[[alert_channels]]\nname = "m"\ntype = "email"\nto = ["a@x.com\\nBcc: b@y.com"]\n',
            "single e-mail",
        ),
        (
            '[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 100000\n',
            r'\[\[alerts\]\] #1 name="z": key "hours"',
        ),
        ('[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 0\n', "greater than or equal to 1"),
        (
            '[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 3\nchannels = ["nope"]\n',
            r"unknown channel\(s\) nope; configured: none",
        ),
        ('[[alerts]]\nname = "z"\nkind = "zombie"\n', "does not match any of the expected tags"),
        ('[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 3\nfoo = 1\n', r'key "foo": unknown key'),
        ('[[alerts]]\nname = "z"\nkind = "project_idle_cost"\nper_day = "-5"\n', "greater than 0"),
        ('[[alerts]]\nname = "z"\nkind = "project_idle_cost"\nper_day = "NaN"\n', r"per_day"),
        ('[[alerts]]\nname = "z"\nkind = "project_idle_cost"\nper_day = "1e30"\n', "less than"),
        ('[[alerts]]\nname = "z"\nkind = "project_idle_cost"\nper_day = "5"\ncurrency = "usd"\n', "currency"),
        ('[[alerts]]\nname = "z"\nkind = "budget_forecast"\nbudgets = {}\n', "budgets"),
        ('[[alerts]]\nname = "z"\nkind = "connector_silent"\nhours = 1e9\n', "less than or equal"),
        (
            '[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 3\nmin_interval_h = -1\n',
            "min_interval_h",
        ),
        ('[[alerts]]\nname = "../x"\nkind = "idle_workload"\nhours = 3\n', r'key "name"'),
        (
            '[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 3\n'
            '[[alerts]]\nname = "z"\nkind = "idle_workload"\nhours = 4\n',
            "duplicate name",
        ),
        ("alerts = 3\n", r"'alerts' must be an array of tables"),
    ],
)
def test_hostile_tables_are_config_errors(tmp_path: Path, text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        _load(tmp_path, text)
    assert "/etc/passwd" not in str(info.value) and "hooks.example.com" not in str(info.value)


def test_unknown_channel_in_env_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_ALERT_CHANNELS__NOPE__URL", "https://x.example.com/")
    with pytest.raises(ConfigError, match="no alert channel named 'NOPE'"):
        _load(tmp_path, GOOD)
