"""The alert rules and channels of the config file.

::

    [[alert_channels]]
    name = "ops"
    type = "slack"                  # webhook (generic JSON) | slack ({"text", "blocks"}) | email
    url = "https://hooks.slack.com/services/…"   # secret: GPU_LEDGER_ALERT_CHANNELS__OPS__URL
    timeout_s = 10
    retries = 3                     # after the first attempt, with exponential backoff

    [[alert_channels]]
    name = "finops-mail"
    type = "email"                  # sent through the [smtp] table
    to = ["finops@example.com"]

    [[alerts]]
    name = "zombie-jobs"
    kind = "idle_workload"          # an allocated workload idle for `hours` hours
    hours = 6
    channels = ["ops", "finops-mail"]
    min_interval_h = 4              # no second announcement of the same alert within 4 h

    kind = "project_idle_cost"      # per_day = "500", currency = "USD": a project's idle cost, last 24 h
    kind = "budget_forecast"        # group = "project" | "team", budgets = { ml = "20000" }, currency
    kind = "unmonitored_spend"      # per_day = "100", currency, days = 3: billed, not metered
    kind = "connector_silent"       # hours = 6, connectors = [] (all): no success / stale watermark

Rule and channel names are unique; a rule names only configured channels; an e-mail channel
needs ``[smtp]``. Webhook URLs are secrets: no error message, log line or API answer shows them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, ValidationError, field_validator

from service.notify.email import MAX_RECIPIENTS

#: Longest look-back of a rule: a month of hours (bounds the SQL a rule can ask for).
MAX_HOURS = 24 * 31
#: Largest money threshold: what a Money column holds.
MAX_AMOUNT = Decimal("1e14")
CHANNEL_ENV_PREFIX = "GPU_LEDGER_ALERT_CHANNELS__"
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"

Amount = Annotated[Decimal, Field(gt=0, lt=MAX_AMOUNT, allow_inf_nan=False)]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code")]


class AlertConfigError(ValueError):
    """The ``[[alerts]]`` / ``[[alert_channels]]`` tables are wrong; the message names the table and key."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=NAME, description="unique; names the alert in history and metrics")
    channels: tuple[str, ...] = Field(default=(), max_length=20, description="[[alert_channels]] names")
    min_interval_h: float = Field(
        default=4, ge=0, le=MAX_HOURS, description="no second announcement of one alert sooner"
    )
    enabled: bool = True


class IdleWorkloadRule(_Rule):
    """A workload that held its GPUs idle (default metric: SM activity, else GPU utilization) in
    each of the last ``hours`` hours up to its connector's watermark: the "zombie job"."""

    kind: Literal["idle_workload"]
    hours: int = Field(ge=1, le=MAX_HOURS)


class ProjectIdleCostRule(_Rule):
    """A project's idle cost over the last 24 hours reached ``per_day`` (in ``currency``)."""

    kind: Literal["project_idle_cost"]
    per_day: Amount
    currency: Currency = "USD"


class BudgetForecastRule(_Rule):
    """A project's (or team's) month, projected at its month-to-date run rate, exceeds its budget."""

    kind: Literal["budget_forecast"]
    group: Literal["project", "team"] = "project"
    budgets: dict[str, Amount] = Field(min_length=1, max_length=1000)
    currency: Currency = "USD"


class UnmonitoredSpendRule(_Rule):
    """Billed GPU spend no metrics account for reached ``per_day`` on one of the last ``days``
    UTC days, per cloud account."""

    kind: Literal["unmonitored_spend"]
    per_day: Amount
    currency: Currency = "USD"
    days: int = Field(default=3, ge=1, le=31)


class ConnectorSilentRule(_Rule):
    """A connector without a successful run, or whose watermark is older, for ``hours`` hours."""

    kind: Literal["connector_silent"]
    hours: float = Field(gt=0, le=MAX_HOURS)
    connectors: tuple[str, ...] = Field(default=(), max_length=1000, description="empty: all")


AlertRule = Annotated[
    IdleWorkloadRule | ProjectIdleCostRule | BudgetForecastRule | UnmonitoredSpendRule | ConnectorSilentRule,
    Field(discriminator="kind"),
]
#: Longest a channel keeps trying one announcement: a week (a receiver down over a long weekend).
MAX_GIVE_UP_H = 168
#: Rule kinds whose alerts belong to no project: only callers with the `read` scope see them.
ACCOUNT_WIDE_KINDS = frozenset({"unmonitored_spend", "connector_silent"})


class _Channel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=NAME)
    give_up_after_h: float = Field(
        default=24,
        gt=0,
        le=MAX_GIVE_UP_H,
        description="how long an announcement this channel could not take is tried again (the outbox)",
    )


class WebhookChannel(_Channel):
    """POST of each announcement: ``webhook`` as the generic JSON document, ``slack`` as a Slack
    incoming-webhook message (``text`` and ``blocks``; Mattermost and Teams workflows take it too)."""

    type: Literal["webhook", "slack"]
    url: SecretStr = Field(description="http(s) URL; a secret (it usually carries a token)")
    timeout_s: float = Field(default=10, gt=0, le=60)
    retries: int = Field(default=3, ge=0, le=10)

    @field_validator("url")
    @classmethod
    def _url(cls, value: SecretStr) -> SecretStr:
        check_webhook_url(value.get_secret_value())
        return value


