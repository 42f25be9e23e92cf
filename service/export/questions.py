"""The questions an export answers, by the name in ``/export/{name}.{format}``, and their columns.

A :class:`Question` names its own parameters (beyond the common window, groupBy, filter and
fields), the columns it writes after ``period_start`` and the grouped dimensions, how its frame is
built and the formats it is offered in (all by default). The registry is open: :func:`register`
adds a question (issue 14's ``focus``) without touching the endpoint, the CLI or the metrics'
route labels, which all read :data:`QUESTIONS`.

Columns are the GraphQL field names in snake_case: ``period_start`` (UTC instant, null for
TOTAL), one column per grouped dimension (``device``, ``gpu_model`` …), then the measures. Money
is ``Decimal(38, 9)`` with a ``currency`` column; floats are the full doubles (GraphQL rounds them
to 6 decimals for display); ``metric`` is upper-case as GraphQL shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
from sqlalchemy import Connection

from service.analytics import break_even, capacity, columnar
from service.analytics.dims import Dimension
from service.analytics.errors import QueryError
from service.analytics.frames import PERIOD_START
from service.analytics.heatmap import COLUMNS as HEATMAP_COLUMNS
from service.analytics.heatmap import heatmap, heatmap_frame, zone_of
from service.analytics.paging import Page, ResultTooLarge
from service.export.arguments import QUESTION_PARAMETERS, ExportArgs, ParameterError
from service.export.formats import Format, upper_case
from service.pricing.break_even import Planning

#: Builds a question's frame: every column it has, rows within ``page``'s cap.
Build = Callable[[Connection, ExportArgs, Page, "ExportContext"], pl.DataFrame]


@dataclass(frozen=True)
class ExportContext:
    """What the service's configuration adds to a request: the threshold the ledger's idle
    columns were built with (``idle_threshold_pct``) and break-even's planning inputs."""

    ledger_threshold_pct: float
    #: break-even's sites, price catalog and rent options (``Settings.planning``).
    planning: Planning = field(default_factory=Planning)


@dataclass(frozen=True)
class Question:
    """One export: ``name`` (its path), the GraphQL field it mirrors, its own parameters, its
    measure columns, how to build it, and the groupBy it has when none is given."""

    name: str
    graphql_field: str
    parameters: frozenset[str]
    measures: tuple[str, ...]
    build: Build
    default_group_by: tuple[Dimension, ...] = field(default=())
    #: The formats it is offered in (a CSV-only report can say so).
    formats: frozenset[Format] = field(default=frozenset(Format))

    def __post_init__(self) -> None:
        unknown = self.parameters - QUESTION_PARAMETERS
        if unknown:
            raise ValueError(f"question {self.name}: unknown parameter(s) {sorted(unknown)}")

    def columns(self, group_by: tuple[Dimension, ...]) -> tuple[str, ...]:
        """Every column of this export, in order, for ``group_by``."""
        return (PERIOD_START, *(d.name.lower() for d in group_by), *self.measures)

    def columns_of(self, args: ExportArgs) -> tuple[str, ...]:
        """The columns written for ``args`` when no ``fields`` are given (a question whose columns
        depend on more than the groupBy, such as focus's version, overrides it)."""
        return self.columns(args.query.group_by)


QUESTIONS: dict[str, Question] = {}


def register(question: Question) -> Question:
    """Add ``question`` to the registry (a name is registered once)."""
    if question.name in QUESTIONS:
        raise ValueError(f"an export named {question.name!r} is registered already")
    QUESTIONS[question.name] = question
    return question


class ExportTooLarge(QueryError):
    code = "RESULT_TOO_LARGE"


#: Which parameter a domain error is about (errors raised while the answer is computed).
ERROR_PARAMETERS = {
    "UNKNOWN_CURRENCY": "currency",
    "MISSING_FX_RATE": "currency",
    "UNSUPPORTED_THRESHOLD": "thresholdPct",
}


def parameter_of(error: QueryError) -> str | None:
    """The parameter ``error`` is about, if one is."""
    named = getattr(error, "parameter", None)
    return named if isinstance(named, str) else ERROR_PARAMETERS.get(error.code)


def export_frame(
    conn: Connection, question: Question, args: ExportArgs, context: ExportContext, *, max_rows: int | None
) -> pl.DataFrame:
    """The answer to ``question``: its columns (``args.fields`` of them, in that order), refused
    with RESULT_TOO_LARGE above ``max_rows`` rows (None: no cap)."""
    page = Page(field=question.name, max_rows=max_rows)
    try:
        frame = question.build(conn, args, page, context)
    except ResultTooLarge:
        raise ExportTooLarge(
            f"the {question.name} export has more than {max_rows} rows (export_max_rows): narrow the "
            "window, the groupBy or the filter, or use a coarser granularity"
        ) from None
    return frame.select(args.fields or question.columns_of(args))


