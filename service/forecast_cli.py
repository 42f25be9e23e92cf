"""``gpu-ledger forecast --start … --end … [--horizon-days 28] [--group-by PROJECT] [--currency USD]``:
the forecast as a flat table (:mod:`service.analytics.forecast_frame`) in CSV, Parquet or Arrow.

Registered on the CLI by ``service.cli`` importing this module. The window, groupBy, filter,
metric and currency go through the export's argument checks (:mod:`service.export.arguments`,
the same messages); horizon and levels are the forecast's own. Read with full access, like the
other commands. Mistakes in the arguments exit 2 with one line naming the option; database
trouble exits 1. Demand vs capacity is an export question: ``gpu-ledger export demand-capacity``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import polars as pl

from service.cli import FAILURE_EXIT, _settings, app, database_failed, fail
from service.cli_options import ConfigOpt, MetricOpt

FORMATS = ("csv", "parquet", "arrow")


def _params(
    start: str, end: str, group_by: list[str], filters: list[str], metric: str | None, currency: str | None
) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {"start": [start], "end": [end], "groupBy": [",".join(group_by)]}
    for item in filters:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--filter {item!r}: use KEY=VALUE (e.g. project=llm-pretrain)")
        params.setdefault(key, []).append(value)
    if metric is not None:
        params["metric"] = [metric]
    if currency is not None:
        params["currency"] = [currency]
    return params


def _parse_only(*_: object) -> pl.DataFrame:
    raise TypeError("the forecast's frame is built by forecast_frame, not as an export question")


@app.command()
def forecast(
    start: Annotated[str, typer.Option(help="History start: a UTC midnight, ISO 8601 (…T00:00Z).")],
    end: Annotated[
        str, typer.Option(help="History end (exclusive), a UTC midnight: the forecast starts here.")
    ],
    horizon_days: Annotated[int, typer.Option("--horizon-days", help="Days to forecast (1 to 92).")] = 28,
    group_by: Annotated[
        list[str] | None,
        typer.Option("--group-by", help="Dimension(s), e.g. PROJECT, TEAM, ENVIRONMENT.", show_default=False),
    ] = None,
    filters: Annotated[
        list[str] | None,
        typer.Option("--filter", help="KEY=VALUE, repeatable (as for export).", show_default=False),
    ] = None,
    metric: MetricOpt = None,
    currency: Annotated[
        str | None,
        typer.Option(help="Convert cost to this currency per day before fitting.", show_default=False),
    ] = None,
    level: Annotated[
        list[float] | None, typer.Option("--level", help="Interval level %, repeatable (default 80 and 95).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv, parquet or arrow.")] = "csv",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write; default stdout (csv only).")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Forecast GPU-hours, effective GPU-hours and cost per group for the days after the window
    (Holt-Winters with a weekly season; docs/forecast.md)."""
    from sqlalchemy.exc import SQLAlchemyError

    from service.analytics import forecast as forecast_q
    from service.analytics.access import ALL
    from service.analytics.errors import QueryError
    from service.analytics.forecast_frame import forecast_frame
    from service.analytics.window import pruned_hours_refused
    from service.db import make_engine
    from service.export.arguments import ParameterError, parse_args
    from service.export.questions import Question

    if fmt not in FORMATS:
        raise fail(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if output is None and fmt != "csv":
        raise fail(f"--format {fmt} needs --output")
    settings = _settings(config)
    # The export's checks of the window, groupBy, filter, metric and currency (not registered:
    # a forecast has horizon and levels the export's parameters do not know).
    shape = Question("forecast", "forecast", frozenset({"metric", "currency"}), (), _parse_only)
    try:
        params = _params(start, end, group_by or [], filters or [], metric, currency)
        args = parse_args(shape, params, access=ALL, max_window_days=settings.max_window_days)
        levels = tuple(level or forecast_q.DEFAULT_LEVELS)
        forecast_q.check_arguments(args.query, horizon_days, levels)
    except ParameterError as exc:
        raise fail(f"{exc.parameter or 'argument'}: {exc.message}") from None
    except QueryError as exc:
        raise fail(f"{exc.code}: {exc.message}") from None
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn, pruned_hours_refused(conn):  # no short answer after a prune
            f = forecast_q.forecast(
                conn, args.query, horizon_days, levels, metric=args.metric, currency=args.currency
            )
        frame = forecast_frame(f, args.query.group_by)
        if output is None:
            frame.write_csv(sys.stdout)
        elif fmt == "csv":
            frame.write_csv(output)
        elif fmt == "parquet":
            frame.write_parquet(output)
        else:
            frame.write_ipc(output)
    except QueryError as exc:
        code = (
            2
            if exc.code.startswith(("INVALID", "UNKNOWN", "WINDOW", "HISTORY", "TOO_MANY"))
            else FAILURE_EXIT
        )
        raise fail(f"{exc.code}: {exc.message}", code) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    except OSError as exc:
        raise fail(f"{output}: {exc.strerror or exc}", FAILURE_EXIT) from None
    finally:
        engine.dispose()
    if output is not None:
        typer.echo(f"forecast: {len(f.groups)} groups × {horizon_days} days, {frame.height} rows → {output}")
