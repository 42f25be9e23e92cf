"""A tiny scripted HTTP server on 127.0.0.1 that records what it was asked (method, path, headers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stub:
    """``script`` is answered in order; after it runs out, ``default`` answers every request."""

    url: str
    script: list[Reply] = field(default_factory=list)
    default: Reply = field(default_factory=Reply)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (path?query, headers)


@contextmanager
def http_stub() -> Iterator[Stub]:
    stub = Stub(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
            stub.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            reply = stub.script.pop(0) if stub.script else stub.default
            data = reply.body.encode()
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
