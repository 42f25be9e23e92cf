"""Settings: environment (``GPU_LEDGER_*``) over the TOML config file over defaults.

The config file (``--config PATH`` or ``GPU_LEDGER_CONFIG``)::

    database_url = "postgresql+psycopg://ledger:secret@db/ledger"   # default sqlite:///gpu-ledger.db
    max_window_days = 400          # largest query window
    page_size_max = 500            # Relay page-size cap
    aggregate_page_size_max = 50000  # `first` cap of usage, cost, idleWaste, effectiveCost pages
    max_result_rows = 10000        # rows of an aggregate answer without `first` (RESULT_TOO_LARGE)
    export_max_rows = 5000000      # rows of a GET /export/… answer (413 RESULT_TOO_LARGE)
    idle_threshold_pct = 5.0       # idle = default utilization metric strictly below this
    gpu_cost_share = "1"           # part of a cloud instance's bill charged to its GPUs
    price_catalog_path = "prices.csv"  # breakEven's on-demand price catalog (default: the bundled one)
    log_level = "INFO"
    log_format = "console"         # or "json"

    [limits]                       # service.limits.Limits: body size, depth, aliases, tokens,
    max_body_b = 1048576           # time, concurrency and rate limits (GPU_LEDGER_LIMITS__<KEY>)

    [auth]                         # service.auth.config.AuthSettings (GPU_LEDGER_AUTH__<KEY>)
    anonymous_read = false         # true: callers without a token read everything (and /metrics)
    oidc_issuer = "https://idp.example.com"  # SSO: accept its JWTs (then oidc_audience and
    oidc_audience = "gpu-ledger"   #   oidc_jwks_url are needed too); oidc_algorithms (RS256,
    oidc_jwks_url = "https://idp.example.com/jwks"  # ES256), oidc_scope_claim ("groups"),
    oidc_group_scopes = { "finops" = ["read"], "team-ml" = ["read:team:ml"] }  # claim → scopes

    [smtp]                         # service.notify.email.SmtpSettings: e-mail relay (host, port,
    host = "smtp.example.com"      #   starttls, username, password, from_addr, timeout_s, ca_file)
    from_addr = "gpu-ledger@example.com"

    [[alerts]]                     # service.alerts.rules: alert rules (docs/alerts.md) and the
    [[alert_channels]]             #   webhooks / e-mail they notify

    [[connectors]]                 # one table per connector instance
    name = "dc1"                   # unique; names the ledger source and the watermark
    type = "prometheus"            # an entry point in gpu_ledger.connectors
    url = "http://127.0.0.1:9090"  # …and that type's own keys (its config_model)

    [[sites]]        # service.pricing.tco.SiteConfig
    [[rate_cards]]   # service.pricing.rates.RateCardConfig
    [[fx_rates]]     # service.pricing.fx.FxRateConfig
    [[reports]]      # service.reports.config.ReportSchedule: a report e-mailed once per month or week
    [[rent_options]]  # service.pricing.break_even.RentOptionConfig: 1y/3y/spot/on-demand rent prices
    [[attribution]]  # service.attribution.rules.AttributionRule: who owns a row, from source facts
    [[instance_types]]  # service.billing.catalog.InstanceTypeConfig: GPUs per instance type
    instance_type = "p5.48xlarge"  # adds to (or replaces an entry of) the bundled catalog
    gpu_model = "NVIDIA H100 80GB"
    gpu_count = 8
    gpu_memory_gib = 80            # optional, memory of one GPU
    provider = "aws"               # optional

Environment variables win over the file for scalars (``GPU_LEDGER_DATABASE_URL``,
``GPU_LEDGER_LOG_LEVEL``…) and for connector keys: ``GPU_LEDGER_CONNECTORS__<NAME>__<KEY>=value``
sets ``KEY`` of the connector named ``NAME`` (case-insensitive, ``-`` in names written ``_``;
values starting with ``[`` or ``{`` are JSON). Unknown keys and types are errors naming the file,
the table and the key; a ``GPU_LEDGER_*`` variable that names no setting at all (a misspelling)
is ignored with a warning naming the closest setting (:func:`unknown_env_warnings`). Secrets
(``SecretStr`` connector keys, the database password) are masked in repr and logs.

Why not pydantic-settings' TOML source: the file path is chosen at run time, and the array tables
need per-type validation with messages that point into the file; scalars still come from
pydantic-settings (env parsing, types, defaults).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import tomllib
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from connectors.base import ConnectorConfig
from connectors.registry import (
    ConnectorConfigError,
    Registry,
    default_registry,
    validate_config,
    validation_problems,
)
from service.alerts.rules import AlertChannel, AlertConfigError, AlertRule, parse_alert_tables
from service.api.answer_cache_settings import AnswerCacheSettings
from service.attribution.rules import AttributionConfigError, AttributionRule, check_rules
from service.auth.config import AuthSettings
from service.billing.catalog import InstanceCatalog, InstanceTypeConfig, load_catalog
from service.limits import Limits
from service.notify.email import SmtpSettings
from service.pricing.break_even import Planning, RentOptionConfig, listed_prices
from service.pricing.fx import FxRateConfig
from service.pricing.price_catalog import load_price_catalog
from service.pricing.rates import RateCardConfig
from service.pricing.tco import SiteConfig
from service.reports.config import ReportSchedule
from service.urls import mask_url

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from service.api.context import ApiSettings
    from service.billing.rates import RepriceResult

ENV_PREFIX = "GPU_LEDGER_"
T = TypeVar("T", bound=BaseModel)
CONFIG_ENV = "GPU_LEDGER_CONFIG"
CONNECTOR_ENV_PREFIX = "GPU_LEDGER_CONNECTORS__"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ConfigError(ValueError):
    """The configuration is wrong; the message names the file (or variable), the table and the key."""


#: Array tables besides ``[[connectors]]`` and the model each entry is validated with.
TABLE_MODELS: dict[str, type[BaseModel]] = {
    "sites": SiteConfig,
    "rate_cards": RateCardConfig,
    "fx_rates": FxRateConfig,
    "instance_types": InstanceTypeConfig,
    "reports": ReportSchedule,
    "rent_options": RentOptionConfig,
    "attribution": AttributionRule,
}


class Settings(BaseSettings):
    """Everything configurable. Build it with :func:`load_settings` (env + file)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    database_url: str = Field(default="sqlite:///gpu-ledger.db", repr=False)
    max_window_days: int = Field(default=400, gt=0)
    page_size_max: int = Field(default=500, gt=0)
    aggregate_page_size_max: int = Field(default=50000, gt=0)
    max_result_rows: int = Field(default=10000, gt=0)
    # Rows of one GET /export/… answer (service.api.export); the CLI's export has no cap.
    export_max_rows: int = Field(default=5_000_000, gt=0)
    idle_threshold_pct: float = Field(default=5.0, ge=0, le=100)
    # What part of a cloud instance's bill is charged to its GPUs (docs/design.md §4): 1 = all of it.
    gpu_cost_share: Decimal = Field(default=Decimal(1), gt=0, le=1)
    log_level: str = "INFO"
    log_format: Literal["console", "json"] = "console"
    # The [limits] table (service.limits.Limits); GPU_LEDGER_LIMITS__<KEY> overrides one key.
    limits: Limits = Field(default_factory=Limits)
    # The [auth] table (service.auth.config.AuthSettings); GPU_LEDGER_AUTH__<KEY> overrides one key.
    auth: AuthSettings = Field(default_factory=AuthSettings)
    # The [answer_cache] table (service.api.answer_cache); GPU_LEDGER_ANSWER_CACHE__<KEY> overrides one key.
    answer_cache: AnswerCacheSettings = Field(default_factory=AnswerCacheSettings)
    # The [smtp] table (service.notify.email); GPU_LEDGER_SMTP__<KEY> overrides one key (e.g. PASSWORD).
    smtp: SmtpSettings | None = None
    # [[alerts]] rules and the [[alert_channels]] they notify (service.alerts.rules).
    alerts: list[AlertRule] = Field(default_factory=list)
    alert_channels: list[AlertChannel] = Field(default_factory=list, repr=False)
    # Array tables: validated per type by load_settings; given here, never read from env as JSON.
    connectors: list[ConnectorConfig] = Field(default_factory=list)
    sites: list[SiteConfig] = Field(default_factory=list)
    rate_cards: list[RateCardConfig] = Field(default_factory=list)
    fx_rates: list[FxRateConfig] = Field(default_factory=list)
    instance_types: list[InstanceTypeConfig] = Field(default_factory=list)
    # [[reports]]: reports e-mailed once per closed period (service/reports/config.py).
    reports: list[ReportSchedule] = Field(default_factory=list)
    rent_options: list[RentOptionConfig] = Field(default_factory=list)
    # [[attribution]]: rules naming a ledger row's owner from source facts (docs/attribution.md).
    attribution: list[AttributionRule] = Field(default_factory=list)
    # breakEven's public on-demand price catalog (service/pricing/price_catalog.py); None = bundled.
    price_catalog_path: Path | None = None
    config_path: Path | None = Field(default=None, description="the TOML file these came from")

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.upper()

    @field_validator("connectors", mode="before")
    @classmethod
    def _connectors(cls, value: Any) -> Any:
        return [c if isinstance(c, ConnectorConfig) else validate_config(c) for c in value or []]

    def __repr_args__(self) -> Any:
        yield "database_url", mask_url(self.database_url)
        yield from super().__repr_args__()

    @property
    def database_url_masked(self) -> str:
        return mask_url(self.database_url)

    def connector(self, name: str) -> ConnectorConfig:
        """The configured connector ``name``; ``KeyError`` lists the configured names."""
        for config in self.connectors:
            if config.name == name:
                return config
        names = ", ".join(c.name for c in self.connectors) or "none configured"
        raise KeyError(f'no connector named "{name}"; configured: {names}')

    def instance_catalog(self) -> InstanceCatalog:
        """The bundled GPU instance catalog with this config's ``[[instance_types]]`` applied."""
        return load_catalog(self.instance_types)

    def planning(self) -> Planning:
        """What breakEven needs: the sites, the price catalog and the configured rent options."""
        catalog = load_price_catalog(self.price_catalog_path)
        prices = listed_prices(catalog, self.instance_catalog(), self.rent_options)
        return Planning(tuple(self.sites), tuple(prices), catalog.label)

    def reprice_from_bills(self) -> Callable[[Engine, dt.datetime, dt.datetime], RepriceResult | None]:
        """The hook a metrics ingest runs afterwards: re-price from the bills that cover its window."""
        # Imported here: billing.rates pulls in the pricing engine, which a settings load never needs.
        from service.billing.rates import reprice_after_metrics

        return partial(
            reprice_after_metrics,
            gpu_cost_share=self.gpu_cost_share,
            catalog=self.instance_catalog(),
            attribution_rules=self.attribution,  # owners of unmonitored spend, from the bills' tags
        )

    def api_settings(self) -> ApiSettings:
        """``service.api.context.ApiSettings`` from these settings."""
        # Imported here: the API context pulls in starlette and the analytics package.
        from service.api.context import ApiSettings

        return ApiSettings(
            max_window_days=self.max_window_days,
            page_size_max=self.page_size_max,
            aggregate_page_size_max=self.aggregate_page_size_max,
            max_result_rows=self.max_result_rows,
            idle_threshold_pct=self.idle_threshold_pct,
            gpu_cost_share=self.gpu_cost_share,
            limits=self.limits,
            planning=self.planning(),
        )


