"""An HTTPS fake of the Azure endpoints the connectors call, on 127.0.0.1, for the real clients.

azure-core's bearer-token policy refuses plain ``http://`` (docs/testing.md), so the fake serves TLS
with a trustme certificate; clients verify it with ``ca_path`` (``connection_verify`` for
azure-core, ``ca_file`` for httpx). Each test gives a ``respond(request) -> Reply`` function and
reads back what the client sent from ``requests``.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trustme


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, the text of another body, or None


@dataclass(slots=True)
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class FakeAzure:
    url: str
    ca_path: str
    respond: Callable[[Request], Reply]
    requests: list[Request] = field(default_factory=list)


@contextmanager
def fake_azure(tmp_path: Path, respond: Callable[[Request], Reply]) -> Iterator[FakeAzure]:
    """Serve ``respond`` over HTTPS on a free port of 127.0.0.1 until the block ends."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_path = tmp_path / "fake-azure-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    fake = FakeAzure(url="", ca_path=str(ca_path), respond=respond)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            split = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=split.path,
                query=parse_qs(split.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=_body(raw, self.headers.get("Content-Type", "")),
            )
            fake.requests.append(request)
            reply = fake.respond(request)
            payload = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _handle

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake.url = f"https://127.0.0.1:{server.server_address[1]}"
    # A short poll interval: shutdown() waits for the next poll, 0.5 s by default.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="fake-azure", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    return json.loads(raw) if "json" in content_type or not content_type else raw.decode()


class StaticCredential:
    """A TokenCredential that hands out one token and records the scopes it was asked for."""

    def __init__(self, token: str = "test-token", expires_in_s: int = 3600) -> None:
        self.token, self.expires_in_s = token, expires_in_s
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        import time

        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + self.expires_in_s)


def inventory_table(rows: list[list[str]]) -> dict[str, object]:
    """A Log Analytics answer table for the ``KubePodInventory`` join (``azure_pod_inventory``):
    its columns, and ``rows`` of them (``[]``: a workspace holding none of the pods asked for)."""
    from connectors.azure_pod_inventory import COLUMNS

    return {
        "name": "PrimaryResult",
        "columns": [{"name": c, "type": "string"} for c in COLUMNS],
        "rows": rows,
    }
