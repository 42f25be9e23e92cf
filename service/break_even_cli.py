"""``gpu-ledger break-even``: the breakEven answer as a table in the terminal (docs/break-even.md).

The options are the break-even export's parameters and go through the same checks
(:mod:`service.export.arguments`); ``gpu-ledger export break-even`` writes the same rows to a file.
Imported by ``service.cli`` at start-up: nothing heavy is imported before the command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli_options import ConfigOpt, MetricOpt

COLUMNS = ("site", "GPU model", "option", "source", "provider", "instance type", "region",
           "rent /GPU-h", "own /alloc. GPU-h", "break-even alloc. %", "outcome", "cheaper now")  # fmt: skip


def break_even_command(
    start: Annotated[str, typer.Option(help="Window start, ISO 8601 with offset, a whole UTC hour.")],
    end: Annotated[str, typer.Option(help="Window end (exclusive), a whole UTC hour.")],
    currency: Annotated[
        str | None, typer.Option(help="Convert to this ISO 4217 currency (default: each site's).")
    ] = None,
    allocation_pct: Annotated[
        str | None,
        typer.Option("--allocation-pct", help="What if allocated this % of hours.", show_default=False),
    ] = None,
    utilization_pct: Annotated[
        str | None,
        typer.Option("--utilization-pct", help="What if busy this % of allocated time.", show_default=False),
    ] = None,
    metric: MetricOpt = None,
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="KEY=VALUE, repeatable: the owned GPUs (region, gpuModel, …).",
            show_default=False,
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Own or rent: per owned site and GPU model, owning's cost against every renting price and the
    allocation above which owning is cheaper."""
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy.exc import SQLAlchemyError

    from service.analytics.access import ALL
    from service.analytics.break_even import WhatIf, break_even_rows
    from service.analytics.errors import QueryError
    from service.analytics.window import pruned_hours_refused
    from service.cli import FAILURE_EXIT, _settings, database_failed, fail
    from service.cli_export import _option
    from service.db import make_engine
    from service.export.arguments import ParameterError, parse_args
    from service.export.questions import QUESTIONS, parameter_of

    given = {
        "start": start,
        "end": end,
        "currency": currency,
        "allocationPct": allocation_pct,
        "utilizationPct": utilization_pct,
        "metric": metric,
    }
    params: dict[str, list[str]] = {k: [v] for k, v in given.items() if v is not None}
    for item in filters or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise fail(f"--filter {item!r}: expected KEY=VALUE (e.g. region=dc1, gpuModel=H100)")
        params.setdefault(key.strip(), []).append(value)
    settings = _settings(config)
    try:
        args = parse_args(
            QUESTIONS["break-even"], params, access=ALL, max_window_days=settings.max_window_days
        )
    except ParameterError as exc:
        raise fail(f"{_option(exc.parameter)}{exc.message}") from None
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn, pruned_hours_refused(conn):  # no short answer after a prune
            rows = break_even_rows(
                conn,
                args.query,
                settings.planning(),
                metric=args.metric,
                currency=args.currency,
                what_if=WhatIf(args.allocation_pct, args.utilization_pct),
            )
    except QueryError as exc:
        code = 2 if exc.code.startswith(("INVALID", "UNKNOWN", "WINDOW")) else FAILURE_EXIT
        raise fail(f"{_option(parameter_of(exc))}{exc.code}: {exc.message}", code) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    finally:
        engine.dispose()
    console = Console(width=200)
    if not rows:
        console.print("no owned GPUs of a configured site ([[sites]]) in the window", markup=False)
        return
    seen: set[tuple[str, str]] = set()
    table = Table(*COLUMNS)
    for r in rows:
        if (r.site, r.gpu_model) not in seen:
            seen.add((r.site, r.gpu_model))
            console.print(
                f"{r.site} {r.gpu_model}: allocation {r.allocation_pct}% "
                f"(measured {r.measured_allocation_pct}%), utilization of allocated time "
                f"{r.utilization_pct}% (measured {r.measured_utilization_pct}%, {r.metric.upper()}); "
                f"owning {r.own_fixed} {r.currency}/h fixed + energy "
                f"{r.own_idle_energy}–{r.own_busy_energy} ({r.energy_basis})",
                markup=False,
            )
        table.add_row(
            r.site, r.gpu_model, r.option or "-", r.rate_source, r.provider or "-", r.instance_type or "-",
            r.region or "-", "-" if r.rent_cost_per_gpu_hour is None else f"{r.rent_cost_per_gpu_hour:.4f}",
            "-" if r.own_cost_per_allocated_gpu_hour is None else f"{r.own_cost_per_allocated_gpu_hour:.4f}",
            "-" if r.break_even_allocation_pct is None else f"{r.break_even_allocation_pct:.2f}",
            r.outcome or "-", r.cheaper_now or "-",
        )  # fmt: skip
    console.print(table)
    for detail in dict.fromkeys(r.rate_source_detail for r in rows):
        console.print(f"  source: {detail}", markup=False)  # "[[rent_options]]" is not markup
