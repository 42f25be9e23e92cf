"""Fixtures of the browser tests: the demo fleet served live, and headless Chromium pages that fail
their test on a console error or warning, an uncaught exception, or a request leaving 127.0.0.1.

* ``live_server`` (session) — ``create_app`` under uvicorn in a thread on 127.0.0.1 and a free port,
  over a SQLite database holding :data:`DEMO_DAYS` days of the ``serve --demo`` fleet. Authentication
  is on (no anonymous read): ``live_server.token`` is a ``read`` token, ``live_server.gql`` asks the
  same server's GraphQL API with it, so a page's numbers are checked against that server's answers.
  The database is built once per test session and shared by the xdist workers (a file lock: the
  first worker builds it, the others wait and copy it).
* ``browser`` (session) — Debian's ``/usr/bin/chromium`` driven by Playwright (no browser download).
  Skipped when Chromium or Playwright is missing, unless ``GPU_LEDGER_REQUIRE_BROWSER=1`` (``.ci/run``
  sets it): then missing is a failure.
* ``page`` — a fresh browser context and page. Every request is routed here: one whose host is not
  127.0.0.1 is aborted and recorded; console errors and warnings and page errors are recorded too.
  After the test, any of them fails it (:func:`check_clean`; tests may call it earlier).

Every test under tests/browser is marked ``slow`` (the session set-up loads a week of the demo).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from browser.demo_bills import write_bills
from built_once import built_once
from sqlalchemy import Engine

from connectors.registry import default_registry
from service.app import create_app
from service.auth.tokens import TokenStore
from service.billing.ingest import ingest_billing
from service.bootstrap import sync_config
from service.db import make_engine, migrate
from service.demo import with_demo
from service.ledger.ingest import ingest_window
from service.settings import Settings

UTC = dt.UTC
CHROMIUM = os.environ.get("GPU_LEDGER_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("GPU_LEDGER_REQUIRE_BROWSER", "") not in ("", "0", "false")
#: A week from a Thursday: every weekday of the hour-of-week heatmap, two ISO weeks for the trend.
DEMO_START = dt.datetime(2025, 8, 28, tzinfo=UTC)
DEMO_DAYS = 7
DEMO_END = DEMO_START + dt.timedelta(days=DEMO_DAYS)
#: The window the dashboard tests ask for (the URL's ``start``/``end``).
WINDOW = {"start": "2025-08-28T00:00:00Z", "end": "2025-09-04T00:00:00Z"}
ALLOWED_HOST = "127.0.0.1"
#: Schemes that never touch the network.
LOCAL_SCHEMES = frozenset({"data", "blob", "about"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)


# --- the server -----------------------------------------------------------------------------------


def _demo_settings(url: str) -> Settings:
    # The demo's connector, site and rate cards, with anonymous read off: pages must send the token.
    return with_demo(Settings(database_url=url, auth={"anonymous_read": False}))


def _build_demo_database(path: Path) -> None:
    url = f"sqlite:///{path}"
    migrate(url)
    engine = make_engine(url)
    try:
        settings = _demo_settings(url)
        sync_config(engine, settings)
        connector = default_registry().build(settings.connector("demo"))
        # The run's clock: six hours after the week (the connectors page and its screenshot stay put).
        ran_at = DEMO_END + dt.timedelta(hours=6)
        ingest_window(
            engine, "demo", connector, DEMO_START, DEMO_END, sites=settings.sites, clock=lambda: ran_at
        )
        # A week of AWS bills (FOCUS) through the billing importer, which reprices those instances.
        bills = write_bills(path.parent / f"{path.stem}-bills", DEMO_START, DEMO_DAYS)
        focus = default_registry().build(
            default_registry().validate({"name": "aws-bills", "type": "focus", "path": str(bills)})
        )
        result = ingest_billing(engine, "aws-bills", focus, DEMO_START, DEMO_END, clock=lambda: ran_at)
        assert result.status == "OK" and result.refused == 0, result
        with engine.connect() as conn:  # fold the WAL in: the file alone is the database
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def demo_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite URL of this worker's copy of the demo database (built once for all workers)."""
    template = built_once(
        tmp_path_factory, f"browser-demo-{DEMO_START:%Y%m%d}-{DEMO_DAYS}d.db", _build_demo_database
    )
    mine = tmp_path_factory.mktemp("browser-demo") / "ledger.db"
    shutil.copyfile(template, mine)
    return f"sqlite:///{mine}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((ALLOWED_HOST, 0))
        port: int = s.getsockname()[1]
        return port


@dataclasses.dataclass(frozen=True)
class LiveServer:
    """The running service: its base URL, a ``read`` token, and its engine."""

    url: str
    token: str
    engine: Engine
    settings: Settings

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The server's ``data`` for ``query`` asked with the token (errors fail the test)."""
        r = httpx.post(
            f"{self.url}/graphql",
            json={"query": query, "variables": variables or {}},
            headers=self.headers,
            timeout=60,
        )
        body: dict[str, Any] = r.json()
        assert r.status_code == 200 and "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data


@pytest.fixture(scope="session")
def live_server(demo_database: str) -> Iterator[LiveServer]:
    engine = make_engine(demo_database)
    settings = _demo_settings(demo_database)
    token, _ = TokenStore(engine).create("browser-tests", ["read"])
    app = create_app(settings, engine)
    port = _free_port()
    config = uvicorn.Config(app, host=ALLOWED_HOST, port=port, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield LiveServer(f"http://{ALLOWED_HOST}:{port}", token, engine, settings)
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()


# --- the browser ----------------------------------------------------------------------------------


def _browser_missing(reason: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(f"headless Chromium required (GPU_LEDGER_REQUIRE_BROWSER) but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's build) under Playwright, one per test module: Playwright's sync
    API keeps an asyncio loop running in this thread while it is open, and a test of another module
    that calls ``asyncio.run`` (the scheduler's) must not share an xdist worker with it."""
    if not os.access(CHROMIUM, os.X_OK):
        _browser_missing(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _browser_missing("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclasses.dataclass
class Guard:
    """What a page did that fails its test."""

    console: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    outside: list[str] = dataclasses.field(default_factory=list)

    def problems(self) -> list[str]:
        return (
            [f"console {c}" for c in self.console]
            + [f"page error: {e}" for e in self.errors]
            + [f"request leaving {ALLOWED_HOST} (blocked): {u}" for u in self.outside]
        )


def _route(guard: Guard) -> Any:
    def handle(route: Any) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in LOCAL_SCHEMES or (
            parts.scheme in ("http", "https") and parts.hostname == ALLOWED_HOST
        ):
            route.continue_()
            return
        guard.outside.append(url)
        route.abort("blockedbyclient")

    return handle


def check_clean(page: Any) -> None:
    """Fail when ``page`` logged a console error or warning, threw, or asked for another host."""
    problems = page.guard.problems()
    assert not problems, "\n".join(problems)


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (its own context: no storage shared with other tests), 1400×900, guarded (see
    the module docstring); ``page.guard`` holds what it recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, service_workers="block")
    guard = Guard()
    context.route("**/*", _route(guard))
    tab = context.new_page()
    tab.guard = guard

    def on_console(message: Any) -> None:
        if message.type in ("error", "warning"):
            location = message.location or {}
            guard.console.append(f"{message.type}: {message.text} ({location.get('url', '')})")

    tab.on("console", on_console)
    tab.on("pageerror", lambda exc: guard.errors.append(str(exc)))
    try:
        yield tab
        check_clean(tab)
    finally:
        context.close()
