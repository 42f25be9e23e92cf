"""``prometheus``: GPU exporter metrics from a Prometheus server's HTTP API, as raw samples.

Most on-prem sites already scrape their GPUs' exporter with Prometheus — NVIDIA's dcgm-exporter
(the default), AMD's device-metrics-exporter (``exporter = "amd"``), …; this connector
reads that history. Which series it asks for and how they become samples is the exporter profile's
(:mod:`connectors.exporter_profile`); everything below is the same for every vendor.
Each reading keeps the scrape's own timestamp: a field is read with a range selector over the
chunk (``/api/v1/query`` of ``FIELD{selector}[span]``), after one metadata call per chunk that
names the fields stored there, in any case (``dcgm_fi_dev_gpu_util``, exporter issue #272).
:mod:`connectors.prom_raw` says how (spans under ``--query.max-samples``, the context held between
days instead of read again) and :mod:`connectors.prom_decode` how an answer becomes arrays. A
reading stands for its field until the field's next scrape, at most ``2 × step_s``
(``Sampling.every``): one missed scrape is bridged, a longer outage is unobserved from the last
scrape + 2 steps; from there a silence up to ``presence_gap_s`` keeps the GPU present. Windows are
cut into chunks of at most one day, one batch each. The field → metric mapping, units, MIG and
pod rules are the profile's (for dcgm-exporter :mod:`connectors.dcgm`'s). When no field is stored in a chunk,
``missing_data_hint`` says what to check (the ingest puts it in the run's ``MISSING_DATA`` message).

Services that speak the Prometheus API but were not checked for raw range queries and label
metadata (``azure_prometheus``, ``cloudwatch_promql``: subclasses of this connector) keep the older
way, ``raw_samples = False``: per field and chunk a ``query_range`` of
``last_over_time(FIELD{selector}[step])`` on a grid of ``step_s``, each grid point holding the
latest sample of the step before it (so a reading is stamped up to one step after its scrape),
chunks of at most one day and 10,000 points per series (Prometheus refuses more than 11,000),
case variants asked per chunk when no exporter name matched (``last_over_time`` drops the name,
and Prometheus refuses two series with the same labels).

Errors: 5xx, 429, timeouts and connection failures are retried with exponential backoff and raise
``RetriableError`` after the last try; 401/403 and other 4xx raise ``FatalSourceError``; a bad
configuration is a ``ConfigurationError``.
"""

from __future__ import annotations

import datetime as dt
import re
import ssl
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, ClassVar, Literal

import httpx
import numpy as np
from pydantic import Field, SecretStr, field_validator, model_validator

from connectors import exporter_profiles
from connectors.exporter_profile import (
    DEFAULT_NODE_LABELS,
    DEFAULT_POD_LABELS,
    ExporterProfile,
    Series,
    Stamp,
)
from connectors.hami_metrics import HamiCaps
from connectors.kube_state import KubeStateLabels
from connectors.prom_raw import HOUR_MS, LATE_MS, Held, RawReader, hold
from connectors.sdk import (
    ConfigurationError,
    ConnectorConfig,
    ConnectorError,
    DeviceInfo,
    FatalSourceError,
    RetriableError,
    SampleBatch,
    Sampling,
    devices_in,
    to_ms,
)

DAY_MS = 86_400_000
MAX_POINTS = 10_000  # per series and query; Prometheus' own limit is 11,000
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*,?)?$")


