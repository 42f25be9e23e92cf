"""What Grafana does to a panel's rawSql before PostgreSQL sees it, for the dashboard tests.

Three passes, in Grafana's order (docs/grafana.md says the same):

1. **Template variables** (the browser, ``templateSrv.replace``): ``$name``, ``${name}``,
   ``${name:fmt}`` and ``[[name]]`` of the dashboard's variables. A multi-value or include-All
   variable's values are quoted as SQL literals (``'a','b'``, a quote doubled: the SQL data sources'
   ``interpolateVariable``); a single-value one is inserted as is. "All" inserts the variable's
   custom ``allValue`` unformatted when it has one, else every option's value, quoted.
   ``$__interval`` / ``$__interval_ms``: the panel's interval — ``(to − from) / maxDataPoints``
   rounded up the ladder of ``rangeutil.roundInterval``, never below the panel's ``interval`` (or
   the data source's ``timeInterval``). Unknown names are left alone.
2. **Global SQL substitutions** (the backend, ``sqleng.Interpolate``): ``$__interval_ms``,
   ``$__interval``, ``$__unixEpochFrom()``, ``$__unixEpochTo()``.
3. **PostgreSQL macros** (the backend, ``postgresMacroEngine``): every ``$__name(args)`` — args split
   on commas and trimmed — becomes: ``__time(c)`` → ``c AS "time"``; ``__timeEpoch(c)`` →
   ``extract(epoch from c) as "time"``; ``__timeFilter(c)`` → ``c BETWEEN 'FROM' AND 'TO'`` (RFC 3339
   in UTC, inclusive at both ends); ``__timeFrom()`` / ``__timeTo()`` → ``'FROM'`` / ``'TO'``;
   ``__timeGroup(c, '5m')`` → ``floor(extract(epoch from c)/300)*300`` (and, followed directly by a
   comma, as ``__timeGroupAlias`` — Grafana's pre-5.3 compatibility); ``__timeGroupAlias`` adds
   ``AS "time"``; ``__unixEpochFilter(c)`` → ``c >= F AND c <= T`` (epoch seconds);
   ``__unixEpochGroup(c, '5m')`` → ``floor((c)/300)*300``. Any other macro is an error, as in Grafana.
   TimescaleDB's ``time_bucket`` form is not implemented (the data source sets timescaledb: false).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: templateSrv's variable pattern: $name | [[name(:fmt)]] | ${name(.field)(:fmt)}
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")
#: postgresMacroEngine's pattern
_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")
ALL = "$__all"
#: rangeutil.roundInterval: (below this many ms, use this many ms)
_LADDER = (
    (10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
    (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000), (45000, 30000),
    (90000, 60000), (210000, 120000), (450000, 300000), (750000, 600000), (1050000, 900000),
    (1500000, 1200000), (2700000, 1800000), (5400000, 3600000), (9000000, 7200000),
    (16200000, 10800000), (32400000, 21600000), (86400000, 43200000), (604800000, 86400000),
    (1814400000, 604800000), (3628800000, 2592000000),
)  # fmt: skip
_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "y": 31_536_000_000,
}


class MacroError(ValueError):
    """A macro Grafana would refuse (unknown name, missing argument)."""


def round_interval_ms(ms: float) -> int:
    for below, value in _LADDER:
        if ms < below:
            return value
    return 31_536_000_000


def parse_interval_ms(text: str) -> int:
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d|w|y)", text.strip().strip("'\""))
    if not m:
        raise MacroError(f"error parsing interval {text}")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def format_interval(ms: int) -> str:
    """gtime.FormatInterval: the largest whole unit."""
    units = (("y", 31_536_000_000), ("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000))
    for unit, size in (*units, ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _rfc3339(t: dt.datetime) -> str:
    text = t.astimezone(dt.UTC).isoformat()
    if "." in text:  # RFC3339Nano drops trailing zeros of the fraction
        head, tail = text.split(".")
        frac, zone = tail[:-6], tail[-6:]
        text = f"{head}.{frac.rstrip('0')}{zone}" if frac.rstrip("0") else f"{head}{zone}"
    return text.replace("+00:00", "Z")


def _seconds(value: float) -> str:
    """Go's %v of a float64 number of seconds."""
    return str(int(value)) if value == math.floor(value) else repr(value)


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class Variable:
    name: str
    multi: bool
    include_all: bool
    all_value: str | None
    options: list[str]
    #: the selection: [ALL] or values
    current: list[str] = field(default_factory=lambda: [ALL])

    @classmethod
    def of(cls, spec: Mapping[str, Any], options: Sequence[str]) -> Variable:
        return cls(
            name=spec["name"],
            multi=bool(spec.get("multi")),
            include_all=bool(spec.get("includeAll")),
            all_value=spec.get("allValue") or None,
            options=list(options),
        )


