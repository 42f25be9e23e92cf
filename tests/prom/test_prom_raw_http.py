"""The ``prometheus`` connector's raw-sample protocol against a real Prometheus.

The fleet: 30 GPUs (``GPU-00`` … ``GPU-29``) scraped every 60 s at second 3 of each minute,
2025-06-01 22:00:03 … 2025-06-04 01:59:03 UTC, with ``DCGM_FI_DEV_GPU_UTIL`` (GPU ``g`` at minute
``m`` reads ``(g + m) % 101``) and ``DCGM_FI_DEV_POWER_USAGE`` (100 + g W); one more GPU,
``GPU-lower``, stored lower-cased (``dcgm_fi_dev_gpu_util``, exporter issue #272) under
``job="lower"``. That is 30 × 2 × 3,000 = 180,000 samples under ``job="dcgm"``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest
from prom.promserver import running_prometheus, series_text

from connectors.prom_decode import decode_matrix
from connectors.prom_raw import LATE_MS
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import ConnectorError, FatalSourceError, SampleBatch

D1 = dt.datetime(2025, 6, 2, tzinfo=dt.UTC)
FIRST = int(D1.timestamp()) - 7200 + 3  # 22:00:03 the day before
MINUTES = 3000  # … 2025-06-04 01:59:03
GPUS = 30
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


def _fleet() -> str:
    ts = [FIRST + 60 * m for m in range(MINUTES)]
    parts = []
    for name, value in (
        ("DCGM_FI_DEV_GPU_UTIL", lambda g, m: float((g + m) % 101)),
        ("DCGM_FI_DEV_POWER_USAGE", lambda g, m: 100.0 + g),
    ):
        for g in range(GPUS):
            labels = {"UUID": f"GPU-{g:02d}", "gpu": str(g % 8), "Hostname": f"n{g // 8}", "job": "dcgm"}
            parts.append(series_text(name, labels, ts, [value(g, m) for m in range(MINUTES)]))
    lower = {"UUID": "GPU-lower", "gpu": "0", "Hostname": "nl", "job": "lower"}
    parts.append(series_text("dcgm_fi_dev_gpu_util", lower, ts[:120], [50.0] * 120))
    return "".join(parts)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("raw"), _fleet()) as url:
        yield url


@pytest.fixture(scope="module")
def small_prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same data behind ``--query.max-samples=20000``: a query of more is refused (HTTP 422)."""
    with running_prometheus(tmp_path_factory.mktemp("small"), _fleet(), ["--query.max-samples=20000"]) as url:
        yield url


class Recorder:
    """An httpx client that records the path and parameters of every request (closed after the
    test by the autouse fixture below)."""

    made: list[Recorder] = []

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.client = httpx.Client(event_hooks={"request": [self._record]})
        Recorder.made.append(self)

    def _record(self, request: httpx.Request) -> None:
        self.seen.append((request.url.path, dict(request.url.params.multi_items())))

    def queries(self) -> list[dict[str, str]]:
        return [p for path, p in self.seen if path == "/api/v1/query"]


@pytest.fixture(autouse=True)
def _close_recorders() -> Iterator[None]:
    yield
    while Recorder.made:
        Recorder.made.pop().client.close()


def _connector(url: str, recorder: Recorder | None = None, **extra: object) -> PrometheusConnector:
    config = PrometheusConfig(name="p", url=url, step_s=60, label_selector='{job="dcgm"}', **extra)  # type: ignore[arg-type]
    return PrometheusConnector(config, client=recorder.client if recorder else None)


def _frame(batches: list[SampleBatch]) -> pl.DataFrame:
    frames = [b.samples for b in batches]
    return (
        pl.concat(frames).sort("device_id", "metric", "ts_ms", "workload_key") if frames else pl.DataFrame()
    )


