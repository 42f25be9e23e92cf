"""The Starlette application: GraphQL API, health, readiness and Prometheus metrics.

Routes are wired explicitly here; nothing registers itself at import time. ``serve`` passes
``run_scheduler=True`` so the connectors' scheduler lives and dies with the app (lifespan).
Node agents push to ``POST /api/v1/batches`` (``service.push``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.agent_source import bound_connectors
from service.alerts.engine import alert_hook
from service.api.graphiql import graphiql_assets
from service.auth.authenticate import Authenticator, build_authenticator
from service.auth.middleware import AuthMiddleware
from service.db import current_revision, head_revision, make_engine
from service.limits.body import BodyLimit, BodySizeLimit, graphql_refusal, plain_refusal
from service.limits.heap import freeze_startup_heap, thaw_heap
from service.logging import get_logger
from service.push import ROUTE as PUSH_ROUTE
from service.push import batches_endpoint
from service.reports.schedule import report_sender
from service.scheduler import Scheduler
from service.scheduler_lease import SchedulerLease
from service.settings import Settings
from service.telemetry import CONTENT_TYPE, Telemetry, utc_now
from service.web.dashboard import dashboard_routes

log = get_logger(__name__)


class HttpMetricsMiddleware:
    """Counts requests and times them per route; unknown paths share the label ``other`` so a
    scanner can't blow up the metric's cardinality."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry, routes: set[str]):
        self.app, self.telemetry, self.routes = app, telemetry, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        method, started = scope["method"], time.perf_counter()
        # 500 if the app raises before answering; 499 (nginx's "client closed request") if it
        # returns without answering: the client left mid-body and there was no one to answer.
        status: int | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        failed = True
        try:
            await self.app(scope, receive, send_wrapper)
            failed = False
        finally:
            if status is None:
                status = 500 if failed else 499
            self.telemetry.http_latency.labels(route, method).observe(time.perf_counter() - started)
            self.telemetry.http_requests.labels(route, method, str(status)).inc()


class _AsgiEndpoint:
    """Marks an ASGI callable as an app for ``Route`` (a plain function would be taken for a
    request handler)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _readiness(engine: Engine) -> tuple[bool, str]:
    try:
        current = current_revision(engine)
    except Exception as exc:  # noqa: BLE001  (any failure to reach the DB means "not ready")
        return False, f"database unreachable: {type(exc).__name__}"
    head = head_revision()
    if current != head:
        return False, f"database at revision {current or 'none'}, expected {head}: run `gpu-ledger migrate`"
    return True, f"database at revision {head}"


def _default_graphql_app(engine: Engine, settings: Settings, telemetry: Telemetry) -> tuple[ASGIApp, Any]:
    """The GraphQL app and its answer cache (``service.api.answer_cache``)."""
    from service.api.answer_cache import AnswerCache
    from service.api.graphql import build_graphql_app, schema

    answers = AnswerCache(engine, settings.answer_cache, settings.limits, schema._schema)
    telemetry.registry.register(answers.collector())
    return build_graphql_app(engine, settings.api_settings(), answers if answers.enabled else None), answers


def create_app(
    settings: Settings,
    engine: Engine | None = None,
    *,
    run_scheduler: bool = False,
    scheduler: Scheduler | None = None,
    graphql_app: ASGIApp | None = None,
    telemetry: Telemetry | None = None,
    authenticator: Authenticator | None = None,
    clock: Callable[[], dt.datetime] = utc_now,
) -> Starlette:
    """The app on ``engine`` (default: one on ``settings.database_url``, disposed at shutdown).

    ``run_scheduler`` runs a :class:`Scheduler` of ``settings.connectors`` (or ``scheduler``)
    with the app while this process holds the database's scheduler lock
    (``service.scheduler_lease``); ``graphql_app``, ``telemetry`` and ``authenticator`` replace
    the defaults (tests);
    ``clock`` is the push endpoint's (sample times are checked against it).
    Every path but ``/healthz`` and ``/readyz`` needs a caller (``service.auth.middleware``;
    ``settings.auth`` says who may call); the push endpoint checks its callers itself.
    """
    owns_engine = engine is None
    engine = engine if engine is not None else make_engine(settings.database_url)
    telemetry = telemetry or Telemetry(engine)
    answers = None
    if graphql_app is not None:
        gql = graphql_app
    else:
        gql, answers = _default_graphql_app(engine, settings, telemetry)

    def build_scheduler() -> Scheduler:
        return Scheduler(
            engine,
            settings.connectors,
            sites=settings.sites,
            idle_threshold_pct=settings.idle_threshold_pct,
            attribution_rules=settings.attribution,
            catalog=settings.instance_catalog(),
            gpu_cost_share=settings.gpu_cost_share,
            after_ingest=settings.reprice_from_bills(),
            after_run=alert_hook(engine, settings),
            telemetry=telemetry,
            connectors=bound_connectors(settings.connectors, engine),  # they read this database
            jobs=[job for job in (report_sender(engine, settings),) if job is not None],  # [[reports]]
        )

    # The scheduler runs only in the process holding the database's scheduler lock (one of
    # `serve --workers N`, or of two `serve`s): service.scheduler_lease.
    lease = None
    if run_scheduler:
        lease = SchedulerLease(engine, (lambda: scheduler) if scheduler is not None else build_scheduler)
        telemetry.registry.register(lease.collector())

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_request: Request) -> Response:
        ready, reason = await run_in_threadpool(_readiness, engine)
        body: dict[str, Any] = {"status": "ready" if ready else "not ready", "reason": reason}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        # The watermark collector queries the database: keep it off the event loop.
        return Response(await run_in_threadpool(telemetry.render), media_type=CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if answers is not None:
            await answers.start()
        if lease is not None:
            await lease.start()
        freeze_startup_heap()  # short GC pauses under load (service.limits.heap)
        try:
            yield
        finally:
            thaw_heap()
            if lease is not None:
                await lease.stop()
            if answers is not None:
                await answers.close()
            if owns_engine:
                engine.dispose()

    push_batches = batches_endpoint(engine, settings.connectors, telemetry, clock)
    from service.api.export import export_paths, export_route  # loads the analytics, as GraphQL does

    routes = [
        Route("/graphql", _AsgiEndpoint(gql), methods=["GET", "POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route(PUSH_ROUTE, push_batches, methods=["POST"]),
        export_route(engine, settings),  # GET /export/{question}.{format}: service.api.export
        *dashboard_routes(),  # GET / and its files: the dashboard (service.web.dashboard)
    ]
    app = Starlette(routes=[*routes, graphiql_assets()], lifespan=lifespan)  # GraphiQL's vendored files
    authenticator = authenticator or build_authenticator(settings.auth, engine)
    # Added before the metrics middleware, so it runs inside it: refusals are counted too.
    app.add_middleware(AuthMiddleware, authenticator=authenticator, self_checking=frozenset({PUSH_ROUTE}))
    # Outside auth: an oversized body is refused before anything else looks at the request.
    body_limits = {
        "/graphql": BodyLimit(settings.limits.max_body_b, graphql_refusal),
        PUSH_ROUTE: BodyLimit(settings.limits.max_push_body_b, plain_refusal),
    }
    app.add_middleware(BodySizeLimit, limits=body_limits)
    # Export paths are labelled one by one (a finite set); any other path stays "other".
    labels = {r.path for r in routes} | export_paths()
    app.add_middleware(HttpMetricsMiddleware, telemetry=telemetry, routes=labels)
    app.state.engine, app.state.telemetry, app.state.scheduler = engine, telemetry, scheduler
    app.state.scheduler_lease = lease
    app.state.authenticator = authenticator
    return app
