"""Helpers of the dashboard tests: open a page the way a user does, read numbers off its DOM, and
format the server's numbers the way the page must show them."""

from __future__ import annotations

import json
import os
import tempfile
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from browser.conftest import WINDOW, LiveServer


def screenshots_dir() -> Path:
    """Where the pages are photographed: docs/screenshots/ under ``scripts/screenshots``
    (``GPU_LEDGER_SCREENSHOTS``), else a scratch folder, so a test run leaves the tree unchanged."""
    chosen = os.environ.get("GPU_LEDGER_SCREENSHOTS")
    folder = Path(chosen) if chosen else Path(tempfile.gettempdir()) / "gpu-ledger-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


TOKEN_KEY = "gpu-ledger.token"  # api.js's sessionStorage key (GraphiQL's too)
#: The dashboard's URL window for the demo's week (whole UTC days, end exclusive).
DAYS = {"start": WINDOW["start"][:10], "end": WINDOW["end"][:10]}


def sign_in(page: Any, server: LiveServer) -> None:
    """Puts the read token where the dashboard keeps it, before any page script runs."""
    # Only on the service's pages: about:blank has no storage (reading it throws).
    page.add_init_script(
        f"if (location.origin === {json.dumps(server.url)}) "
        f"sessionStorage.setItem({json.dumps(TOKEN_KEY)}, {json.dumps(server.token)})"
    )


def open_view(page: Any, server: LiveServer, query: str, state: str = "ready") -> None:
    page.goto(f"{server.url}/?{query}")
    wait_for(page, state)


def wait_for(page: Any, state: str = "ready") -> None:
    page.wait_for_selector(f"#content[data-state={state}]", timeout=30_000)


def values(page: Any, table: str, metric: str) -> dict[str, str]:
    """``{row key: data-value}`` of one column of one table."""
    result: dict[str, str] = page.eval_on_selector_all(
        f'[data-table="{table}"] tbody tr',
        """(rows, metric) => Object.fromEntries(rows.map((r) => {
            const cell = r.querySelector(`[data-metric="${metric}"]`);
            return [r.dataset.key, cell ? cell.dataset.value : null];
        }))""",
        metric,
    )
    return result


def texts(page: Any, table: str, metric: str) -> dict[str, str]:
    """``{row key: shown text}`` of one column of one table."""
    result: dict[str, str] = page.eval_on_selector_all(
        f'[data-table="{table}"] tbody tr',
        """(rows, metric) => Object.fromEntries(rows.map((r) => {
            const cell = r.querySelector(`[data-metric="${metric}"]`);
            return [r.dataset.key, cell ? cell.textContent.trim() : null];
        }))""",
        metric,
    )
    return result


def keys(page: Any, table: str) -> list[str]:
    found: list[str] = page.eval_on_selector_all(
        f'[data-table="{table}"] tbody tr', "(rows) => rows.map((r) => r.dataset.key)"
    )
    return found


def usd(amount: Decimal | str) -> str:
    """How the page shows an amount of USD: to the cent, half away from zero, grouped."""
    cents = Decimal(amount).quantize(Decimal("0.01"), ROUND_HALF_UP)
    return f"{'-' if cents < 0 else ''}${abs(cents):,}"


def one_decimal(value: float) -> str:
    # Decimal(float) is the double's exact value: rounded half up as Intl.NumberFormat does.
    return f"{Decimal(value).quantize(Decimal('0.1'), ROUND_HALF_UP):,}"


def hours(value: float) -> str:
    return f"{one_decimal(value)} GPU-h"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{one_decimal(value)} %"


def money_value(amounts: dict[str, Decimal]) -> str:
    """The data-value of a money cell: ``"USD 1.000000000; EUR …"`` in first-seen currency order."""
    return "; ".join(f"{c} {a:.9f}" for c, a in amounts.items() if not (c == "XXX" and a == 0))


def sum_money(rows: list[dict[str, Any]], field: str) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    for row in rows:
        money = row[field]
        totals[money["currency"]] = totals.get(money["currency"], Decimal(0)) + Decimal(money["amount"])
    return totals


def screenshot(page: Any, name: str) -> None:
    page.screenshot(path=str(screenshots_dir() / f"{name}.png"), full_page=True)
