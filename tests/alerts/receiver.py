"""A real HTTP receiver for webhooks on 127.0.0.1: records every POST (path, JSON body) and
answers from a script of status codes (then 200)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from notify.smtpserver import free_port


@dataclass
class Receiver:
    base: str
    posts: list[tuple[str, Any]] = field(default_factory=list)
    script: list[int] = field(default_factory=list)  # statuses to answer first
    attempts: int = 0
    headers: dict[str, str] = field(default_factory=dict)  # sent with every answer

    def bodies(self, path: str) -> list[Any]:
        return [body for p, body in self.posts if p == path]


@contextmanager
def http_receiver() -> Iterator[Receiver]:
    port = free_port(range(18450, 18500))
    receiver = Receiver(f"http://127.0.0.1:{port}")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                receiver.attempts += 1
                status = receiver.script.pop(0) if receiver.script else 200
                if status == 200:
                    receiver.posts.append((self.path, json.loads(data)))
            self.send_response(status)
            for name, value in receiver.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
