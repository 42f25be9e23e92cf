"""The demo's November report in the real headless Chromium (Debian's, under Playwright): it shows
without a console error or warning, asks for nothing at all (not even from 127.0.0.1: the file is
self-contained), draws its charts from inline SVG, and is photographed as docs/screenshots/report.png
(under ``GPU_LEDGER_SCREENSHOTS``, as the dashboard's pages are; a scratch folder otherwise)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from browser.conftest import browser, check_clean, page  # noqa: F401  (fixtures)
from browser.dashboard import screenshot
from sqlalchemy import Engine

from service.reports.build import build_report
from service.reports.html import render_html
from service.reports.period import parse_period

pytestmark = pytest.mark.slow


def test_the_november_report_renders_offline(page: Any, november: Engine) -> None:  # noqa: F811
    with november.connect() as conn:
        report = build_report(
            conn,
            parse_period("2026-11"),
            generated_at=dt.datetime(2026, 12, 1, 7, tzinfo=dt.UTC),
            software_version="0.1.0",
        )
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.set_content(render_html(report), wait_until="load")
    assert requests == []  # nothing fetched: CSS inline, charts inline SVG, system fonts
    assert page.evaluate("document.scripts.length") == 0
    total = page.get_attribute("#total-cost", "data-value")
    assert total is not None and Decimal(total) == report.totals.cost
    assert page.inner_text("#total-cost") == f"{report.totals.cost.quantize(Decimal('0.01')):,} USD"
    # One working and one idle bar per day of November, drawn with a size.
    bars = page.eval_on_selector_all("#daily-chart rect", "(rs) => rs.map((r) => r.getBBox().height)")
    assert len(bars) == 60 and sum(1 for h in bars if h > 0) >= 30
    box = page.locator("#daily-chart").bounding_box()
    assert box is not None and box["width"] > 700 and box["height"] > 200
    rows = page.eval_on_selector_all("#projects tr[data-project]", "(rs) => rs.length")
    assert rows == len(report.projects) >= 5
    assert page.locator("#reconciliation").count() == 1
    check_clean(page)
    screenshot(page, "report")
