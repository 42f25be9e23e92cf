"""GraphQL errors with a machine-readable ``extensions.code``; never a stack trace.

* :class:`~service.analytics.errors.QueryError` raised by a resolver: its message and ``code``
  (``INVALID_WINDOW``, ``MISSING_FX_RATE``, …).
* Parse, validation and argument-coercion errors (no ``path``): their message, code
  ``GRAPHQL_VALIDATION_FAILED``.
* Anything else is a bug: the client sees ``internal error`` with code ``INTERNAL``; the
  exception is logged with its traceback on the server.

Requests refused before GraphQL runs get an HTTP status and the same body shape
(:func:`error_response`): ``BAD_REQUEST`` (400: not JSON, not an object, no query, wrong content
type), ``PAYLOAD_TOO_LARGE`` (413), ``RATE_LIMITED`` (429) and ``OVERLOADED`` (503), the last two
with ``Retry-After``. The document limits (``QUERY_TOO_DEEP``, ``TOO_MANY_ALIASES``,
``TOO_MANY_TOKENS``) and ``QUERY_TIMEOUT`` are GraphQL errors of a 200 answer
(:mod:`service.api.guard`, :meth:`service.api.context.ApiContext.read`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from graphql import GraphQLError
from starlette.responses import JSONResponse
from strawberry import Schema
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionContext

from service.analytics.errors import QueryError

log = logging.getLogger("gpu_ledger.api")

INTERNAL = "INTERNAL"
VALIDATION = "GRAPHQL_VALIDATION_FAILED"
BAD_REQUEST = "BAD_REQUEST"
RATE_LIMITED = "RATE_LIMITED"
OVERLOADED = "OVERLOADED"


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A request refused before execution: ``{"errors": [{"message", "extensions": {"code"}}]}``."""
    body = {"errors": [{"message": clip(message), "extensions": {"code": code}}]}
    return JSONResponse(body, status_code=status, headers=headers)


#: Longest message a client gets back: graphql-core quotes the offending value or name whole,
#: so a 900 kB variable would otherwise come back in full (and again per error).
MAX_MESSAGE_CHARS = 500


def clip(message: str) -> str:
    """``message``, cut to :data:`MAX_MESSAGE_CHARS` (the cut marked with ``…``)."""
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "…"


def _is_user_error(error: GraphQLError) -> bool:
    return isinstance(error.original_error, QueryError) or error.path is None


def coded(error: GraphQLError) -> GraphQLError:
    """``error`` as the client may see it, with ``extensions.code``."""
    original = error.original_error
    if isinstance(original, QueryError):
        message, code = original.message, original.code
    elif error.path is None:
        message, code = error.message, (error.extensions or {}).get("code", VALIDATION)
    else:
        message, code = "internal error", INTERNAL
    return GraphQLError(
        clip(message),
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=None,
        extensions={**(error.extensions or {}), "code": code} if code != INTERNAL else {"code": code},
    )


class ErrorCodes(SchemaExtension):
    """Rewrites every error of a result into its client-facing, coded form."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        errors = getattr(result, "errors", None)
        if result is not None and errors:
            result.errors = [coded(e) for e in errors]


class LedgerSchema(Schema):
    """A strawberry Schema that logs bugs with their traceback and user errors quietly."""

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        for error in errors:
            if _is_user_error(error):
                log.info("graphql user error: %s", clip(error.message))
            else:
                original: Any = error.original_error
                log.error("graphql resolver failed: %s", error.message, exc_info=original)