class EmailChannel(_Channel):
    """An e-mail per announcement to ``to``, through the ``[smtp]`` relay."""

    type: Literal["email"]
    to: tuple[str, ...] = Field(min_length=1, max_length=MAX_RECIPIENTS)

    @field_validator("to")
    @classmethod
    def _to(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            if any(c in address for c in "\r\n,;") or "@" not in address or len(address) > 320:
                raise ValueError(f"not a single e-mail address: {address[:80]!r}")
        return value


AlertChannel = Annotated[WebhookChannel | EmailChannel, Field(discriminator="type")]
_RULE = TypeAdapter(AlertRule)
_TAGS = frozenset({
    "idle_workload", "project_idle_cost", "budget_forecast", "unmonitored_spend", "connector_silent",
    "webhook", "slack", "email",
})  # fmt: skip
_CHANNEL = TypeAdapter(AlertChannel)


def check_webhook_url(url: str) -> None:
    """Refuse anything but an absolute http(s) URL with a host; the message never repeats the URL."""
    if len(url) > 2000:
        raise ValueError("URL longer than 2000 characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise ValueError("not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL, not {parts.scheme or 'a relative'!r} one")
    if not host:
        raise ValueError("URL has no host")
    if any(c.isspace() for c in url):
        raise ValueError("URL contains white space")


def _problems(exc: ValidationError) -> str:
    # Never echo inputs: a channel's url is a secret.
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = err["loc"]
        if len(loc) > 1 and loc[0] in _TAGS:  # the union's branch ("idle_workload.hours"): the table says it
            loc = loc[1:]
        key = ".".join(str(p) for p in loc)
        out.append(f'key "{key}": ' + ("unknown key" if err["type"] == "extra_forbidden" else err["msg"]))
    return "; ".join(out)


def _label(name: str, index: int, table: Mapping[str, Any]) -> str:
    ident = f' name="{table["name"]}"' if isinstance(table.get("name"), str) else ""
    return f"[[{name}]] #{index + 1}{ident}"


def _env_name(name: str) -> str:
    return re.sub(r"[-.]", "_", name).upper()


def _with_channel_env(tables: list[dict[str, Any]], env: Mapping[str, str]) -> list[dict[str, Any]]:
    """``GPU_LEDGER_ALERT_CHANNELS__<NAME>__<KEY>`` sets KEY of the channel NAME (its url, say)."""
    by_name = {_env_name(str(t.get("name", ""))): t for t in tables}
    for var, raw in env.items():
        if not var.upper().startswith(CHANNEL_ENV_PREFIX):
            continue
        name, sep, key = var[len(CHANNEL_ENV_PREFIX) :].partition("__")
        table = by_name.get(_env_name(name))
        if not sep or not key or table is None:
            raise AlertConfigError(
                f"{var}: no alert channel named {name!r} (expected {CHANNEL_ENV_PREFIX}<NAME>__<KEY>)"
            )
        table[key.lower()] = raw
    return tables


def parse_alert_tables(
    where: str, rules: Any, channels: Any, *, has_smtp: bool, env: Mapping[str, str] = {}
) -> tuple[list[AlertRule], list[AlertChannel]]:
    """Validate the ``[[alerts]]`` and ``[[alert_channels]]`` tables of the file ``where`` together."""
    for key, value in (("alerts", rules), ("alert_channels", channels)):
        if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
            raise AlertConfigError(f"{where}: {key!r} must be an array of tables ([[{key}]])")
    parsed_channels: list[AlertChannel] = []
    for i, table in enumerate(_with_channel_env([dict(t) for t in channels], env)):
        try:
            parsed_channels.append(_CHANNEL.validate_python(table))
        except ValidationError as exc:
            raise AlertConfigError(
                f"{where}: {_label('alert_channels', i, table)}: {_problems(exc)}"
            ) from None
    parsed_rules: list[AlertRule] = []
    for i, table in enumerate(rules):
        try:
            parsed_rules.append(_RULE.validate_python(table))
        except ValidationError as exc:
            raise AlertConfigError(f"{where}: {_label('alerts', i, table)}: {_problems(exc)}") from None
    check_references(where, parsed_rules, parsed_channels, has_smtp=has_smtp)
    return parsed_rules, parsed_channels


def check_references(
    where: str, rules: Sequence[AlertRule], channels: Sequence[AlertChannel], *, has_smtp: bool
) -> None:
    """Names unique, every rule's channels configured, e-mail only with ``[smtp]``."""
    channel_names = [c.name for c in channels]
    for kind, names in (("alert_channels", channel_names), ("alerts", [r.name for r in rules])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise AlertConfigError(f"{where}: [[{kind}]]: duplicate name(s) {', '.join(dupes)}")
    for rule in rules:
        missing = [c for c in rule.channels if c not in channel_names]
        if missing:
            known = ", ".join(channel_names) or "none configured"
            raise AlertConfigError(
                f'{where}: [[alerts]] name="{rule.name}": key "channels": unknown channel(s) '
                f"{', '.join(missing)}; configured: {known}"
            )
    if not has_smtp and any(isinstance(c, EmailChannel) for c in channels):
        raise AlertConfigError(f"{where}: [[alert_channels]] of type email need the [smtp] table")
