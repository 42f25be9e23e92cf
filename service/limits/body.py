"""Request body size limits as a pure ASGI middleware, in front of the routes that read bodies.

A declared ``Content-Length`` over the limit is refused before one byte of the body is read; a
chunked body (no length) is counted while the app streams it and cut off as soon as it passes the
limit, so neither kind can make the service buffer more than the limit. The refusal is HTTP 413
with ``Connection: close``: the rest of the client's body is never read. A client that hangs up
mid-body is logged as such, not as a failure of the app.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
log = logging.getLogger("gpu_ledger.limits")


@dataclass(frozen=True)
class BodyLimit:
    """``max_b`` bytes on one path; ``refuse(message)`` is the 413 response in that route's shape."""

    max_b: int
    refuse: Callable[[str], Response]


def graphql_refusal(message: str) -> Response:
    """A 413 in the GraphQL error shape, with its code."""
    body = {"errors": [{"message": message, "extensions": {"code": PAYLOAD_TOO_LARGE}}]}
    return JSONResponse(body, status_code=413, headers={"Connection": "close"})


def plain_refusal(message: str) -> Response:
    """A 413 in the push endpoint's error shape (``{"error", "field"}``)."""
    return JSONResponse({"error": message, "field": None}, status_code=413, headers={"Connection": "close"})


class _TooLarge(Exception):
    """Raised from ``receive`` into the app when a streamed body passes the limit."""


class BodySizeLimit:
    """Refuses request bodies over the limit of their path (``limits``: path → :class:`BodyLimit`)."""

    def __init__(self, app: ASGIApp, limits: Mapping[str, BodyLimit]) -> None:
        self.app, self.limits = app, dict(limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.get(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        too_large = f"request body larger than {limit.max_b} bytes"
        declared = _content_length(scope)
        if declared is not None and declared > limit.max_b:
            await limit.refuse(f"{too_large} (Content-Length {declared})")(scope, receive, send)
            return

        received_b, started = 0, False

        async def counted_receive() -> Message:
            nonlocal received_b
            message = await receive()
            if message["type"] == "http.request":
                received_b += len(message.get("body", b""))
                if received_b > limit.max_b:
                    raise _TooLarge
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except _TooLarge:
            if started:  # the app answered before reading it all: nothing left to say
                return
            await limit.refuse(too_large)(scope, receive, send)
        except ClientDisconnect:  # the client left mid-body: no one to answer, nothing went wrong here
            log.info("client left before sending its whole body: path=%s", scope["path"])


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server (h11) refuses a malformed length before we see it
    return None