class HttpSourceConfig(ConnectorConfig):
    """HTTP, TLS and device keys shared by the ``prometheus`` and ``dcgm_scrape`` connectors.

    * ``url``: the server (``http(s)://host:port``, a path prefix allowed).
    * ``username`` + ``password`` (basic auth) or ``bearer_token``: secrets, masked in logs.
    * ``ca_file``: PEM bundle to verify the server with; ``insecure_skip_verify`` turns checks off.
    * ``timeout_s``: per request, seconds; ``max_retries``: retries after the first try on
      5xx/429/timeouts, with backoff from ``backoff_s`` doubling (capped at 30 s; a ``Retry-After``
      header wins).
    * ``presence_gap_s``: a silence up to this long keeps a GPU present but unobserved (seconds).
    * ``environment`` (default ``onprem``), ``region``, ``cluster``: stamped on every device
      (``cluster`` defaults to a series' ``cluster`` label); ``node_labels``: labels naming the node,
      first non-empty wins; default ``node``, ``kubernetes_node`` (relabeled from
      ``__meta_kubernetes_pod_node_name``), ``NODE_NAME``, ``hostname`` (exporter ≥ #655) and
      ``Hostname`` (before): the exporter fills its hostname label from ``NODE_NAME``, which the
      chart and the GPU Operator set from ``spec.nodeName`` (see :mod:`connectors.dcgm`).
    * ``pod_labels``: (namespace, pod, container) label-name triples naming a GPU's workload, the
      first triple whose pod label is set wins. Default: ``exported_namespace``/``exported_pod``/
      ``exported_container`` (Prometheus' names for the exporter's labels under the chart's
      default ``serviceMonitor.honorLabels: false``), then ``namespace``/``pod``/``container``
      (``honorLabels: true``, or a direct scrape), then ``pod_namespace``/``pod_name``/
      ``container_name`` (``--use-old-namespace``). A site that relabels the exporter's labels
      elsewhere lists its own, e.g. ``pod_labels = [["k8s_ns", "k8s_pod", "k8s_container"]]``.
      A pod label ``X`` on a series that also has ``exported_X`` is the scrape target's own label,
      never a workload.
    * ``exporter_pod_pattern``: a regular expression (searched) for the exporter's own pod name,
      which Prometheus attaches as ``pod`` to every series, idle GPUs included; such a pod is never
      a workload nor a node (old exporters wrote it as ``Hostname``). Default: the profile's —
      ``dcgm-exporter`` for ``dcgm`` (the GPU Operator's ``nvidia-dcgm-exporter-…``, the chart's
      ``dcgm-exporter-…``); ``""`` turns it off.
    * ``exporter``: which vendor's exporter the series come from, the name of its profile
      (:mod:`connectors.exporter_profiles`):
      ``dcgm`` (default, NVIDIA dcgm-exporter), ``amd`` (ROCm device-metrics-exporter),
      ``xpum`` (Intel XPU Manager exporter), ``xpumd`` (XPU Manager 2), ``ascend`` (npu-exporter);
      ``metric_prefix``: a prefix the exporter writes before every metric name (AMD's
      ``MetricsFieldPrefix``), default none.
    """

    url: str
    username: str | None = None
    password: SecretStr | None = None
    bearer_token: SecretStr | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0)
    presence_gap_s: float = Field(3600.0, gt=0)
    environment: Literal["onprem", "aws", "gcp", "azure"] = "onprem"
    region: str | None = None
    cluster: str | None = None
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS
    pod_labels: tuple[tuple[str, str, str], ...] = DEFAULT_POD_LABELS
    exporter_pod_pattern: str | None = None
    exporter: str = exporter_profiles.DEFAULT
    metric_prefix: str = Field("", pattern=r"^([A-Za-z_:][A-Za-z0-9_:]*)?$", max_length=100)

    @field_validator("exporter")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        if name not in exporter_profiles.names():
            raise ValueError(f"unknown exporter profile: one of {', '.join(exporter_profiles.names())}")
        return name

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("must be an http:// or https:// URL")
        return url.rstrip("/")

    @field_validator("exporter_pod_pattern")
    @classmethod
    def _regex(cls, pattern: str | None) -> str | None:
        if pattern is None:
            return None
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return pattern

    @model_validator(mode="after")
    def _one_auth(self) -> HttpSourceConfig:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together (basic auth)")
        if self.username is not None and self.bearer_token is not None:
            raise ValueError("give basic auth (username/password) or bearer_token, not both")
        return self

    def exporter_profile(self) -> ExporterProfile:
        """The configured exporter's profile (its metric prefix applied)."""
        return exporter_profiles.profile(self.exporter, self.metric_prefix)

    def stamp(self, node: str | None = None) -> Stamp:
        pattern = self.exporter_pod_pattern
        return Stamp(
            self.environment,
            self.region,
            self.cluster,
            node,
            self.node_labels,
            self.pod_labels,
            self.exporter_profile().exporter_pod_pattern if pattern is None else pattern,
        )

    def auth(self) -> httpx.Auth | None:
        if self.username is not None and self.password is not None:
            return httpx.BasicAuth(self.username, self.password.get_secret_value())
        if self.bearer_token is not None:
            return _Bearer(self.bearer_token.get_secret_value())
        return None


