"""``focus``: the ledger as a FOCUS cost and usage dataset (FinOps Open Cost and Usage Spec 1.0 or 1.2).

One row per charge period — the ledger's UTC hour — × resource — the device (a GPU or a MIG
instance; a cloud GPU's FOCUS ResourceId is its instance, the bill's resource) — × allocation (the
workload that held it, with its project, team, user and namespace, or nobody): one per priced
``ledger_hour`` row, under the same access rules as every answer (a project- or team-scoped caller
gets its own rows), so Σ EffectiveCost per currency equals GraphQL ``cost``'s total for the window.
Unpriced time (no rate, no TCO site) has no cost to state and is left out: FOCUS costs may not be
null, and 0 would be a placeholder (FOCUS "Null Handling").

Built column-wise: one SELECT of the ledger rows (read by :func:`service.analytics.frames.read_frame`),
the bill's rates of the cloud instances in it, then polars expressions (:mod:`service.export.focus_columns`).
Parameters: the common window, filters and ``fields``; ``focusVersion`` (``1.0`` or ``1.2``,
default 1.2). ``groupBy`` is refused: FOCUS rows are fixed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl
from sqlalchemy import ColumnElement, Connection, Float, case, cast, func, null, select, type_coerce

from service.analytics import frames
from service.analytics.dims import Dimension, Granularity
from service.analytics.paging import Page
from service.export.arguments import ExportArgs, ParameterError
from service.export.focus_columns import DEFAULT_VERSION, VERSIONS, columns, focus_frame
from service.export.focus_rates import billing_accounts, billing_rates, nanos, with_bill_amounts
from service.export.formats import Format
from service.export.questions import ExportContext, Question, register
from service.money import Money
from service.pricing.rates import BILLING_KIND
from service.timeutil import HOUR_S

#: The ledger dimensions every row carries.
ROW_KEYS = tuple(Dimension)
EXTRA_KEYS = ("instance_id", "mig_profile", "currency", "rate_source")


def focus_version(args: ExportArgs) -> str:
    """The checked ``focusVersion`` (default 1.2)."""
    version = DEFAULT_VERSION if args.focus_version is None else args.focus_version.strip()
    if version not in VERSIONS:
        raise ParameterError(
            "focusVersion", f"focusVersion {args.focus_version!r} is not one of {', '.join(VERSIONS)}"
        )
    return version


class FocusQuestion(Question):
    """A question whose columns do not follow ``period_start`` + groupBy + measures."""

    def columns(self, group_by: tuple[Dimension, ...]) -> tuple[str, ...]:
        # Every column either version writes (``fields`` is checked against these, then against
        # the version's own in :func:`build`).
        return tuple(dict.fromkeys((*columns("1.2"), *columns("1.0"))))

    def columns_of(self, args: ExportArgs) -> tuple[str, ...]:
        return columns(focus_version(args))


def ledger_rows(conn: Connection, args: ExportArgs, page: Page) -> pl.DataFrame:
    """The priced ledger rows of the window, the caller's scope and filter: one per (hour, device,
    workload key), read as they are stored — no GROUP BY (each is one FOCUS row), in the order of
    the (hour, device) index, so the database streams them instead of hashing and sorting."""
    q = replace(args.query, granularity=Granularity.HOUR, group_by=ROW_KEYS)
    src = q.source(per_device=True, rollup=False)
    c = src.c

    def gpu_hours(seconds: str) -> ColumnElement[Any]:
        return cast(c[seconds] * c.gpu_fraction, Float) / float(HOUR_S)

    def dimension(d: Dimension) -> ColumnElement[Any]:
        # Time nobody held belongs to nobody, as in every answer: its workload dimensions are null.
        column: ColumnElement[Any] = c[d.column]
        if d.is_workload:
            column = case((c.workload_key == "", null()), else_=column)
        return column.label(d.name.lower())

    stmt = (
        select(
            c.hour_index.label(frames.PERIOD),
            *(dimension(d) for d in ROW_KEYS),
            *(c[k].label(k) for k in EXTRA_KEYS),
            c.cost.label("cost"),
            type_coerce(func.coalesce(c.idle_cost, 0), Money).label("idle_cost"),
            gpu_hours("present_s").label("gpu_hours"),
            gpu_hours("busy_s").label("effective_gpu_hours"),
            gpu_hours("idle_s").label("idle_gpu_hours"),
            c.default_metric.label("metric"),
        )
        .where(c.cost.is_not(None))
        .order_by(c.hour_index, c.device_id, c.workload_key)
    )
    raw = frames.read_frame(conn, stmt, page)
    return raw.with_columns(frames.period_start(Granularity.HOUR), pl.col(frames.PERIOD).alias("h"))


def build(conn: Connection, args: ExportArgs, page: Page, _context: ExportContext) -> pl.DataFrame:
    version = focus_version(args)
    if args.query.group_by:
        raise ParameterError(
            "groupBy", "focus rows are one per hour × device × allocation: it takes no groupBy"
        )
    absent = [f for f in args.fields or () if f not in columns(version)]
    if absent:
        raise ParameterError("fields", f"FOCUS {version} has no column(s) {', '.join(map(repr, absent))}")
    rows = ledger_rows(conn, args, page)
    from_bill = pl.col("rate_source").str.starts_with(f"{BILLING_KIND}:").fill_null(False)
    rows = rows.with_columns(from_bill.alias("from_bill"), nanos("cost").alias("cost_n"))
    window = args.query.window
    billed = rows.filter("from_bill")["instance_id"].drop_nulls().unique().to_list()
    rates = billing_rates(conn, billed, window.start, window.end)
    cloud_accounts = rows.filter(pl.col("environment") != "onprem")["account"].drop_nulls().unique().to_list()
    rows = with_bill_amounts(rows, rates).join(
        billing_accounts(conn, cloud_accounts), on="account", how="left", maintain_order="left"
    )
    return focus_frame(rows, version)


FOCUS = register(
    FocusQuestion(
        "focus",
        "cost",
        frozenset({"focusVersion"}),
        (),
        build,
        formats=frozenset({Format.CSV, Format.PARQUET}),
    )
)
