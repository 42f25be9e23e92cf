"""The agent's HTTP client: one keep-alive connection, standard library only.

The agent POSTs one batch every ``ship_every_s``; httpx (with httpcore, anyio, and the rich and
pygments its CLI module pulls in) was ~7 MB of the agent's resident memory for that. This client
does what :class:`service.agent.ship.Shipper` needs: ``post(url, content=, headers=)`` returning
``status_code``, ``is_success``, ``text`` and ``json()``, a timeout, HTTPS with the system's CA
store (``ssl`` is imported only for an ``https`` URL), and a reconnect after a broken connection.
Transport failures raise :class:`TransportError` (an ``OSError``). An ``httpx.Client`` still fits
the Shipper (tests drive it through httpx's MockTransport and Starlette's TestClient).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class TransportError(OSError):
    """The request got no HTTP answer: refused, reset, timed out, TLS failed, bad status line."""


@dataclass(frozen=True, slots=True)
class Response:
    status_code: int
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class HttpClient:
    """POSTs over one persistent connection per client (the agent talks to one service)."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._origin: tuple[str, str, int | None] | None = None

    def _connection(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        if self._conn is None or self._origin != (scheme, host, port):
            self.close()
            if scheme == "https":
                import ssl  # only an https service needs it

                conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                    host, port, timeout=self.timeout, context=ssl.create_default_context()
                )
            elif scheme == "http":
                conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
            else:
                raise TransportError(f"unsupported URL scheme {scheme!r}")
            self._conn, self._origin = conn, (scheme, host, port)
        return self._conn

    def post(self, url: str, *, content: str | bytes, headers: dict[str, str]) -> Response:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = content.encode() if isinstance(content, str) else content
        # A kept-alive connection the service closed fails on first use: retry once on a new one.
        for attempt in (1, 2):
            conn = self._connection(parts.scheme, parts.hostname or "", parts.port)
            try:
                conn.request("POST", path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                reused = isinstance(
                    exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
                )
                if attempt == 1 and reused:
                    continue
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            if answer.will_close:
                self.close()
            return Response(answer.status, data)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
