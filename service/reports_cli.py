"""``gpu-ledger report --period 2026-11 [--project P | --team T] --format html|csv``: a period's
cost report written to a file or stdout (:mod:`service.reports`; docs/reports.md).

Registered on the CLI by ``service.cli`` importing this module. Read with full access, like the
other commands; ``--project`` / ``--team`` narrow it to what a token scoped to them would see.
Mistakes in the arguments exit 2 with one line naming the option; database trouble exits 1.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from service.cli import FAILURE_EXIT, ConfigOpt, _settings, app, database_failed, fail

FORMATS = ("html", "csv")


@app.command()
def report(
    period: Annotated[
        str, typer.Option("--period", help="YYYY-MM (a UTC calendar month) or YYYY-Www (an ISO week).")
    ],
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="html or csv (default: from the --output suffix).", show_default=False),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="File to write (replaced atomically); default stdout.", show_default=False
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Only this project's rows.", show_default=False)
    ] = None,
    team: Annotated[
        str | None, typer.Option("--team", help="Only this team's rows.", show_default=False)
    ] = None,
    currency: Annotated[
        str | None,
        typer.Option(
            "--currency", help="Convert every amount to this ISO 4217 currency.", show_default=False
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Write the cost report of a month or week: cost, effective cost, idle, top idle workloads,
    daily trend, reconciliation."""
    from sqlalchemy.exc import SQLAlchemyError

    from service.analytics.errors import QueryError
    from service.db import make_engine
    from service.reports.build import ReportError, Scope, build_report, software_version
    from service.reports.period import PeriodError, parse_period
    from service.telemetry import utc_now

    chosen = (fmt or (output.suffix.lstrip(".") if output is not None else "")).lower()
    if chosen not in FORMATS:
        shown = (fmt or "")[:20]
        raise fail(f"--format {shown!r}: use html or csv (or an --output ending in .html or .csv)")
    try:
        which = parse_period(period)
        scope = Scope(project=project, team=team)
    except PeriodError as exc:
        raise fail(f"--period: {exc}") from None
    except ReportError as exc:
        raise fail(f"{exc.argument}: {exc.message}") from None
    if currency is not None and len(currency) > 16:  # noqa: PLR2004
        raise fail(f"--currency {currency[:16]!r}…: not an ISO 4217 code (three letters, e.g. EUR)")
    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            built = build_report(
                conn,
                which,
                scope,
                currency,
                generated_at=utc_now(),
                software_version=software_version(),
                gpu_cost_share=settings.gpu_cost_share,
                ledger_threshold_pct=settings.idle_threshold_pct,
            )
    except ReportError as exc:
        raise fail(f"{exc.argument}: {exc.message}") from None
    except QueryError as exc:
        raise fail(f"{exc.code}: {exc.message}", FAILURE_EXIT) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    finally:
        engine.dispose()
    text = _render(built, chosen)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        _write_atomically(text, output)
    except OSError as exc:
        raise fail(f"--output {output}: {exc.strerror or exc}", FAILURE_EXIT) from None
    typer.echo(
        f"report {which.label} ({scope.label}): {chosen}, {output.stat().st_size} bytes → {output}", err=True
    )


def _render(built: object, fmt: str) -> str:
    from service.reports.build import Report

    assert isinstance(built, Report)
    if fmt == "html":
        from service.reports.html import render_html

        return render_html(built)
    from service.reports.csv import render_csv

    return render_csv(built)


def _write_atomically(text: str, output: Path) -> None:
    """Into a temporary file beside ``output``, renamed over it: never a half-written report."""
    directory = output.parent if str(output.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as sink:
            sink.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