SCALARS = (
    "database_url",
    "max_window_days",
    "page_size_max",
    "aggregate_page_size_max",
    "max_result_rows",
    "export_max_rows",
    "idle_threshold_pct",
    "gpu_cost_share",
    "price_catalog_path",
    "log_level",
    "log_format",
)


#: ``[table]`` settings a ``GPU_LEDGER_<TABLE>__<KEY>`` variable sets (its keys are checked there).
ENV_TABLES: dict[str, type[BaseModel]] = {
    "limits": Limits,
    "auth": AuthSettings,
    "answer_cache": AnswerCacheSettings,
    "smtp": SmtpSettings,
}
#: ``GPU_LEDGER_*`` variables read elsewhere: the connector registry's, ``serve --workers``'
#: hand-over file, the project's own test and benchmark switches.
OTHER_ENV = frozenset({
    CONFIG_ENV,
    "GPU_LEDGER_DISABLED_CONNECTORS",
    "GPU_LEDGER_SERVE_SETTINGS_FILE",
    "GPU_LEDGER_TOKEN",
    "GPU_LEDGER_CHROMIUM",
    "GPU_LEDGER_KILL_SEED",
})  # fmt: skip
OTHER_ENV_PREFIXES = ("GPU_LEDGER_TEST_", "GPU_LEDGER_REQUIRE_", "GPU_LEDGER_ALERT_CHANNELS__")