class PrometheusConfig(HttpSourceConfig):
    """``type = "prometheus"``: a Prometheus (or compatible) server scraping dcgm-exporter.

    ``step_s`` is the scrape interval in seconds (default 15): a reading stands for at most
    2 × ``step_s``. Set it to the real scrape interval: shorter leaves holes between scrapes
    (unobserved time), longer bridges outages. ``label_selector`` adds PromQL matchers to every
    query, with or without braces: ``{cluster="a", job=~"dcgm.*"}``. ``max_query_samples``
    (default 2,000,000, about 60 MB of JSON) bounds the samples one query asks for; keep it below
    the server's ``--query.max-samples`` (default 50,000,000). ``compress = true`` asks for gzipped
    answers (JSON shrinks ~6×, but Prometheus gzips on one core at ~5 MB/s): for a slow link only.
    ``kube_state_labels = true`` adds kube-state-metrics' ``kube_pod_labels`` and
    ``kube_namespace_labels`` to the pods as facts (:mod:`connectors.kube_state`), their series
    matched by ``kube_state_selector`` (``{job="kube-state-metrics"}``; not ``label_selector``).
    ``hami_caps = true`` prices HAMi pods at the cores HAMi's scheduler allocated them
    (``hami_vgpu_core_allocated_ratio``, :mod:`connectors.hami_metrics`), its series matched by
    ``hami_selector`` (``{job="hami-scheduler"}``; not ``label_selector``).
    """

    type: str = "prometheus"
    step_s: float = Field(15.0, ge=1.0, le=3600.0)
    label_selector: str = ""
    max_query_samples: int = Field(2_000_000, ge=10_000, le=50_000_000)
    compress: bool = False
    kube_state_labels: bool = False
    kube_state_selector: str = ""
    hami_caps: bool = False
    hami_selector: str = ""

    @field_validator("label_selector", "kube_state_selector", "hami_selector")
    @classmethod
    def _matchers(cls, selector: str) -> str:
        inner = selector.strip()
        if inner.startswith("{") and inner.endswith("}"):
            inner = inner[1:-1]
        if not _SELECTOR.match(inner):
            raise ValueError('must be PromQL label matchers such as {cluster="a", job=~"dcgm.*"}')
        return inner.strip().rstrip(",")


class _Bearer(httpx.Auth):
    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


def build_client(config: HttpSourceConfig) -> httpx.Client:
    """The production client: TLS per the config (auth is added per request, so it also applies
    to an injected client)."""
    verify: ssl.SSLContext | bool = True
    if config.insecure_skip_verify:
        verify = False
    elif config.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=config.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"ca_file {config.ca_file!r}: {exc}") from exc
    return httpx.Client(verify=verify, timeout=config.timeout_s)


