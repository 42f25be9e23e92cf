"""The ``prometheus`` connector's HTTP side: retries, auth, errors, the query grid, config checks.

The request counts and the grid are those of the ``last_over_time`` grid that the
``azure_prometheus`` and ``cloudwatch_promql`` subclasses read (``GridPrometheus``); the raw-sample
protocol of ``prometheus`` itself is tested in tests/prom/test_prom_raw_http.py."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from prom.httpstub import Reply, http_stub

from connectors.base import ConfigurationError, FatalSourceError, MetricsConnector, RetriableError
from connectors.dcgm import FIELDS
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.registry import build_connector, validate_config


class GridPrometheus(PrometheusConnector):
    """A subclass, so ``raw_samples`` is False: the grid the cloud subclasses read."""


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T0 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
ONE = json.dumps(
    {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"UUID": "GPU-1", "gpu": "0"}, "values": [[T0.timestamp(), "42"]]}],
        },
    }
)


def _config(url: str, **kw: object) -> PrometheusConfig:
    return PrometheusConfig(name="prom", url=url, backoff_s=1.0, **kw)  # type: ignore[arg-type]


def _collect(connector: PrometheusConnector, minutes: int = 1) -> list:
    return list(connector.collect(T0, T0 + dt.timedelta(minutes=minutes)))


def test_retries_503_and_429_then_succeeds() -> None:
    sleeps: list[float] = []
    with http_stub() as stub:
        stub.script = [Reply(503, "down"), Reply(429, "slow", {"Retry-After": "7"}), Reply(200, ONE)]
        stub.default = Reply(200, EMPTY)
        with GridPrometheus(_config(stub.url), sleep=sleeps.append) as connector:
            batches = _collect(connector)
    assert sleeps == [1.0, 7.0]  # backoff 1 s, then the server's Retry-After
    assert batches[0].samples["value"].to_list() == [42.0]
    assert len(stub.requests) == 2 + len(FIELDS)


def test_gives_up_with_a_retriable_error() -> None:
    sleeps: list[float] = []
    with http_stub() as stub:
        stub.default = Reply(502, "bad gateway")
        with (
            GridPrometheus(_config(stub.url, max_retries=2), sleep=sleeps.append) as connector,
            pytest.raises(RetriableError, match="HTTP 502.*after 3 tries"),
        ):
            _collect(connector)
    assert sleeps == [1.0, 2.0] and len(stub.requests) == 3


def test_timeouts_are_retried() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with (
        httpx.Client(transport=httpx.MockTransport(timeout)) as client,
        pytest.raises(RetriableError, match="ReadTimeout"),
    ):
        _collect(
            PrometheusConnector(_config("http://prom", max_retries=1), client=client, sleep=lambda s: None)
        )


@pytest.mark.parametrize(("status", "error"), [(401, "credentials"), (403, "credentials"), (400, "HTTP 400")])
def test_auth_and_client_errors_are_fatal(status: int, error: str) -> None:
    with http_stub() as stub:
        stub.default = Reply(status, json.dumps({"status": "error", "error": "nope"}))
        with (
            GridPrometheus(_config(stub.url), sleep=lambda s: None) as connector,
            pytest.raises(FatalSourceError, match=error),
        ):
            _collect(connector)
    assert len(stub.requests) == 1  # never retried


def test_basic_auth_and_bearer_token_are_sent() -> None:
    with http_stub() as stub:
        stub.default = Reply(200, EMPTY)
        with GridPrometheus(_config(stub.url, username="ledger", password="s3cret")) as connector:
            _collect(connector)
        with GridPrometheus(_config(stub.url, bearer_token="tok-123")) as connector:
            _collect(connector)
    auth = [headers["authorization"] for _, headers in stub.requests]
    basic = "Basic " + base64.b64encode(b"ledger:s3cret").decode()
    # Nothing matched: each field asked by name, then again in any case (#272).
    assert set(auth[: 2 * len(FIELDS)]) == {basic}
    assert set(auth[2 * len(FIELDS) :]) == {"Bearer tok-123"}
    assert "s3cret" not in repr(_config("http://p", username="ledger", password="s3cret"))


def test_query_grid_and_day_chunks() -> None:
    seen: list[dict[str, str]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append({k: v[0] for k, v in parse_qs(urlsplit(str(request.url)).query).items()})
        return httpx.Response(200, text=EMPTY)

    start = T0 + dt.timedelta(seconds=7)  # off the grid: the first point is 10:00:15
    with httpx.Client(transport=httpx.MockTransport(record)) as client:
        config = _config("http://prom/prefix/", label_selector='{cluster="a", job=~"dcgm.*"}')
        end = start + dt.timedelta(days=2, minutes=1)  # the last point is 10:01:00 two days later
        assert list(GridPrometheus(config, client=client).collect(start, end)) == []
        per_field = [q for q in seen if q["query"].startswith("last_over_time(DCGM_FI_DEV_GPU_UTIL{")]
        assert (
            per_field[0]["query"]
            == 'last_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="a", job=~"dcgm.*"}[15000ms])'
        )
        spans = [(float(q["start"]), float(q["end"])) for q in per_field]
        first, last = T0.timestamp() + 15, (T0 + dt.timedelta(days=2, minutes=1)).timestamp()
        # Three chunks of at most one day (5760 points), back to back on the 15 s grid, end < window end.
        assert spans == [(first, first + 86385), (first + 86400, first + 172785), (first + 172800, last)]
        assert {q["step"] for q in seen} == {"15.000"}
        seen.clear()
        fine = _config("http://prom", step_s=5)  # 5 s: a day would be 17,280 points; chunks stop at 10,000
        list(GridPrometheus(fine, client=client).collect(T0, T0 + dt.timedelta(days=1)))
        spans = [(float(q["start"]), float(q["end"])) for q in seen if "GPU_UTIL" in q["query"]]
        # Each chunk found nothing: asked by name, then in any case (#272).
        assert [round((b - a) / 5) + 1 for a, b in spans] == [10_000, 10_000, 7_280, 7_280]
        assert [q["query"] for q in seen if "GPU_UTIL" in q["query"]][:2] == [
            "last_over_time(DCGM_FI_DEV_GPU_UTIL[5000ms])",
            'last_over_time({__name__=~"(?i)DCGM_FI_DEV_GPU_UTIL"}[5000ms])',
        ]


def test_reads_a_managed_prometheus_matrix() -> None:
    body = (FIXTURES / "azure" / "managed_prometheus_query_range_dcgm_gpu_util.json").read_text()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body if "DCGM_FI_DEV_GPU_UTIL" in str(request.url) else EMPTY)

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        connector = GridPrometheus(_config("http://prom", step_s=60, node_labels=("node",)), client=client)
        assert isinstance(connector, MetricsConnector)
        (batch,) = _collect(connector, minutes=5)
    assert batch.samples.height == 40  # 8 GPUs × 5 points, values were JSON strings
    gpu0 = batch.samples.filter(batch.samples["device_id"] == "GPU-b3842287-3945-ec43-8e90-305e669d4f4e")
    assert gpu0["value"].to_list() == [88.0, 99.0, 97.0, 97.0, 96.0]
    assert gpu0["ts_ms"][0] == 1_758_362_400_000
    assert {d.cluster for d in batch.devices} == {"aks-gpu-prod"}  # the workspace's cluster label
    assert {d.node for d in batch.devices} == {None}  # Hostname there is the exporter pod
    assert {w.workload_key for w in batch.workloads} == {"k8s:llm-train/pretrain-70b-worker-0/trainer"}


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"url": "prom:9090"}, "url"),
        ({"url": "http://p", "label_selector": "cluster=a"}, "label_selector"),
        ({"url": "http://p", "username": "u"}, ""),
        ({"url": "http://p", "username": "u", "password": "p", "bearer_token": "t"}, ""),
        ({"url": "http://p", "step_s": 0}, "step_s"),
        ({"url": "http://p", "stepp_s": 15}, "stepp_s"),
    ],
)
def test_bad_configuration_is_a_configuration_error(extra: dict, key: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_config({"name": "prom", "type": "prometheus", **extra})
    assert key in str(info.value)


def test_registered_by_entry_point_and_bad_ca_file(tmp_path: Path) -> None:
    with build_connector({"name": "p", "type": "prometheus", "url": "https://p"}) as connector:
        assert isinstance(connector, PrometheusConnector)
    with pytest.raises(ConfigurationError, match="ca_file"):
        build_connector(
            {"name": "p", "type": "prometheus", "url": "https://p", "ca_file": str(tmp_path / "no")}
        )
    scrape = build_connector({"name": "a", "type": "dcgm_scrape", "url": "http://127.0.0.1:9400/metrics"})
    scrape.close()