def test_metadata_first_then_only_the_stored_fields_at_scrape_times(prometheus_url: str) -> None:
    recorder = Recorder()
    with _connector(prometheus_url, recorder) as connector:
        frame = _frame(list(connector.collect(D1, D1 + 2 * HOUR)))
    path, params = recorder.seen[0]
    assert path == "/api/v1/label/__name__/values"
    assert (
        params["match[]"].startswith('{__name__=~"(?i)(DCGM_FI_DEV_GPU_UTIL|')
        and 'job="dcgm"}' in params["match[]"]
    )
    assert (params["start"], params["end"]) == (f"{D1.timestamp():.3f}", f"{D1.timestamp() + 7199.999:.3f}")
    asked = {q["query"].split("{")[0] for q in recorder.queries()}
    assert asked == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}  # not the 9 fields not stored
    assert len(recorder.seen) == 1 + len(recorder.queries())
    # 120 scrapes per GPU and field in 00:00–02:00, at second 3: the scrape's own time, no grid
    assert frame.height == GPUS * 2 * 120
    ts = frame.filter((pl.col("device_id") == "GPU-07") & (pl.col("metric") == "gpu_util"))["ts_ms"]
    assert ts[0] == int(D1.timestamp()) * 1000 + 3000 and ts[-1] == ts[0] + 119 * 60_000
    first_minute = (int(D1.timestamp()) + 3 - FIRST) // 60
    values = frame.filter((pl.col("device_id") == "GPU-07") & (pl.col("metric") == "gpu_util"))["value"]
    assert values[0] == float((7 + first_minute) % 101)
    power = frame.filter((pl.col("device_id") == "GPU-29") & (pl.col("metric") == "power_w"))["value"]
    assert set(power.to_list()) == {129.0}


def test_the_window_is_half_open_to_the_millisecond(prometheus_url: str) -> None:
    at = D1 + dt.timedelta(seconds=3)  # a scrape time: included as a start, excluded as an end
    with _connector(prometheus_url) as connector:
        frame = _frame(list(connector.collect(at, at + dt.timedelta(minutes=2))))
        empty = list(connector.collect(at + dt.timedelta(milliseconds=1), at + dt.timedelta(seconds=60)))
    assert sorted(set(frame["ts_ms"].to_list())) == [
        int(at.timestamp()) * 1000,
        int(at.timestamp()) * 1000 + 60_000,
    ]
    assert empty == []


def test_case_variants_only_where_no_exporter_name_is_stored(prometheus_url: str) -> None:
    recorder = Recorder()
    config = PrometheusConfig(name="p", url=prometheus_url, step_s=60, label_selector='{job="lower"}')
    start = dt.datetime.fromtimestamp(FIRST - 3, dt.UTC)
    with PrometheusConnector(config, client=recorder.client) as connector:
        frame = _frame(list(connector.collect(start, start + HOUR)))
    assert [q["query"].split("{")[0] for q in recorder.queries()] == ["dcgm_fi_dev_gpu_util"]
    assert frame.select("device_id", "metric").unique().rows() == [("GPU-lower", "gpu_util")]
    assert frame.height == 60 and connector.missing_data_hint is None
    with _connector(prometheus_url, Recorder()) as connector:  # job="dcgm": exporter names only
        assert "GPU-lower" not in _frame(list(connector.collect(start, start + HOUR)))["device_id"].to_list()


def test_nothing_stored_gives_the_hint_and_no_query(prometheus_url: str) -> None:
    recorder = Recorder()
    config = PrometheusConfig(name="p", url=prometheus_url, step_s=60, label_selector='{job="nope"}')
    with PrometheusConnector(config, client=recorder.client) as connector:
        assert list(connector.collect(D1, D1 + HOUR)) == []
    assert connector.missing_data_hint is not None and '{job="nope"}' in connector.missing_data_hint
    assert recorder.queries() == []