def unknown_env_warnings(env: Mapping[str, str]) -> list[str]:
    """One message per ``GPU_LEDGER_*`` variable in ``env`` that sets nothing (pydantic-settings
    ignores it silently), naming the closest setting: ``GPU_LEDGER_DATABSE_URL`` is not a
    setting, did you mean ``GPU_LEDGER_DATABASE_URL``? Keys of a known table
    (``GPU_LEDGER_LIMITS__…``) and connector variables are checked where they are applied."""
    tables = tuple(f"{ENV_PREFIX}{t.upper()}__" for t in ENV_TABLES)
    known = [f"{ENV_PREFIX}{s.upper()}" for s in SCALARS] + sorted(OTHER_ENV)
    known += [f"{ENV_PREFIX}{t.upper()}__{k.upper()}" for t, m in ENV_TABLES.items() for k in m.model_fields]
    messages = []
    for var in sorted(env):
        upper = var.upper()
        if (
            not upper.startswith(ENV_PREFIX)
            or upper in known
            or upper.startswith((*tables, CONNECTOR_ENV_PREFIX, *OTHER_ENV_PREFIXES))
        ):
            continue
        # Compared without the prefix, which every candidate shares.
        names = {k[len(ENV_PREFIX) :]: k for k in known}
        close = difflib.get_close_matches(upper[len(ENV_PREFIX) :], names, n=1, cutoff=0.6)
        hint = f"did you mean {names[close[0]]}?" if close else "no setting has a similar name"
        messages.append(f"environment variable {var} is not a GPU Ledger setting and is ignored: {hint}")
    return messages