def request_with_retries(
    client: httpx.Client,
    config: HttpSourceConfig,
    url: str,
    params: dict[str, Any],
    sleep: Callable[[float], None],
    accept: frozenset[int] = frozenset(),
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """GET ``url``: retried on 5xx/429/timeouts/connection errors, 401/403/4xx are fatal; a
    status in ``accept`` is returned for the caller to read."""
    auth = config.auth()
    problem = ""
    for attempt in range(config.max_retries + 1):
        wait = min(30.0, config.backoff_s * 2**attempt)
        try:
            response = client.get(url, params=params, auth=auth, timeout=config.timeout_s, headers=headers)
        except httpx.TransportError as exc:  # timeouts, refused connections, resets
            problem = f"{type(exc).__name__}: {exc}"
        else:
            code = response.status_code
            if code in accept:
                return response
            if code in (401, 403):
                raise FatalSourceError(f"{url}: HTTP {code} (check the credentials): {_detail(response)}")
            if code != 429 and code < 500:
                if code >= 400:
                    raise FatalSourceError(f"{url}: HTTP {code}: {_detail(response)}")
                return response
            problem = f"HTTP {code}: {_detail(response)}"
            retry_after = response.headers.get("Retry-After", "")
            if retry_after.isdigit():
                wait = min(60.0, float(retry_after))
        if attempt < config.max_retries:
            sleep(wait)
    raise RetriableError(f"{url}: {problem} (after {config.max_retries + 1} tries)")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    return str(body.get("error", body))[:200] if isinstance(body, dict) else str(body)[:200]


class PrometheusConnector:
    """dcgm-exporter history from Prometheus; see the module docstring."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = PrometheusConfig
    #: raw samples at the scrape's timestamps (True), or the older ``last_over_time`` grid
    raw_samples: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A service behind the Prometheus API (Azure Monitor, CloudWatch) keeps the grid until its
        # range queries and label metadata are checked: a subclass opts in by setting raw_samples.
        super().__init_subclass__(**kwargs)
        if "raw_samples" not in cls.__dict__:
            cls.raw_samples = False

    def __init__(
        self,
        config: PrometheusConfig,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.sampling = Sampling.every(config.step_s, presence_gap_s=config.presence_gap_s)
        self._owns_client = client is None
        self._client = client if client is not None else build_client(config)
        self._clock, self._sleep = clock, sleep
        self._step_ms = round(config.step_s * 1000)
        self._stamp = config.stamp()
        self._profile = config.exporter_profile()
        self._reader = RawReader(
            config.url, config.label_selector, self._get, config.max_query_samples, self._profile
        )
        self._held: Held | None = None
        kube_state = getattr(config, "kube_state_labels", False)  # a subclass's config may lack it
        self._kube_state = (
            KubeStateLabels(self._instant, getattr(config, "kube_state_selector", "")) if kube_state else None
        )
        hami = getattr(config, "hami_caps", False)
        self._hami = HamiCaps(self._instant, getattr(config, "hami_selector", "")) if hami else None
        #: why the last ``collect`` found nothing (for the run's MISSING_DATA message), else None
        self.missing_data_hint: str | None = None

    def close(self) -> None:
        """Close the HTTP client the connector made itself (an injected one is the caller's)."""
        self._reader.close()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> PrometheusConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> list[DeviceInfo]:
        """GPUs that reported in the last 10 minutes (or 4 steps, if longer)."""
        end = self._clock()
        start = end - dt.timedelta(milliseconds=max(600_000, 4 * self._step_ms))
        return devices_in(self.collect(start, end))

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Readings with ``start <= ts < end``, one batch per chunk of at most one day.

        Raw samples at the scrape's timestamps (see :mod:`connectors.prom_raw`); a subclass with
        ``raw_samples = False`` reads the ``last_over_time`` grid instead. When no field is stored
        in a chunk, ``missing_data_hint`` says what to check."""
        self.missing_data_hint = None
        if self.raw_samples:
            return self._collect_raw(to_ms(start), to_ms(end))
        return self._collect_grid(start, end)

    def _get(self, url: str, params: dict[str, str], accept: frozenset[int]) -> httpx.Response:
        # Prometheus gzips an answer for a client that accepts it, on one core: ~5 MB/s, slower
        # than the JSON itself crosses any LAN (a day of 200 GPUs: 1.0 s gzipped, 0.13 s plain).
        headers = None if self.config.compress else {"Accept-Encoding": "identity"}
        return request_with_retries(self._client, self.config, url, params, self._sleep, accept, headers)

    def _collect_raw(self, first_ms: int, end_ms: int) -> Iterator[SampleBatch]:
        read_at_ms = to_ms(self._clock())
        batches: list[SampleBatch] = []
        at = first_ms
        held = self._held
        if held is not None and held.serves(first_ms) and end_ms > first_ms:
            batch = held.batch(first_ms, end_ms)
            at = min(end_ms, held.until_ms)
            batches.append(batch)
            if batch.samples.height:
                yield batch
        self._held = None
        while at < end_ms:
            chunk_end = min(end_ms, at + DAY_MS)
            names = self._reader.present(at, chunk_end)
            series = [s for name in names for s in self._reader.read(name, at, chunk_end)]
            if not names:
                self.missing_data_hint = self._hint(at, chunk_end - self._step_ms)
            batch = self._profile.to_batch(self._profile.canonical(series), self._stamp)
            batch = self._joined(batch, at, chunk_end)
            batches.append(batch)
            if batch.samples.height:
                yield batch
            at = chunk_end
        # the tail the next day's read starts in (its presence gap of context before midnight)
        keep_ms = 2 * round(self.sampling.presence_gap_s * 1000) + 2 * self._step_ms + HOUR_MS
        trusted_ms = min(end_ms, read_at_ms - LATE_MS)
        if trusted_ms > max(first_ms, end_ms - keep_ms):
            self._held = hold(batches, max(first_ms, end_ms - keep_ms), trusted_ms)

    def _collect_grid(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        step = self._step_ms
        first, last = -(-to_ms(start) // step) * step, (to_ms(end) - 1) // step * step
        per_chunk = min(DAY_MS // step, MAX_POINTS)
        chunk_first = first
        while chunk_first <= last:
            chunk_last = min(last, chunk_first + (per_chunk - 1) * step)
            names = self._profile.stored_names
            series = [s for name in names for s in self._query(name, chunk_first, chunk_last)]
            if not series and self._profile.any_case:
                series = [s for name in names for s in self._query(name, chunk_first, chunk_last, True)]
            if not series:
                self.missing_data_hint = self._hint(chunk_first, chunk_last)
            batch = self._profile.to_batch(self._profile.canonical(series), self._stamp)
            batch = self._joined(batch, chunk_first, chunk_last + step)
            if batch.samples.height:
                yield batch
            chunk_first = chunk_last + step

    def _joined(self, batch: SampleBatch, first_ms: int, end_ms: int) -> SampleBatch:
        """The chunk's batch with what other series say of its pods: kube-state-metrics' labels
        as facts, HAMi's core allocations as shares (each where configured)."""
        if self._kube_state is not None:
            batch = self._kube_state.join(batch, first_ms, end_ms)
        if self._hami is not None:
            batch = self._hami.join(batch, first_ms, end_ms)
        return batch

    def _hint(self, first_ms: int, last_ms: int) -> str:
        where = f"{{{self.config.label_selector}}}" if self.config.label_selector else "any labels"
        span = f"{dt.datetime.fromtimestamp(first_ms / 1000, dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
        hours = (last_ms - first_ms) / 3_600_000 + self._step_ms / 3_600_000
        return self._profile.missing_hint(where, span, hours, self.config.url)

    def _instant(self, query: str, at_s: float) -> list[Any]:
        """An instant query's vector (``/api/v1/query``), retried as every request is."""
        url = f"{self.config.url}/api/v1/query"
        response = self._get(url, {"query": query, "time": f"{at_s:.3f}"}, frozenset())
        try:
            body = response.json()
            if body.get("status") != "success" or body["data"]["resultType"] != "vector":
                raise FatalSourceError(f"{url}: {body.get('errorType')}: {body.get('error')}")
            result = body["data"]["result"]
            if not isinstance(result, list):
                raise TypeError("data.result is not a list")
            return result
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConnectorError(f"{url}: unreadable query answer: {exc}") from exc

    def _query(self, field: str, first_ms: int, last_ms: int, any_case: bool = False) -> list[Series]:
        matchers = [self.config.label_selector] if self.config.label_selector else []
        if any_case:  # Prometheus anchors the regex; (?i) is RE2's case-insensitive flag
            selector = "{" + ", ".join([f'__name__=~"(?i){field}"', *matchers]) + "}"
            metric = ""
        else:
            selector = f"{{{matchers[0]}}}" if matchers else ""
            metric = field
        params = {
            "query": f"last_over_time({metric}{selector}[{self._step_ms}ms])",
            "start": f"{first_ms / 1000:.3f}",
            "end": f"{last_ms / 1000:.3f}",
            "step": f"{self._step_ms / 1000:.3f}",
        }
        url = f"{self.config.url}/api/v1/query_range"
        response = request_with_retries(self._client, self.config, url, params, self._sleep)
        try:
            body = response.json()
            if body.get("status") != "success" or body["data"]["resultType"] != "matrix":
                raise FatalSourceError(f"{url}: {body.get('errorType')}: {body.get('error')}")
            series = []
            for item in body["data"]["result"]:  # one step per series
                pairs = np.asarray(item["values"], dtype=object).reshape(-1, 2)
                ts = np.round(pairs[:, 0].astype(np.float64) * 1000).astype(np.int64)
                series.append(Series(field, item["metric"], ts, pairs[:, 1].astype(np.float64)))
            return series
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConnectorError(f"{url}: unreadable query_range answer: {exc}") from exc