def test_spans_stay_under_the_budget_and_a_refused_query_is_halved(
    prometheus_url: str, small_prometheus_url: str
) -> None:
    window = (D1 - HOUR, D1 + DAY + HOUR)
    with _connector(prometheus_url) as connector:
        whole = _frame(list(connector.collect(*window)))
    assert whole.height == GPUS * 2 * 26 * 60
    recorder = Recorder()
    with _connector(prometheus_url, recorder, max_query_samples=10_000) as connector:
        assert _frame(list(connector.collect(*window))).equals(whole)
    spans = [int(q["query"].rsplit("[", 1)[1].removesuffix("ms]")) - 1 for q in recorder.queries()]
    # the first span of each field is an hour (1,800 samples); then 10,000 / 30 per minute ≈ 333 min
    assert max(spans) <= 10_000 * 60_000 // GPUS + 60_000 and sum(spans) == 2 * 26 * 3_600_000
    refused = Recorder()
    with _connector(small_prometheus_url, refused) as connector:  # server refuses > 20,000 samples
        assert _frame(list(connector.collect(*window))).equals(whole)
    statuses = [
        refused.client.get(
            f"{small_prometheus_url}/api/v1/query",
            params={"query": 'DCGM_FI_DEV_GPU_UTIL{job="dcgm"}[1d]', "time": str(D1.timestamp() + 86400)},
        ).status_code
    ]
    assert statuses == [422]


def test_a_span_refused_even_at_one_second_is_an_error_not_a_loop() -> None:
    too_many = (
        b'{"status":"error","errorType":"execution","error":"query processing would load too many '
        b'samples into memory in query execution"}'
    )
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/values"):
            return httpx.Response(200, content=b'{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL"]}')
        asked.append(request.url.params["query"])
        return httpx.Response(422, content=too_many)

    config = PrometheusConfig(name="p", url="http://prom", step_s=60)
    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(ConnectorError, match="query.max-samples"),
    ):
        list(PrometheusConnector(config, client=client).collect(D1, D1 + HOUR))
    # halved from an hour down to one second, then given up
    assert asked[0].endswith("[3600001ms]") and asked[-1].endswith("[1001ms]") and len(asked) == 13


def test_the_next_day_reads_only_what_it_does_not_hold(prometheus_url: str) -> None:
    day1 = (D1 - HOUR, D1 + DAY + HOUR)  # what the ingestor asks for day 1 (presence gap 1 h)
    day2 = (D1 + DAY - HOUR, D1 + 2 * DAY + HOUR)
    recorder = Recorder()
    with _connector(prometheus_url, recorder) as connector:
        list(connector.collect(*day1))
        recorder.seen.clear()
        second = _frame(list(connector.collect(*day2)))
    # day 2 starts 2 h before day 1's read ended: those 2 h come from memory
    firsts = {
        round(float(q["time"]) * 1000) + 1 - (int(q["query"].rsplit("[", 1)[1].removesuffix("ms]")) - 1)
        for q in recorder.queries()
    }
    assert min(firsts) == int((D1 + DAY + HOUR).timestamp() * 1000)
    assert recorder.seen[0][1]["start"] == f"{(D1 + DAY + HOUR).timestamp():.3f}"
    # each field's rate is known by now: its day is asked as two half days at once
    assert sorted(q["query"].split("{")[0] for q in recorder.queries()) == [
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_USAGE"
    ]  # fmt: skip
    with _connector(prometheus_url) as fresh:  # a new run (or a restart) reads all it needs
        assert _frame(list(fresh.collect(*day2))).equals(second)
    assert second.height == GPUS * 2 * (26 * 60 - 60)  # the data ends at 2025-06-04 01:59:03


def test_samples_near_the_read_time_are_read_again(prometheus_url: str) -> None:
    day1 = (D1 - HOUR, D1 + DAY + HOUR)
    now = day1[1] + dt.timedelta(minutes=5)  # a live run: the last minutes may still be arriving
    recorder = Recorder()
    config = PrometheusConfig(name="p", url=prometheus_url, step_s=60, label_selector='{job="dcgm"}')
    with PrometheusConnector(config, client=recorder.client, clock=lambda: now) as connector:
        list(connector.collect(*day1))
        recorder.seen.clear()
        list(connector.collect(D1 + DAY - HOUR, D1 + 2 * DAY + HOUR))
    trusted_until = int(now.timestamp() * 1000) - LATE_MS
    assert recorder.seen[0][1]["start"] == f"{trusted_until / 1000:.3f}"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>proxy error</html>",
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"UUID":"G"},"values":[[1,"x"]]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"UUID":"G"},"values":[[1,"2"]',
        b'{"status":"success","data":{"resultType":"vector","result":[]}}',
        b'{"status":"error","errorType":"bad_data","error":"parse error"}',
        b'{"status":"success","data":{"resultType":"matrix","result":[7]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"UUID":"G"},"values":[["a"]]}]}}',
    ],
)
def test_a_hostile_answer_is_a_connector_error(body: bytes) -> None:
    transport = httpx.MockTransport(
        lambda r: httpx.Response(
            200,
            content=b'{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL"]}'
            if r.url.path.endswith("/values")
            else body,
        )
    )
    config = PrometheusConfig(name="p", url="http://prom", step_s=60)
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(ConnectorError),
    ):
        list(PrometheusConnector(config, client=client).collect(D1, D1 + HOUR))


