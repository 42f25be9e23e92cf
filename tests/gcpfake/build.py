"""Building Cloud Monitoring series for the fake server, and a client that talks to it in plain gRPC."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import grpc
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gcp"


def fixture_series(name: str) -> list[monitoring_v3.TimeSeries]:
    """The series of a recorded ``ListTimeSeries`` JSON answer (REST/JSON mapping: int64 as strings)."""
    text = (FIXTURES / f"monitoring_list_time_series_{name}.json").read_text()
    return list(monitoring_v3.ListTimeSeriesResponse.from_json(text).time_series)


def series(
    metric_type: str,
    resource: dict[str, str],
    labels: dict[str, str],
    ends: Sequence[dt.datetime],
    values: Sequence[float | int],
    *,
    resource_type: str = "gce_instance",
    cumulative_since: Sequence[dt.datetime] | None = None,
    system_labels: dict[str, str] | None = None,
    user_labels: dict[str, str] | None = None,
) -> monitoring_v3.TimeSeries:
    """A GAUGE series (points stamped at their end time), or a CUMULATIVE one whose point ``i``
    counts since ``cumulative_since[i]``. Ints become INT64 values, floats DOUBLE."""
    is_int = all(isinstance(v, int) for v in values)
    kind = "CUMULATIVE" if cumulative_since is not None else "GAUGE"
    points = []
    for i, (end, value) in enumerate(zip(ends, values, strict=True)):
        start = cumulative_since[i] if cumulative_since is not None else end
        points.append(
            {
                "interval": {"start_time": start, "end_time": end},
                "value": {"int64_value": value} if is_int else {"double_value": value},
            }
        )
    out = monitoring_v3.TimeSeries(
        metric={"type": metric_type, "labels": labels},
        resource={"type": resource_type, "labels": resource},
        metric_kind=kind,
        value_type="INT64" if is_int else "DOUBLE",
        points=points[::-1],  # newest first, as the API answers
    )
    if system_labels or user_labels:
        out.metadata = {"system_labels": system_labels or {}, "user_labels": user_labels or {}}
    return out


@contextmanager
def plain_client(target: str) -> Iterator[monitoring_v3.MetricServiceClient]:
    """A real ``MetricServiceClient`` on an insecure channel to ``target``, closed afterwards."""
    channel = grpc.insecure_channel(target)
    try:
        yield monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(channel=channel))
    finally:
        channel.close()