def _upper_metric(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(upper_case(frame["metric"]))


def _usage(conn: Connection, args: ExportArgs, page: Page, _context: ExportContext) -> pl.DataFrame:
    return _upper_metric(columnar.usage_frame(conn, args.query, args.metric, page=page))


def _cost(conn: Connection, args: ExportArgs, page: Page, _context: ExportContext) -> pl.DataFrame:
    return columnar.cost_frame(conn, args.query, args.idle_policy, args.currency, page=page)


def _idle(conn: Connection, args: ExportArgs, page: Page, context: ExportContext) -> pl.DataFrame:
    frame = columnar.idle_frame(
        conn,
        args.query,
        args.metric,
        args.threshold_pct,
        ledger_threshold_pct=context.ledger_threshold_pct,
        page=page,
        # The streak is most of this answer's cost: only when its column is written.
        streak=args.fields is None or columnar.STREAK in args.fields,
        currency=args.currency,
    )
    return _upper_metric(frame).with_columns(
        pl.lit(args.threshold_pct, dtype=pl.Float64).alias("threshold_pct")
    )


def _effective(conn: Connection, args: ExportArgs, page: Page, _context: ExportContext) -> pl.DataFrame:
    frame = columnar.effective_frame(conn, args.query, args.metric, page=page, currency=args.currency)
    return _upper_metric(frame)


USAGE = register(
    Question(
        "usage",
        "usage",
        frozenset({"granularity", "metric"}),
        (
            "gpu_hours",
            "effective_gpu_hours",
            "utilization_pct",
            "idle_gpu_hours",
            "energy_kwh",
            "coverage_pct",
            "metric",
        ),
        _usage,
    )
)
COST = register(
    Question(
        "cost",
        "cost",
        frozenset({"granularity", "idlePolicy", "currency"}),
        columnar.COST_COLUMNS,
        _cost,
    )
)
IDLE_WASTE = register(
    Question(
        "idle-waste",
        "idleWaste",
        frozenset({"granularity", "metric", "thresholdPct", "currency"}),
        (
            "currency",
            "idle_gpu_hours",
            "idle_cost",
            "allocated_idle_gpu_hours",
            "allocated_idle_cost",
            "unallocated_idle_gpu_hours",
            "unallocated_idle_cost",
            columnar.STREAK,
            "threshold_pct",
            "metric",
        ),
        _idle,
    )
)
EFFECTIVE_COST = register(
    Question(
        "effective-cost",
        "effectiveCost",
        frozenset({"metric", "currency"}),
        (
            "currency",
            "gpu_hours",
            "effective_gpu_hours",
            "cost",
            "cost_per_gpu_hour",
            "cost_per_effective_gpu_hour",
            "metric",
        ),
        _effective,
        # GraphQL's default groupBy of effectiveCost.
        default_group_by=(Dimension.ENVIRONMENT, Dimension.GPU_MODEL),
    )
)


def _break_even(conn: Connection, args: ExportArgs, _page: Page, context: ExportContext) -> pl.DataFrame:
    if args.query.group_by:
        raise ParameterError(
            "groupBy", "break-even has its own rows (site × GPU model × option): leave groupBy out"
        )
    what_if = break_even.WhatIf(args.allocation_pct, args.utilization_pct)
    rows = break_even.break_even_rows(
        conn, args.query, context.planning, metric=args.metric, currency=args.currency, what_if=what_if
    )
    frame = break_even.break_even_frame(rows)
    return frame.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias(PERIOD_START))


BREAK_EVEN = register(
    Question(
        "break-even",
        "breakEven",
        frozenset({"metric", "currency", "allocationPct", "utilizationPct"}),
        break_even.COLUMNS,
        _break_even,
    )
)


def _heatmap(conn: Connection, args: ExportArgs, _page: Page, context: ExportContext) -> pl.DataFrame:
    if args.query.group_by:
        raise ParameterError("groupBy", "heatmap rows are the 168 hours of the week: leave groupBy out")
    if args.time_zone is None:
        raise ParameterError(
            "timeZone", "timeZone is required: an IANA time zone such as Europe/Berlin or UTC"
        )
    try:
        zone_of(args.time_zone)
    except QueryError as exc:
        raise ParameterError("timeZone", exc.message) from None
    cells = heatmap(
        conn,
        args.query,
        args.time_zone,
        args.metric,
        args.threshold_pct,
        args.currency,
        ledger_threshold_pct=context.ledger_threshold_pct,
    )
    frame = heatmap_frame(cells)
    return frame.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias(PERIOD_START))


HEATMAP = register(
    Question(
        "heatmap",
        "heatmap",
        frozenset({"metric", "thresholdPct", "currency", "timeZone"}),
        HEATMAP_COLUMNS,
        _heatmap,
    )
)


def _demand_capacity(conn: Connection, args: ExportArgs, page: Page, _context: ExportContext) -> pl.DataFrame:
    pct = 100.0 if args.allocation_pct is None else args.allocation_pct
    try:
        capacity.check_pool(args.query.group_by, pct)
    except QueryError as exc:
        raise ParameterError(
            "groupBy" if "dimensions" in exc.message else "allocationPct", exc.message
        ) from None
    return capacity.capacity_frame(conn, args.query, pct, page=page)


DEMAND_CAPACITY = register(
    Question(
        "demand-capacity",
        "demandCapacity",
        frozenset({"granularity", "allocationPct"}),
        capacity.CAPACITY_COLUMNS,
        _demand_capacity,
        default_group_by=capacity.DEFAULT_POOL,
    )
)