def _check_reports(where: str, reports: list[ReportSchedule], has_smtp: bool) -> None:
    names = [r.name for r in reports]
    if len(set(names)) != len(names):
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        raise ConfigError(f"{where}: [[reports]] names must be unique: {', '.join(twice)} twice")
    if reports and not has_smtp:
        raise ConfigError(f"{where}: [[reports]] are e-mailed: add an [smtp] table (service.notify.email)")


def load_settings(config_path: str | Path | None = None, *, registry: Registry | None = None) -> Settings:
    """Settings from the environment over the config file over defaults.

    ``registry`` finds connector types (default: the installed entry points).
    """
    env = os.environ
    path_text = config_path if config_path is not None else env.get(CONFIG_ENV)
    path = Path(path_text) if path_text else None
    data = _read_toml(path) if path else {}
    where = str(path) if path else "settings"

    tables_known = {"connectors", "limits", "auth", "answer_cache", "smtp", *TABLE_MODELS}
    tables_known |= {"alerts", "alert_channels"}
    unknown = sorted(set(data) - set(SCALARS) - tables_known)
    if unknown:
        raise ConfigError(f"{where}: unknown top-level key(s) {', '.join(map(repr, unknown))}")

    env_upper = {k.upper() for k in env}
    scalars = {k: data[k] for k in SCALARS if k in data and f"{ENV_PREFIX}{k.upper()}" not in env_upper}
    tables = {name: _table_list(where, data, name) for name in ("connectors", *TABLE_MODELS)}
    connectors = _apply_connector_env(tables["connectors"], env)

    kwargs: dict[str, Any] = dict(scalars, config_path=path)
    kwargs["connectors"] = _validate_connectors(where, connectors, registry or default_registry())
    for name in TABLE_MODELS:
        kwargs[name] = _validate_tables(where, name, tables[name])
    kwargs["limits"] = _table(where, "limits", Limits, data.get("limits", {}), env)
    kwargs["auth"] = _table(where, "auth", AuthSettings, data.get("auth", {}), env)
    cache_table = data.get("answer_cache", {})
    kwargs["answer_cache"] = _table(where, "answer_cache", AnswerCacheSettings, cache_table, env)
    if "smtp" in data or any(k.upper().startswith(f"{ENV_PREFIX}SMTP__") for k in env):
        kwargs["smtp"] = _table(where, "smtp", SmtpSettings, data.get("smtp", {}), env)
    _check_reports(where, kwargs["reports"], kwargs.get("smtp") is not None)
    try:
        check_rules(kwargs["attribution"])
    except AttributionConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    try:
        alert_tables = (data.get("alerts", []), data.get("alert_channels", []))
        kwargs["alerts"], kwargs["alert_channels"] = parse_alert_tables(
            where, *alert_tables, has_smtp=kwargs.get("smtp") is not None, env=env
        )
    except AlertConfigError as exc:
        raise ConfigError(str(exc)) from None
    try:
        # Init kwargs beat env in pydantic-settings: file scalars set in env were left out above.
        return Settings(**kwargs)
    except ValidationError as exc:
        problems = "; ".join(f'key "{k}": {m}' for k, m in validation_problems(exc))
        raise ConfigError(f"{where} (or {ENV_PREFIX}* environment): {problems}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _table_list(where: str, data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{where}: {name!r} must be an array of tables ([[{name}]])")
    return [dict(t) for t in value]


