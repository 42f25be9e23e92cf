"""``gpu-ledger prune --before YYYY-MM | --keep-days N``: drop ``ledger_hour`` before a month, keep
its rollups. ``--keep-days`` is the retention to run daily (cron, a Kubernetes CronJob): it prunes
the whole months before the one holding "now minus N days".

Registered on the CLI by ``service.cli`` importing this module. See
:mod:`service.ledger.retention` and docs/rollups.md for what stays exact afterwards.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from service.cli import FAILURE_EXIT, ConfigOpt, _settings, app, fail


@app.command()
def prune(
    before: Annotated[
        str | None,
        typer.Option("--before", help="YYYY-MM: drop the ledger's hourly rows before this UTC month."),
    ] = None,
    keep_days: Annotated[
        int | None,
        typer.Option(
            "--keep-days",
            min=1,
            help="Keep at least the last N days of hourly rows: drop the whole months before the one "
            "holding now minus N days (instead of --before).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be dropped, change nothing.")
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Drop ledger_hour rows (whole monthly partitions on PostgreSQL) before --before, or before the
    month holding now minus --keep-days; the daily and group rollups keep those days, and those
    days can no longer be re-ingested or re-priced."""
    from service.db import MigrationError, make_engine, migrate
    from service.ledger.retention import boundary_keeping, parse_month
    from service.ledger.retention import prune as run_prune

    if (before is None) == (keep_days is None):
        raise fail("give one of --before YYYY-MM or --keep-days N")
    option = "--before" if before is not None else "--keep-days"
    try:
        cutoff = (
            parse_month(before)
            if before is not None
            else boundary_keeping(keep_days or 0, dt.datetime.now(dt.UTC))
        )
    except ValueError as exc:
        raise fail(f"{option}: {exc}") from None
    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        migrate(engine)
        with engine.connect() as conn, conn.begin() as tx:
            try:
                result = run_prune(conn, cutoff)
            except ValueError as exc:
                raise fail(f"{option}: {exc}") from None
            if dry_run:
                tx.rollback()
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    finally:
        engine.dispose()
    verb = "would drop" if dry_run else "dropped"
    parts = f" ({len(result.partitions_dropped)} monthly partitions)" if result.partitions_dropped else ""
    typer.echo(
        f"{verb} {result.rows_deleted:,} hourly ledger rows and {result.segments_deleted:,} day segments "
        f"before {cutoff:%Y-%m}{parts}; "
        "ledger_day and the group rollups keep those days; "
        f"{verb} {result.workload_facts_deleted:,} workload attribution facts last reported before then"
    )
