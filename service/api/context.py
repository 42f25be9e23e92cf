"""API settings and the per-request context resolvers receive as ``info.context``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from service.analytics.access import Access
from service.analytics.errors import QueryError
from service.analytics.window import pruned_hours_refused
from service.auth.principal import principal_of
from service.limits import Limits
from service.limits.deadline import DeadlinePassed, is_timeout, sql_deadline
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT
from service.pricing.break_even import Planning

T = TypeVar("T")


@dataclass(frozen=True)
class ApiSettings:
    """Limits of the API.

    ``max_window_days``: longest analytic window (``WINDOW_TOO_LARGE`` above it).
    ``page_size_max``: largest ``first`` of a connection or aggregate (``PAGE_SIZE_TOO_LARGE`` above it).
    ``aggregate_page_size_max``: largest ``first`` of a ledger aggregate (``usage``, ``cost``,
    ``idleWaste``, ``effectiveCost``): they page by key, so a page costs about its own rows; a page
    still runs under the request's time limit (``QUERY_TIMEOUT``).
    ``max_result_rows``: most rows of an aggregate answer without ``first`` (``RESULT_TOO_LARGE``).
    ``idle_threshold_pct``: the threshold the ledger's ``idle_s`` columns were built with (ingest's
    ``idle_threshold_pct``); idle answers at this threshold read those columns directly.
    ``gpu_cost_share``: the part of an instance's bill charged to its GPUs (reconciliation's billed cost).
    ``limits``: the ``[limits]`` table (:class:`service.limits.Limits`).
    ``planning``: breakEven's sites, price catalog and rent options (``Settings.planning``).
    """

    max_window_days: int = 400
    page_size_max: int = 500
    aggregate_page_size_max: int = 50000
    max_result_rows: int = 10000
    idle_threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT
    gpu_cost_share: Decimal = Decimal(1)
    limits: Limits = field(default_factory=Limits)
    planning: Planning = field(default_factory=Planning)


@dataclass
class ApiContext:
    """What a resolver needs: the (sync) engine, the settings, and the HTTP request."""

    engine: Engine
    settings: ApiSettings
    request: Any = field(default=None, repr=False)
    # time.monotonic() at which this request's SQL is cancelled (set when execution starts).
    deadline: float | None = None
    # The result is only written out as JSON by orjson (the HTTP view): large lists may be
    # pre-encoded orjson.Fragments (service.api.leaf_lists); in-process callers get real lists.
    wire_json: bool = False

    @property
    def access(self) -> Access:
        """The rows the caller may read: its principal's scopes (the auth middleware put it in the
        ASGI scope; none there = anonymous = nothing). Every analytic query is run under it."""
        scope = getattr(self.request, "scope", None) or {}
        return principal_of(scope).access

    async def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on a connection in Starlette's threadpool.

        The engine is synchronous; resolvers are async so one slow query never blocks the event loop
        (a sync resolver would run on it under the ASGI view). Statements still running at
        :attr:`deadline` are cancelled by the database (``QUERY_TIMEOUT``).
        """

        def run() -> T:
            # device-level reads of pruned hours fail (HOURS_PRUNED) instead of answering short;
            # the boundary is read only by a query that reads device-level hours
            with (
                self.engine.connect() as conn,
                sql_deadline(conn, self.deadline),
                pruned_hours_refused(conn),
            ):
                return work(conn)

        try:
            return await run_in_threadpool(run)
        except (DBAPIError, DeadlinePassed) as exc:
            if not is_timeout(exc):
                raise
            limit_s = self.settings.limits.request_timeout_s
            raise QueryError(
                f"query stopped after the time limit of {limit_s:g} s: narrow the window, group by "
                "fewer dimensions or page with first/after",
                code="QUERY_TIMEOUT",
            ) from None
