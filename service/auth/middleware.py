"""The ASGI middleware that makes every request name its caller.

Every path except ``/healthz`` and ``/readyz`` needs a caller (:class:`Authenticator`); the caller
is stored at ``scope[PRINCIPAL_KEY]``. Open too, as they hold no data: a browser's GET of the
GraphiQL page on ``/graphql`` and its files (:mod:`service.api.graphiql`); a GET of the dashboard
at ``/`` and its files under ``/static/dashboard/`` and ``/static/vendor/`` (:mod:`service.web.dashboard`),
whose numbers come from ``/graphql`` with the user's token. Refusals:

* 401 ``UNAUTHENTICATED`` (with ``WWW-Authenticate: Bearer``): no, malformed, unknown, revoked or
  expired credential; a JWT that fails its checks.
* 403 ``FORBIDDEN``: a caller without the scope the path needs (``/graphql``: some read scope;
  ``/metrics``: ``metrics`` or ``admin``), or a JWT whose claim maps to no scope.
* 503 ``AUTH_UNAVAILABLE``: the token table or the issuer's keys can't be read right now.

On ``/graphql`` the body is GraphQL-shaped (``{"data": null, "errors": [{"message", "extensions":
{"code"}}]}``) so GraphQL clients show it; elsewhere it is ``{"error": message, "code": code}``.
The push endpoint checks its own callers (it still accepts the agent connectors' configured
tokens): it gets the caller when the credential is valid, else the refusal at
``scope[AUTH_FAILURE_KEY]``. Pure ASGI (not ``BaseHTTPMiddleware``): the body is never read here,
and streaming is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.graphiql import is_graphiql_asset, is_graphiql_page
from service.auth.audit import audit
from service.auth.authenticate import FORBIDDEN, Authenticator, AuthFailure
from service.auth.principal import PRINCIPAL_KEY, Principal
from service.web.dashboard import is_dashboard_shell

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
GRAPHQL_PATH = "/graphql"
REALM = 'Bearer realm="gpu-ledger"'
#: Where a self-checking path finds why the credential was refused (an :class:`AuthFailure`).
AUTH_FAILURE_KEY = "gpu_ledger.auth_failure"

#: What a caller needs for a path: ``None`` when allowed, else the refusal message.
Requirement = Callable[[Principal], str | None]


def needs_read(principal: Principal) -> str | None:
    if principal.can_read:
        return None
    return "this needs a read scope (read, read:project:NAME or read:team:NAME)"


def needs_metrics(principal: Principal) -> str | None:
    return None if principal.can_scrape_metrics else "this needs the metrics scope"


DEFAULT_REQUIREMENTS: Mapping[str, Requirement] = {GRAPHQL_PATH: needs_read, "/metrics": needs_metrics}


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


def _www_authenticate(failure: AuthFailure, had_credential: bool) -> str | None:
    if failure.status == 403:
        return f'{REALM}, error="insufficient_scope"'
    if failure.status == 401:
        return f'{REALM}, error="invalid_token"' if had_credential else REALM
    return None


class AuthMiddleware:
    """See the module docstring. ``self_checking`` paths get the caller when there is one and are
    never refused here; ``requirements`` maps paths to the scope check they need."""

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        *,
        open_paths: frozenset[str] = OPEN_PATHS,
        self_checking: frozenset[str] = frozenset(),
        requirements: Mapping[str, Requirement] = DEFAULT_REQUIREMENTS,
    ):
        self.app, self.authenticator = app, authenticator
        self.open_paths, self.self_checking, self.requirements = open_paths, self_checking, requirements

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        if is_dashboard_shell(scope):  # the dashboard's page and files: code, no data
            await self.app(scope, receive, send)
            return
        if is_graphiql_asset(scope["path"]) or (scope["path"] == GRAPHQL_PATH and is_graphiql_page(scope)):
            # GraphiQL's page and files: code without data (its queries come back through here)
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        header = Headers(scope=scope).get("authorization")
        try:
            # Without a header there is nothing to look up: no thread hop.
            principal = (
                await run_in_threadpool(self.authenticator.authenticate, header)
                if header
                else self.authenticator.authenticate(header)
            )
            need = self.requirements.get(path)
            problem = need(principal) if need is not None and path not in self.self_checking else None
            if problem is not None:
                raise AuthFailure(403, FORBIDDEN, problem, principal.name)
        except AuthFailure as failure:
            if path in self.self_checking:
                scope[AUTH_FAILURE_KEY] = failure
                await self.app(scope, receive, send)
                return
            audit(
                "refused",
                failure.code,
                caller=failure.caller,
                path=path,
                method=scope.get("method"),
                client=_client(scope),
                reason=failure.message,
            )
            await self._refuse(scope, receive, send, failure, bool(header))
            return
        scope[PRINCIPAL_KEY] = principal
        if principal.is_admin:
            audit(
                "admin.call",
                "ok",
                caller=principal.name,
                caller_kind=principal.kind,
                scopes=principal.scopes,
                path=path,
                method=scope.get("method"),
                client=_client(scope),
            )
        await self.app(scope, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, failure: AuthFailure, had_credential: bool
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": failure.message[:120]})
            return
        body: dict[str, Any]
        if scope["path"] == GRAPHQL_PATH:
            error = {"message": failure.message, "extensions": {"code": failure.code}}
            body = {"data": None, "errors": [error]}
        else:
            body = {"error": failure.message, "code": failure.code}
        headers: dict[str, str] = {}
        challenge = _www_authenticate(failure, had_credential)
        if challenge:
            headers["WWW-Authenticate"] = challenge
        if failure.status == 503:
            headers["Retry-After"] = "5"
        await JSONResponse(body, status_code=failure.status, headers=headers)(scope, receive, send)