def _label(name: str, index: int, table: Mapping[str, Any]) -> str:
    ident = f' name="{table["name"]}"' if "name" in table else ""
    return f"[[{name}]] #{index + 1}{ident}"


def _validate_connectors(
    where: str, tables: list[dict[str, Any]], registry: Registry
) -> list[ConnectorConfig]:
    configs: list[ConnectorConfig] = []
    seen: set[str] = set()
    for i, table in enumerate(tables):
        label = f"{where}: {_label('connectors', i, table)}"
        try:
            config = registry.validate(table)
        except ConnectorConfigError as exc:
            details = "; ".join(f'key "{k}": {m}' for k, m in exc.problems)
            raise ConfigError(f'{label} (type "{exc.type_name}"): {details}') from None
        if config.name in seen:
            raise ConfigError(f'{label}: duplicate connector name "{config.name}"')
        seen.add(config.name)
        configs.append(config)
    for i, config in enumerate(configs):
        for named in getattr(config, "describes", None) or ():
            if named not in seen or named == config.name:
                label = f"{where}: {_label('connectors', i, tables[i])}"
                known = ", ".join(sorted(seen - {config.name})) or "none"
                raise ConfigError(
                    f'{label}: key "describes": no other connector is named "{named}" (configured: {known})'
                )
    return configs


def _validate_tables(where: str, name: str, tables: list[dict[str, Any]]) -> list[Any]:
    if not tables:
        return []
    model = TABLE_MODELS[name]
    out = []
    for i, table in enumerate(tables):
        try:
            out.append(model.model_validate(table))
        except ValidationError as exc:
            details = "; ".join(f'key "{k}": {m}' for k, m in validation_problems(exc))
            raise ConfigError(f"{where}: {_label(name, i, table)}: {details}") from None
    return out


def _table(where: str, name: str, model: type[T], table: Any, env: Mapping[str, str]) -> T:
    """The ``[name]`` table validated by ``model``, with ``GPU_LEDGER_<NAME>__<KEY>`` overrides
    applied (env wins; values starting with ``[`` or ``{`` are JSON)."""
    prefix = f"{ENV_PREFIX}{name.upper()}__"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: '{name}' must be a table ([{name}])")
    values = dict(table)
    for var, raw in env.items():
        if not var.upper().startswith(prefix):
            continue
        value: Any = raw
        if raw.strip().startswith(("[", "{")):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{var}: value is not valid JSON: {exc}") from None
        values[var[len(prefix) :].lower()] = value
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        details = "; ".join(f'key "{k}": {m}' for k, m in validation_problems(exc))
        raise ConfigError(f"{where} (or {prefix}* environment): [{name}]: {details}") from None


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_").replace(".", "_")


def _apply_connector_env(tables: list[dict[str, Any]], env: Mapping[str, str]) -> list[dict[str, Any]]:
    """Apply ``GPU_LEDGER_CONNECTORS__<NAME>__<KEY>`` overrides; an unknown NAME is an error."""
    by_env_name = {_env_name(str(t.get("name", ""))): t for t in tables}
    for var, raw in env.items():
        if not var.upper().startswith(CONNECTOR_ENV_PREFIX):
            continue
        rest = var[len(CONNECTOR_ENV_PREFIX) :]
        name, sep, key = rest.partition("__")
        if not sep or not key:
            raise ConfigError(f"{var}: expected {CONNECTOR_ENV_PREFIX}<NAME>__<KEY>")
        table = by_env_name.get(_env_name(name))
        if table is None:
            names = ", ".join(str(t.get("name")) for t in tables) or "none configured"
            raise ConfigError(f"{var}: no connector named {name!r}; configured: {names}")
        value: Any = raw
        if raw.strip().startswith(("[", "{")):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{var}: value is not valid JSON: {exc}") from None
        table[key.lower()] = value
    return tables
