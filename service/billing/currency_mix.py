"""Bills in several currencies with no FX rate between them: imported, but said.

A line keeps the currency its export gave it (money is never converted at import). A connector
whose files mix currencies can still be summed only where ``[[fx_rates]]`` (the ``fx_rate`` table)
has the pairs, so the import names the currencies it met and the pairs it lacks — in the ingest
summary, on the file (``billing_file.notice``) and on the connector (``connector_state.notice``) —
instead of leaving the operator to find out from a failing cost query.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl
from sqlalchemy import Connection, select, update

from service.dbtypes import table_of
from service.models import ConnectorState, FxRate

_FX = table_of(FxRate)
_STATES = table_of(ConnectorState)


def count(lines: pl.DataFrame, into: dict[str, int]) -> None:
    """Adds the lines of each currency of ``lines`` to ``into``."""
    if lines.is_empty():
        return
    for currency, n in lines.group_by("currency").len().iter_rows():
        if currency is not None:
            into[currency] = into.get(currency, 0) + n


def fx_pairs(conn: Connection) -> set[tuple[str, str]]:
    """The currency pairs with an FX rate on some day, both ways (a rate converts either way)."""
    pairs = {(str(b), str(q)) for b, q in conn.execute(select(_FX.c.base, _FX.c.quote).distinct())}
    return pairs | {(q, b) for b, q in pairs}


def notice(currencies: Mapping[str, int], pairs: set[tuple[str, str]]) -> str | None:
    """``currencies=USD,EUR (no FX rate for EUR→USD)`` when lines are in several currencies and a
    pair to the main one (the currency of most lines) has no rate; else None."""
    if len(currencies) < 2:
        return None
    ordered = sorted(currencies, key=lambda c: (-currencies[c], c))
    main = ordered[0]
    missing = [c for c in ordered[1:] if (c, main) not in pairs]
    if not missing:
        return None
    lacking = ", ".join(f"{c}→{main}" for c in missing)
    return f"currencies={','.join(ordered)} (no FX rate for {lacking}: add [[fx_rates]])"


def set_connector_notice(conn: Connection, name: str, text: str | None) -> None:
    """The connector's notice is its last run's (a run without one clears it)."""
    conn.execute(update(_STATES).where(_STATES.c.name == name).values(notice=text))
