"""The schema and the ASGI GraphQL app (GraphiQL on ``GET /graphql``: :mod:`service.api.graphiql`).

Resolvers are async and run their database work in Starlette's threadpool (the engine is sync):
see :meth:`service.api.context.ApiContext.read`. Parsing and validation run in worker threads too
(:mod:`service.api.guard`). Before anything runs, the view checks the caller's request rate (429)
and takes one of the ``max_concurrent_queries`` slots (503 when none frees up in time); a body
that is not a JSON object is a 400. Every refusal has the GraphQL error shape and a code.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import orjson
import strawberry
from cross_web import HTTPException
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.types import ExecutionResult

from service.api.alerts import AlertQuery
from service.api.answer_cache import CLEAN_ANSWER_KEY, AnswerCache
from service.api.break_even import BreakEvenQuery
from service.api.context import ApiContext, ApiSettings
from service.api.cost import CostQuery
from service.api.data_quality import DataQualityQuery
from service.api.devices import DeviceQuery
from service.api.errors import BAD_REQUEST, OVERLOADED, RATE_LIMITED, ErrorCodes, LedgerSchema, error_response
from service.api.forecast import ForecastQuery
from service.api.graphiql import graphiql_response, is_graphiql_page
from service.api.guard import LimitedParsing
from service.api.heatmap import HeatmapQuery
from service.api.idle import IdleQuery
from service.api.leaf_lists import LeafListExecutionContext
from service.api.reconciliation import ReconciliationQuery
from service.api.usage import UsageQuery
from service.auth.principal import principal_of
from service.limits.gate import ConcurrencyGate, Overloaded
from service.limits.rate import RateLimiter


@strawberry.type(
    description="GPU Ledger: what GPUs cost and how much work they did, from the hourly GPU-hour ledger."
)
class Query(
    UsageQuery,
    CostQuery,
    IdleQuery,
    DeviceQuery,
    ReconciliationQuery,
    DataQualityQuery,
    ForecastQuery,
    BreakEvenQuery,
    AlertQuery,
    HeatmapQuery,
):
    pass


def build_schema(*, leaf_lists: bool = True) -> LedgerSchema:
    """The API's schema; ``leaf_lists``: complete flat object lists column-wise
    (:mod:`service.api.leaf_lists`; False = graphql-core's field-by-field path, for comparison)."""
    context_class = LeafListExecutionContext if leaf_lists else None
    extensions = [LimitedParsing, ErrorCodes]
    return LedgerSchema(query=Query, extensions=extensions, execution_context_class=context_class)


schema = build_schema()

_JSON_KINDS = {str: "a string", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}


def caller_key(scope: Scope) -> str:
    """Whom a request counts against: the authenticated caller, or an anonymous one's address."""
    principal = principal_of(scope)
    if principal.kind == "anonymous":
        host = (scope.get("client") or ("unknown", 0))[0]
        return f"anonymous@{host}"
    return f"{principal.kind}:{principal.name}"


class LedgerGraphQL(GraphQL[ApiContext, None]):
    """strawberry's ASGI view with our context (the engine and the API settings) and limits."""

    def __init__(self, engine: Engine, settings: ApiSettings, answers: AnswerCache | None = None) -> None:
        super().__init__(schema, graphql_ide=None)  # our GraphiQL, from vendored files: __call__
        self.engine, self.settings, self.answers = engine, settings, answers
        limits = settings.limits
        self.rate = RateLimiter(limits.rate_per_minute, limits.rate_burst)
        self.gate = ConcurrencyGate(limits.max_concurrent_queries, limits.queue_wait_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if is_graphiql_page(scope):  # the page holds no data: served without a caller (auth lets it by)
            await graphiql_response()(scope, receive, send)
            return
        caller = caller_key(scope)
        wait_s = self.rate.take(caller)
        response: Response
        if wait_s > 0:
            retry_s = max(1, math.ceil(wait_s))
            per_minute = self.settings.limits.rate_per_minute
            message = f"more than {per_minute} requests a minute from {caller}: retry in {retry_s} s"
            response = error_response(429, RATE_LIMITED, message, {"Retry-After": str(retry_s)})
        else:
            try:
                request = Request(scope, receive)
                if self.answers is None:
                    response = await self.run(request)
                else:  # the same answer again while the ledger is unchanged (service.api.answer_cache)
                    response = await self.answers.answer(request, principal_of(scope).access, self.run)
            except HTTPException as exc:  # strawberry's refusals: no query, wrong content type…
                response = error_response(exc.status_code, BAD_REQUEST, exc.reason)
            except Overloaded as exc:
                headers = {"Retry-After": str(exc.retry_after_s)}
                response = error_response(503, OVERLOADED, str(exc), headers)
        await response(scope, receive, send)

    def should_render_graphql_ide(self, request: Any) -> bool:
        return False  # GraphiQL is ours (see __call__): any other GET without a query is a 400

    def encode_json(self, data: object) -> bytes:
        """The response as UTF-8 JSON by orjson: a 50,000-row page (~7 MB) encodes in ~10 ms,
        ~15× faster than the stdlib. Same content (non-ASCII as UTF-8 rather than escapes); any
        value orjson refuses (none expected: GraphQL results are JSON types) goes to the stdlib."""
        try:
            return orjson.dumps(data)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            return json.dumps(data, separators=(",", ":")).encode()

    def parse_json(self, data: str | bytes) -> Any:
        """JSON of the body (or of a GET's ``variables``): an object (or a batch list), else 400."""
        try:
            value = json.loads(data)
        except UnicodeDecodeError:
            raise HTTPException(400, "request body is not UTF-8 text") from None
        except (ValueError, RecursionError) as exc:
            raise HTTPException(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(value, (dict, list)):
            kind = _JSON_KINDS.get(type(value), type(value).__name__)
            raise HTTPException(400, f'expected a JSON object like {{"query": "…"}}, got {kind}')
        return value

    async def get_context(self, request: Any, response: Any) -> ApiContext:
        return ApiContext(self.engine, self.settings, request, wire_json=True)

    async def execute_single(  # noqa: PLR0917
        self,
        request: Any,
        request_adapter: Any,
        sub_response: Any,
        context: ApiContext,
        root_value: Any,
        request_data: Any,
    ) -> ExecutionResult:
        async with self.gate.slot():
            # The time limit runs from here: waiting for a slot doesn't count against it.
            context.deadline = time.monotonic() + self.settings.limits.request_timeout_s
            result = await super().execute_single(
                request, request_adapter, sub_response, context, root_value, request_data
            )
        # An answer without errors may be cached; a batch's operations never are (the cache does
        # not key them), so the flag of its last one does not matter.
        request.scope[CLEAN_ANSWER_KEY] = not result.errors
        return result


def build_graphql_app(
    engine: Engine, api_settings: ApiSettings | None = None, answers: AnswerCache | None = None
) -> GraphQL[ApiContext, None]:
    """The GraphQL ASGI app on ``engine`` (mounted at ``/graphql`` by :func:`service.app.create_app`);
    ``answers``: the answer cache its clean answers are kept in (None: no cache)."""
    return LedgerGraphQL(engine, api_settings or ApiSettings(), answers)
