"""Get a database ready for the configuration: schema at head, prices and connectors recorded."""

from __future__ import annotations

from sqlalchemy import Engine

from service.db import migrate, session_scope
from service.ledger import version as ledger_version
from service.scheduler import sync_connector_states
from service.settings import Settings


def sync_config(engine: Engine, settings: Settings) -> None:
    """Write the configured rate cards and FX rates, and a state row for every connector.

    Rate cards are replaced wholesale (the config is their source of truth); FX rates are upserted.
    """
    from service.pricing.fx import sync_fx_rates
    from service.pricing.rates import sync_rate_cards

    with session_scope(engine) as session:
        sync_rate_cards(session, settings.rate_cards)
        sync_fx_rates(session, settings.fx_rates)
        ledger_version.bump_session(session)  # rate cards and FX rates change answers
    sync_connector_states(engine, settings.connectors)


def prepare(engine: Engine, settings: Settings) -> None:
    """Migrate to head, close the runs of processes that died as ABORTED, then :func:`sync_config`.
    Safe on every start."""
    from service.runs import abort_orphaned_runs

    migrate(engine)
    abort_orphaned_runs(engine)
    sync_config(engine, settings)
