"""``forecast`` (GPU-hours, effective GPU-hours and cost ahead, with intervals) and ``demandCapacity``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics import capacity as capacity_q
from service.analytics import forecast as forecast_q
from service.analytics.forecast_model import SeriesForecast
from service.api.context import ApiContext
from service.api.types import (
    AFTER,
    FILTER,
    GRANULARITY,
    LEDGER_FIRST,
    METRIC,
    WINDOW,
    Dimension,
    Granularity,
    LedgerBucket,
    Money,
    TimeWindow,
    bucket_objects,
    dim_field,
    gql_float,
    ledger_page,
    ledger_query,
    metric_key,
)
from service.money import quantize

MODEL = (
    "HOLT_WINTERS_ADDITIVE_WEEKLY (≥ 14 days of history), HOLT_LINEAR_TREND (7–13 days), CONSTANT "
    "(a history that never changed) or SEASONAL_NAIVE (the smoother failed): docs/forecast.md."
)


@strawberry.type(description="A prediction interval: the value lies within it with probability levelPct %.")
class ForecastInterval:
    level_pct: float = strawberry.field(description="Coverage, %.")
    lower: float = strawberry.field(description="Lower bound (never below 0).")
    upper: float = strawberry.field(description="Upper bound.")


@strawberry.type(description="One forecast day of a quantity.")
class ForecastPoint:
    day: dt.datetime = strawberry.field(description="Start of the UTC day.")
    value: float = strawberry.field(description="Point forecast (mean; never below 0).")
    intervals: list[ForecastInterval] = strawberry.field(description="One per requested level.")


@strawberry.type(description="A quantity forecast day by day.")
class ForecastSeries:
    model: str = strawberry.field(description=MODEL)
    total: float = strawberry.field(description="Σ of the daily point forecasts over the horizon.")
    points: list[ForecastPoint] = strawberry.field(description="One per day of the horizon.")


@strawberry.type(description="A prediction interval of an amount of money.")
class MoneyInterval:
    level_pct: float = strawberry.field(description="Coverage, %.")
    lower: Money = strawberry.field(description="Lower bound (never below 0).")
    upper: Money = strawberry.field(description="Upper bound.")


@strawberry.type(description="One forecast day of cost.")
class MoneyForecastPoint:
    day: dt.datetime = strawberry.field(description="Start of the UTC day.")
    value: Money = strawberry.field(description="Point forecast (rounded half-even to 1e-9).")
    intervals: list[MoneyInterval] = strawberry.field(description="One per requested level.")


@strawberry.type(description="Cost in one currency forecast day by day.")
class MoneyForecastSeries:
    currency: str = strawberry.field(description="ISO 4217 code of every amount.")
    model: str = strawberry.field(description=MODEL)
    total: Money = strawberry.field(description="Σ of the daily point forecasts over the horizon.")
    points: list[MoneyForecastPoint] = strawberry.field(description="One per day of the horizon.")


@strawberry.type(description="The forecast of one group (its dimension values null unless grouped by).")
class GroupForecast:
    gpu_hours: ForecastSeries = strawberry.field(description="GPU-hours present per day.")
    effective_gpu_hours: ForecastSeries = strawberry.field(
        description="Busy GPU-hours of the metric per day."
    )
    cost: list[MoneyForecastSeries] = strawberry.field(
        description="Cost per day: one series per currency of the history, or one in `currency` when "
        "given. Unpriced time has none."
    )
    environment: str | None = dim_field("environment")
    provider: str | None = dim_field("provider")
    account: str | None = dim_field("account")
    region: str | None = dim_field("region")
    cluster: str | None = dim_field("cluster")
    node: str | None = dim_field("node")
    device: str | None = dim_field("device id")
    gpu_model: str | None = dim_field("GPU model")
    instance_type: str | None = dim_field("instance type")
    project: str | None = dim_field("project")
    team: str | None = dim_field("team")
    user: str | None = dim_field("user")
    namespace: str | None = dim_field("namespace")
    workload: str | None = dim_field("workload")
    owner_rule: str | None = dim_field("the [[attribution]] rule that named the owner")


@strawberry.type(description="Daily forecasts per group, fitted on the window's daily totals.")
class Forecast:
    first_day: dt.datetime = strawberry.field(description="The first forecast day: the window's end.")
    horizon_days: int = strawberry.field(description="Days forecast.")
    history_days: int = strawberry.field(description="Days of history fitted (the window's).")
    levels_pct: list[float] = strawberry.field(description="Interval levels, ascending.")
    groups: list[GroupForecast] = strawberry.field(description="One per group, ordered by its values.")


def _series(f: forecast_q.Forecast, s: SeriesForecast) -> ForecastSeries:
    points = [
        ForecastPoint(
            day=f.day(h),
            value=gql_float(float(s.mean[h])),
            intervals=[
                ForecastInterval(
                    level_pct=lv,
                    lower=gql_float(float(s.bounds[lv][0][h])),
                    upper=gql_float(float(s.bounds[lv][1][h])),
                )
                for lv in f.levels
            ],
        )
        for h in range(f.horizon_days)
    ]
    return ForecastSeries(model=s.model, total=gql_float(float(s.mean.sum())), points=points)


def _money(amount: float, currency: str) -> Money:
    return Money.of(quantize(amount), currency)


def _money_series(f: forecast_q.Forecast, currency: str, s: SeriesForecast) -> MoneyForecastSeries:
    means = [quantize(float(m)) for m in s.mean]
    points = [
        MoneyForecastPoint(
            day=f.day(h),
            value=Money.of(means[h], currency),
            intervals=[
                MoneyInterval(
                    level_pct=lv,
                    lower=_money(float(s.bounds[lv][0][h]), currency),
                    upper=_money(float(s.bounds[lv][1][h]), currency),
                )
                for lv in f.levels
            ],
        )
        for h in range(f.horizon_days)
    ]
    total = Money.of(sum(means, Decimal("0E-9")), currency)
    return MoneyForecastSeries(currency=currency, model=s.model, total=total, points=points)


def _group(f: forecast_q.Forecast, g: forecast_q.GroupForecast) -> GroupForecast:
    dims = {d.name.lower(): v for d, v in g.dims}
    return GroupForecast(
        **dims,
        gpu_hours=_series(f, g.gpu_hours),
        effective_gpu_hours=_series(f, g.effective_gpu_hours),
        cost=[_money_series(f, cur, s) for cur, s in g.cost],
    )


@strawberry.type(
    description="GPUs held against GPUs installed in one period and pool. Installed = Σ present "
    "GPU-seconds ÷ 3600 per hour (MIG slices by their fraction); allocated = the same over time a "
    "workload held. An hour is saturated when allocated ≥ allocationPct % of installed: no free GPU "
    "(the queueing signal that says buy)."
)
class CapacityRow(LedgerBucket):
    hours: int = strawberry.field(description="Hours of the period in which the pool had a GPU present.")
    installed_gpu_hours: float = strawberry.field(description="Σ installed GPUs over those hours.")
    allocated_gpu_hours: float = strawberry.field(description="Σ allocated GPUs over those hours.")
    allocated_pct: float | None = strawberry.field(description="allocated ÷ installed GPU-hours × 100.")
    peak_installed_gpus: float = strawberry.field(description="Largest hourly installed GPUs.")
    peak_allocated_gpus: float = strawberry.field(description="Largest hourly allocated GPUs.")
    saturated_hours: int = strawberry.field(
        description="Hours with allocated ≥ allocationPct % of installed."
    )

    @classmethod
    def page(cls, rows: Sequence[capacity_q.CapacityRow], cursors: Sequence[str]) -> list[CapacityRow]:
        fields: dict[str, Sequence[object]] = {
            "hours": [r.hours for r in rows],
            "installed_gpu_hours": [gql_float(r.installed_gpu_hours) for r in rows],
            "allocated_gpu_hours": [gql_float(r.allocated_gpu_hours) for r in rows],
            "allocated_pct": [gql_float(r.allocated_pct) for r in rows],
            "peak_installed_gpus": [gql_float(r.peak_installed_gpus) for r in rows],
            "peak_allocated_gpus": [gql_float(r.peak_allocated_gpus) for r in rows],
            "saturated_hours": [r.saturated_hours for r in rows],
        }
        return bucket_objects(cls, [r.key for r in rows], cursors, fields)


@strawberry.type
class ForecastQuery:
    @strawberry.field(
        description="GPU-hours, effective GPU-hours and cost per group for the days after the window, "
        "with prediction intervals and weekly seasonality (Holt-Winters exponential smoothing on the "
        f"window's daily totals; docs/forecast.md). At most {forecast_q.MAX_GROUPS} groups "
        "(TOO_MANY_GROUPS), each fitted on its own; fewer than 7 days of history: HISTORY_TOO_SHORT. "
        "A project- or team-scoped caller forecasts its own rows."
    )
    async def forecast(
        self,
        info: Info[ApiContext, None],
        window: Annotated[
            TimeWindow,
            strawberry.argument(
                description="The history: whole UTC days (start and end at 00:00Z), at least 7 of them; "
                "14 or more for the weekly season."
            ),
        ],
        horizon_days: Annotated[
            int, strawberry.argument(description=f"Days to forecast, 1 to {forecast_q.MAX_HORIZON_DAYS}.")
        ] = 28,
        group_by: Annotated[
            Sequence[Dimension], strawberry.argument(description="Dimensions to group by; [] = one forecast.")
        ] = (),
        filter: FILTER = None,  # noqa: A002
        metric: METRIC = None,
        currency: Annotated[
            str | None,
            strawberry.argument(
                description="Convert the cost history to this ISO 4217 currency through the FX table, per "
                "day, before fitting (as `cost` does: MISSING_FX_RATE, UNKNOWN_CURRENCY); null = one cost "
                "series per currency."
            ),
        ] = None,
        levels_pct: Annotated[
            Sequence[float],
            strawberry.argument(
                description=f"Interval levels in % (0 < level < 100), 1 to {forecast_q.MAX_LEVELS}."
            ),
        ] = forecast_q.DEFAULT_LEVELS,
    ) -> Forecast:
        ctx = info.context
        q = ledger_query(ctx.settings, window, Granularity.DAY, group_by, filter, access=ctx.access)
        forecast_q.check_arguments(q, horizon_days, levels_pct)
        f = await ctx.read(
            lambda conn: forecast_q.forecast(
                conn,
                q,
                horizon_days,
                levels_pct,
                metric=metric_key(metric),
                currency=currency,
                deadline=ctx.deadline,
            )
        )
        return Forecast(
            first_day=f.first_day,
            horizon_days=f.horizon_days,
            history_days=f.history_days,
            levels_pct=list(f.levels),
            groups=[_group(f, g) for g in f.groups],
        )

    @strawberry.field(
        description="Demand vs capacity per period and pool: allocated against installed GPUs hour by "
        "hour, and the hours in which allocated ≥ installed (saturated: the queueing signal that says "
        "buy). Account-wide (FORBIDDEN to project- or team-scoped callers)."
    )
    async def demand_capacity(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        granularity: Annotated[Granularity, strawberry.argument(description=GRANULARITY)] = Granularity.DAY,
        group_by: Annotated[
            Sequence[Dimension],
            strawberry.argument(
                description="The pool: device dimensions only (no PROJECT, TEAM, USER, NAMESPACE, WORKLOAD)."
            ),
        ] = (Dimension.ENVIRONMENT, Dimension.GPU_MODEL),
        filter: FILTER = None,  # noqa: A002
        allocation_pct: Annotated[
            float,
            strawberry.argument(
                description="An hour is saturated when allocated ≥ this % of installed (0 < x ≤ 100)."
            ),
        ] = 100.0,
        first: LEDGER_FIRST = None,
        after: AFTER = None,
    ) -> list[CapacityRow]:
        ctx = info.context
        q = ledger_query(ctx.settings, window, granularity, group_by, filter, access=ctx.access)
        capacity_q.check_pool(q.group_by, allocation_pct)
        ctx.access.require_everything("installed capacity")
        page = ledger_page(ctx.settings, "demandCapacity", q, first, after, allocation_pct)
        rows = await ctx.read(lambda conn: capacity_q.demand_capacity(conn, q, allocation_pct, page=page))
        return CapacityRow.page(rows, page.key_cursors(r.key.order for r in rows))
