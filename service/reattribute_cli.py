"""``gpu-ledger reattribute --start ISO --end ISO``: the current ``[[attribution]]`` rules applied to
the stored ledger (:mod:`service.attribution.reattribute`, docs/attribution.md).

Registered on the CLI by ``service.cli`` importing this module.
"""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli import FAILURE_EXIT, ConfigOpt, _settings, _utc_arg, app, fail
from service.timeutil import ceil_hour, floor_hour


@app.command()
def reattribute(
    start: Annotated[str, typer.Option(help="Window start, ISO 8601 UTC (floored to the hour).")],
    end: Annotated[str, typer.Option(help="Window end, ISO 8601 UTC (ceiled to the hour).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would change, change nothing.")
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Re-apply the configured [[attribution]] rules to ledger hours [START, END) from the facts kept
    at ingest; rollups are rebuilt where an owner changed. Idempotent: a second run changes nothing."""
    from service.attribution.reattribute import reattribute as run
    from service.db import MigrationError, make_engine, migrate
    from service.ledger.retention import PrunedHistory
    from service.progress import ChunkProgress

    start_utc, end_utc = _utc_arg("--start", start), _utc_arg("--end", end)
    if end_utc <= start_utc:
        raise fail(f"--end {end_utc.isoformat()} must be after --start {start_utc.isoformat()}")
    aligned = floor_hour(start_utc), ceil_hour(end_utc)
    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        migrate(engine)
        with ChunkProgress("reattribute") as progress:
            progress.set_window(*aligned)
            result = run(engine, settings.attribution, *aligned, on_day=progress, dry_run=dry_run)
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    except PrunedHistory as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    finally:
        engine.dispose()
    verb, would = ("would reattribute", "would be ") if dry_run else ("reattributed", "")
    typer.echo(
        f"{verb} {result.start.isoformat()} – {result.end.isoformat()} with "
        f"{len(settings.attribution)} rule(s): {result.owners_changed:,} of {result.owners:,} owners "
        f"{would}changed, {result.rows_changed:,} hourly rows {would}rewritten, "
        f"{result.days_rebuilt:,} days {would}rebuilt"
    )
