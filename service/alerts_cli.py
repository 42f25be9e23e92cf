"""``gpu-ledger alerts evaluate``: one evaluation of the ``[[alerts]]`` rules now, then the sends the
outbox has due — what ``serve`` does after each connector run — for a deployment that runs its
connectors from cron, or to send what waited for a receiver that is back. It prints what was
announced and sent and what still waits per channel; exit 3 when a send failed or a rule could
not be evaluated (the reason on stderr), 1 when the database could not be used.

Registered on the CLI by ``service.cli`` importing this module (docs/alerts.md).
"""

from __future__ import annotations

import typer

from service.cli import DEGRADED_EXIT, ConfigOpt, _settings, app, fail, migrated_engine

alerts_app = typer.Typer(help="Alert rules: evaluate them once and send what is due.", no_args_is_help=True)
app.add_typer(alerts_app, name="alerts")


@alerts_app.command("evaluate")
def evaluate(config: ConfigOpt = None) -> None:
    """Evaluate every [[alerts]] rule now and send this and earlier evaluations' due announcements;
    print what was announced, sent, and is still pending per channel."""
    from service.alerts.engine import AlertConfig, AlertEngine
    from service.alerts.outbox import pending_by_channel
    from service.alerts.store import FIRING

    settings = _settings(config)
    if not settings.alerts:
        raise fail("no [[alerts]] rule is configured")
    with migrated_engine(settings) as engine:
        result = AlertEngine(engine, AlertConfig.from_settings(settings)).evaluate()
        with engine.connect() as conn:
            pending = pending_by_channel(conn)
    firing = sum(a.state == FIRING for a in result.announced)
    sent = sum(o.sent for o in result.deliveries)
    failed = [o for o in result.deliveries if o.tried and not o.sent]
    untried = sum(not o.tried for o in result.deliveries)
    waiting = ", ".join(f"{channel}: {n}" for channel, n in sorted(pending.items())) or "none"
    typer.echo(
        f"{len(result.announced)} announced ({firing} firing, {len(result.announced) - firing} resolved); "
        f"sent {sent}, failed {len(failed)}, not tried {untried}; pending: {waiting}"
    )
    for o in failed:
        typer.echo(f"send to {o.channel} failed: {o.error}", err=True)
    for rule, error in result.errors.items():
        typer.echo(f"rule {rule} not evaluated: {error}", err=True)
    if failed or result.errors:
        raise typer.Exit(DEGRADED_EXIT)
