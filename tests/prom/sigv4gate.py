"""A local stand-in for an AWS endpoint that signs with SigV4: every request's signature is
recomputed by botocore from the request as received and refused (403) when it does not match, as
AWS does; good requests are proxied to a real server (a Prometheus)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class SigV4Gate:
    """Checks SigV4 on every GET as AWS would (service ``monitoring``, region ``us-east-1``, the
    credentials ``key``/``secret``) and proxies good requests to ``upstream``; counts ``signed``
    and ``refused``."""

    def __init__(self, upstream: str, key: str, secret: str) -> None:
        self.upstream, self.signed, self.refused = upstream.removeprefix("http://"), 0, 0
        self.key, self.secret = key, secret
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if gate.valid(self.path, dict(self.headers.items())):
                    gate.signed += 1
                    conn = http.client.HTTPConnection(gate.upstream, timeout=10)
                    conn.request("GET", self.path)
                    answer = conn.getresponse()
                    status, body = answer.status, answer.read()
                    conn.close()
                else:
                    gate.refused += 1
                    status, body = (
                        403,
                        json.dumps(
                            {"message": "The request signature we calculated does not match"}
                        ).encode(),
                    )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def valid(self, path: str, headers: dict[str, str]) -> bool:
        given, stamp, host = (
            headers.get("Authorization", ""),
            headers.get("X-Amz-Date", ""),
            headers.get("Host", ""),
        )
        credential = f"{self.key}/{stamp[:8]}/us-east-1/monitoring/aws4_request"
        scope = f"Credential={credential}, SignedHeaders=host;x-amz-date, "
        request = AWSRequest(
            method="GET", url=f"http://{host}{path}", headers={"host": host, "X-Amz-Date": stamp}
        )
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(self.key, self.secret), "monitoring", "us-east-1")
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        return given == f"AWS4-HMAC-SHA256 {scope}Signature={expected}"

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @contextmanager
    def running(self) -> Iterator[SigV4Gate]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