@dataclass
class Context:
    start: dt.datetime
    end: dt.datetime
    variables: dict[str, Variable]
    max_data_points: int = 1000
    datasource_interval: str | None = None

    def interval_ms(self, panel: Mapping[str, Any]) -> int:
        raw = (self.end - self.start).total_seconds() * 1000 / self.max_data_points
        ms = round_interval_ms(raw)
        low = panel.get("interval") or self.datasource_interval
        return max(ms, parse_interval_ms(low)) if low else ms


def _variable_value(var: Variable) -> str:
    if var.current == [ALL]:
        if var.all_value is not None:
            return var.all_value  # a custom all value is inserted unformatted
        values: list[str] = var.options
    else:
        values = var.current
    if var.multi or var.include_all:
        return ",".join(quote_literal(v) for v in values)
    return values[0]


def replace_variables(sql: str, ctx: Context, panel: Mapping[str, Any]) -> str:
    interval = ctx.interval_ms(panel)
    scoped = {"__interval": format_interval(interval), "__interval_ms": str(interval)}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        if name in scoped:
            return scoped[name]
        var = ctx.variables.get(name)
        return m.group(0) if var is None else _variable_value(var)

    return _VARIABLE.sub(sub, sql)


def replace_globals(sql: str, ctx: Context, panel: Mapping[str, Any]) -> str:
    interval = ctx.interval_ms(panel)
    sql = sql.replace("$__interval_ms", str(interval)).replace("$__interval", format_interval(interval))
    sql = sql.replace("$__unixEpochFrom()", str(int(ctx.start.timestamp())))
    return sql.replace("$__unixEpochTo()", str(int(ctx.end.timestamp())))


def _macro(name: str, args: list[str], ctx: Context) -> str:  # noqa: PLR0911
    frm, to = _rfc3339(ctx.start), _rfc3339(ctx.end)
    if name in ("__time", "__timeEpoch", "__timeFilter", "__unixEpochFilter") and not args[0]:
        raise MacroError(f"missing time column argument for macro {name}")
    if name == "__time":
        return f'{args[0]} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {args[0]}) as "time"'
    if name == "__timeFilter":
        return f"{args[0]} BETWEEN '{frm}' AND '{to}'"
    if name == "__timeFrom":
        return f"'{frm}'"
    if name == "__timeTo":
        return f"'{to}'"
    if name in ("__timeGroup", "__timeGroupAlias", "__unixEpochGroup", "__unixEpochGroupAlias"):
        if len(args) < 2:
            raise MacroError(f"macro {name} needs time column and interval and optional fill value")
        seconds = _seconds(parse_interval_ms(args[1]) / 1000)
        if name.startswith("__timeGroup"):
            expr = f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}"
        else:
            expr = f"floor(({args[0]})/{seconds})*{seconds}"
        return expr + (' AS "time"' if name.endswith("Alias") else "")
    if name == "__unixEpochFilter":
        f, t = int(ctx.start.timestamp()), int(ctx.end.timestamp())
        return f"{args[0]} >= {f} AND {args[0]} <= {t}"
    raise MacroError(f'unknown macro "{name}"')


def replace_macros(sql: str, ctx: Context) -> str:
    original = sql

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "__timeGroup":  # pre-5.3: "$__timeGroup(...)," meant the aliased form
            at = original.find(m.group(0))
            if at >= 0 and original[at + len(m.group(0)) : at + len(m.group(0)) + 1] == ",":
                name = "__timeGroupAlias"
        args = [a.strip() for a in m.group(2).split(",")]
        return _macro(name, args, ctx)

    return _MACRO.sub(sub, sql)


def expand(sql: str, ctx: Context, panel: Mapping[str, Any]) -> str:
    """``sql`` as PostgreSQL receives it from Grafana for ``panel`` under ``ctx``."""
    return replace_macros(replace_globals(replace_variables(sql, ctx, panel), ctx, panel), ctx)
