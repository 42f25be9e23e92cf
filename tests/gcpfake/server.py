"""An in-process Cloud Monitoring ``MetricService/ListTimeSeries`` over real gRPC, for tests.

It speaks the wire protocol with the client library's own proto-plus classes (no generated
``_pb2_grpc`` module). It serves series a test hands it and checks what a real server would
make of the request: GAUGE series only for ``ALIGN_MEAN`` with the server's alignment period (the
test's series *are* that aligned answer), CUMULATIVE series only raw (no aligner); the filter's
``metric.type``, ``resource.type`` and ``metric.labels.*`` clauses; points whose end time is in
``(interval.start, interval.end]``, newest first; ``metadata.system_labels`` and
``metadata.user_labels`` only where the request groups by them (a label key may be quoted); pages
of ``page_size`` series chained by ``next_page_token``. A test can make the next calls (or every
call) fail with a gRPC status.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
from google.api import metric_pb2
from google.cloud import monitoring_v3

_CLAUSE = re.compile(r'([\w.]+) = "([^"]*)"')
Aligner = monitoring_v3.Aggregation.Aligner


class FakeMetricService:
    """``series``: project id → series (proto-plus ``TimeSeries``) the project holds."""

    def __init__(
        self, series: dict[str, list[monitoring_v3.TimeSeries]], *, period_s: int, page_size: int = 1000
    ) -> None:
        self.series, self.period_s, self.page_size = series, period_s, page_size
        self.requests: list[monitoring_v3.ListTimeSeriesRequest] = []
        self.fail_next: list[tuple[grpc.StatusCode, str]] = []
        self.fail_always: tuple[grpc.StatusCode, str] | None = None
        self._lock = threading.Lock()

    def list_time_series(
        self, request: monitoring_v3.ListTimeSeriesRequest, context: grpc.ServicerContext
    ) -> monitoring_v3.ListTimeSeriesResponse:
        with self._lock:
            self.requests.append(request)
            failure = self.fail_next.pop(0) if self.fail_next else self.fail_always
        if failure is not None:
            context.abort(*failure)
        clauses = _clauses(request.filter)
        if clauses is None or "metric.type" not in clauses:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot parse filter {request.filter!r}")
        project = request.name.removeprefix("projects/")
        matching = []
        for series in self.series.get(project, []):
            if not _matches(series, clauses):
                continue
            problem = self._check_aggregation(series, request.aggregation)
            if problem:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
            matching.append(_answer(series, request))
        matching = [s for s in matching if s.points]
        offset = int(request.page_token or 0)
        size = request.page_size or self.page_size
        page = matching[offset : offset + size]
        token = str(offset + size) if offset + size < len(matching) else ""
        return monitoring_v3.ListTimeSeriesResponse(time_series=page, next_page_token=token)

    def _check_aggregation(
        self, series: monitoring_v3.TimeSeries, aggregation: monitoring_v3.Aggregation
    ) -> str:
        if series.metric_kind == metric_pb2.MetricDescriptor.MetricKind.CUMULATIVE:
            if aggregation.per_series_aligner != Aligner.ALIGN_NONE:
                return "this fake serves CUMULATIVE series raw only"
            return ""
        if aggregation.per_series_aligner != Aligner.ALIGN_MEAN:
            aligner = aggregation.per_series_aligner
            return f"this fake serves GAUGE series aligned with ALIGN_MEAN, not {aligner!r}"
        period = aggregation.alignment_period  # proto-plus gives a timedelta
        if period != dt.timedelta(seconds=self.period_s):
            return f"alignment period {period} is not the fake's {self.period_s} s"
        return ""


def _clauses(text: str) -> dict[str, str] | None:
    """``a = "x" AND b = "y"`` → {a: x, b: y}; None for anything else (the fake knows no more)."""
    found = [_CLAUSE.fullmatch(part.strip()) for part in text.split(" AND ")]
    if not all(found):
        return None
    return {m.group(1): m.group(2) for m in found if m}


def _matches(series: monitoring_v3.TimeSeries, clauses: dict[str, str]) -> bool:
    for key, value in clauses.items():
        if key == "metric.type":
            actual = series.metric.type
        elif key == "resource.type":
            actual = series.resource.type
        elif key.startswith("metric.labels."):
            actual = series.metric.labels.get(key.removeprefix("metric.labels."))
        else:
            return False
        if actual != value:
            return False
    return True


def _answer(
    series: monitoring_v3.TimeSeries, request: monitoring_v3.ListTimeSeriesRequest
) -> monitoring_v3.TimeSeries:
    start, end = request.interval.start_time, request.interval.end_time
    out = monitoring_v3.TimeSeries(series)
    points = [p for p in series.points if start < p.interval.end_time <= end]
    points.sort(key=lambda p: p.interval.end_time, reverse=True)  # newest first
    out.points = points
    fields = request.aggregation.group_by_fields
    wanted = {
        f.removeprefix("metadata.system_labels.") for f in fields if f.startswith("metadata.system_labels.")
    }
    users = {
        f.removeprefix("metadata.user_labels.").strip('"')
        for f in fields
        if f.startswith("metadata.user_labels.")
    }
    if (wanted or users) and "metadata" in series:
        system = {k: v for k, v in series.metadata.system_labels.items() if k in wanted}
        user = {k: v for k, v in series.metadata.user_labels.items() if k in users}
        out.metadata = {"system_labels": system, "user_labels": user}
    else:
        del out.metadata
    return out


@contextmanager
def running_fake(service: FakeMetricService, *, tls: tuple[bytes, bytes] | None = None) -> Iterator[str]:
    """Serve ``service`` on 127.0.0.1 (TLS with ``(cert_chain_pem, key_pem)`` if given); yields host:port."""
    executor = ThreadPoolExecutor(max_workers=4)
    server = grpc.server(executor)
    handler = grpc.method_handlers_generic_handler(
        "google.monitoring.v3.MetricService",
        {
            "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                service.list_time_series,
                request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(tls[1], tls[0])]))
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None).wait()
        executor.shutdown(wait=True)
