"""Local AWS endpoints for the ``cloudwatch`` connector tests.

* :func:`moto_server`: moto's own threaded server on 127.0.0.1 (port 0), the real AWS wire
  protocols (CloudWatch AWS JSON 1.0, EC2 and STS query) for boto3 to talk to; :func:`reset`
  empties its state between tests.
* :class:`FaultProxy`: a tiny HTTP server in front of moto that answers the first ``n``
  requests with a canned AWS error (throttling, 5xx, access denied) and proxies the rest, because
  moto neither throttles nor checks credentials.
* :func:`put_points` writes a series; :class:`CallLog` records the ``GetMetricData`` calls of a
  real client through botocore's event hooks.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from moto.server import ThreadedMotoServer

KEY_ID, SECRET = "AKIDTESTTESTTEST0001", "test-secret-not-real"  # dummy keys moto accepts


@contextmanager
def moto_server() -> Iterator[str]:
    """A running moto server; yields its endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def reset(endpoint: str) -> None:
    """Forget every resource and metric moto holds."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request) as response:
        response.read()


def json_error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    """An AWS JSON 1.0 error as CloudWatch sends it (``awsQueryCompatible``: the query-protocol
    code travels in ``x-amzn-query-error``)."""
    body = json.dumps({"__type": f"com.amazonaws.cloudwatch#{code}", "message": message}).encode()
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-query-error": f"{code};{'Sender' if status < 500 else 'Receiver'}",
    }
    return status, headers, body


class FaultProxy:
    """Answers the first ``failures`` requests with ``fault`` (status, headers, body), then proxies
    to ``upstream``. ``requests`` counts every request it saw."""

    def __init__(self, upstream: str, fault: tuple[int, dict[str, str], bytes], failures: int) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.fault, self.failures, self.requests = fault, failures, 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with proxy._lock:
                    proxy.requests += 1
                    failing = proxy.requests <= proxy.failures
                if failing:
                    status, headers, payload = proxy.fault
                else:
                    status, headers, payload = proxy._forward(self.command, self.path, self.headers, body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def _forward(
        self, method: str, path: str, headers: object, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.upstream, timeout=10)
        try:
            skip = {"host", "content-length", "connection"}
            fwd = {k: v for k, v in headers.items() if k.lower() not in skip}  # type: ignore[attr-defined]
            conn.request(method, path, body=body, headers=fwd)
            response = conn.getresponse()
            keep = {"content-type", "x-amzn-requestid", "x-amzn-query-error"}
            return (
                response.status,
                {k: v for k, v in response.getheaders() if k.lower() in keep},
                response.read(),
            )
        finally:
            conn.close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def put_points(
    client: Any,
    namespace: str,
    metric: str,
    dims: dict[str, str],
    stamps: Sequence[dt.datetime],
    values: Sequence[float],
) -> None:
    """``PutMetricData`` of one series, 1,000 datapoints a call (CloudWatch's limit)."""
    dimensions = [{"Name": k, "Value": v} for k, v in dims.items()]
    data = [
        {"MetricName": metric, "Dimensions": dimensions, "Timestamp": t, "Value": float(v)}
        for t, v in zip(stamps, values, strict=True)
    ]
    for first in range(0, len(data), 1000):
        client.put_metric_data(Namespace=namespace, MetricData=data[first : first + 1000])


class CallLog:
    """Counts ``GetMetricData`` calls of a real botocore client through its event hooks and keeps
    each call's parameters as the caller passed them (``before-parameter-build``)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def attach(self, client: Any) -> Any:
        client.meta.events.register("before-parameter-build.cloudwatch.GetMetricData", self._before)
        return client

    def _before(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append(dict(params))