@pytest.mark.parametrize(
    "names",
    [b'{"status":"success","data":{"x":1}}', b"[]", b"not json", b'{"status":"error","error":"no"}'],
)
def test_a_hostile_metadata_answer_is_a_connector_error(names: bytes) -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=names))
    config = PrometheusConfig(name="p", url="http://prom", step_s=60)
    with httpx.Client(transport=transport) as client, pytest.raises(ConnectorError):
        list(PrometheusConnector(config, client=client).collect(D1, D1 + HOUR))


def test_framed_and_general_decoding_agree(prometheus_url: str, tmp_path: Path) -> None:
    """Prometheus' own framing is cut fast; another server's spacing takes the general path."""
    answer = httpx.get(
        f"{prometheus_url}/api/v1/query",
        params={"query": 'DCGM_FI_DEV_GPU_UTIL{job="dcgm"}[2h]', "time": str(D1.timestamp())},
    ).content
    fast = decode_matrix(answer)
    spaced = decode_matrix(answer.replace(b'"values":', b'"values": ').replace(b",", b", "))
    assert fast.samples == GPUS * 120 and fast.labels == spaced.labels
    assert (fast.ts_ms == spaced.ts_ms).all() and (fast.values == spaced.values).all()
    assert (fast.offsets == spaced.offsets).all()
    special = (
        b'{"status":"success","data":{"resultType":"matrix","result":['
        b'{"metric":{"UUID":"G","x":"a\\"values\\":[1,2]]}"},"values":[[1.001,"NaN"],[2,"+Inf"],[3,"-1e3"]]}]}}'
    )
    m = decode_matrix(special)
    assert m.labels == [{"UUID": "G", "x": 'a"values":[1,2]]}'}]
    assert m.ts_ms.tolist() == [1001, 2000, 3000]
    assert m.values[1] == float("inf") and m.values[2] == -1000.0 and m.values[0] != m.values[0]


@pytest.mark.parametrize(("compress", "encoding"), [(False, "identity"), (True, "gzip, deflate")])
def test_answers_come_uncompressed_unless_asked(prometheus_url: str, compress: bool, encoding: str) -> None:
    sent: list[str] = []
    client = httpx.Client(event_hooks={"request": [lambda r: sent.append(r.headers["accept-encoding"])]})
    config = PrometheusConfig(
        name="p", url=prometheus_url, step_s=60, label_selector='{job="dcgm"}', compress=compress
    )
    with client, PrometheusConnector(config, client=client) as connector:
        frame = _frame(list(connector.collect(D1, D1 + HOUR)))
    assert frame.height == GPUS * 2 * 60 and set(sent) == {encoding}


def test_raw_reads_are_retried_and_refusals_are_fatal() -> None:
    replies = [
        httpx.Response(503, content=b"down"),
        httpx.Response(200, content=b'{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL"]}'),
        httpx.Response(429, content=b"slow", headers={"Retry-After": "7"}),
        httpx.Response(401, content=b'{"status":"error","error":"no"}'),
    ]
    sleeps: list[float] = []
    config = PrometheusConfig(name="p", url="http://prom", step_s=60, backoff_s=1.0)
    with (
        httpx.Client(transport=httpx.MockTransport(lambda r: replies.pop(0))) as client,
        pytest.raises(FatalSourceError, match="HTTP 401"),
    ):
        list(PrometheusConnector(config, client=client, sleep=sleeps.append).collect(D1, D1 + HOUR))
    assert sleeps == [1.0, 7.0] and replies == []
