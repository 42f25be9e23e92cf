"""``dcgm_scrape``: read a GPU exporter's ``/metrics`` page directly, without Prometheus.

dcgm-exporter by default; another vendor's exporter with ``exporter = "<profile>"``
(:mod:`connectors.exporter_profile`).

A scrape is *now*: it cannot answer for a past window. So the class's real interface is
:meth:`DcgmScrapeConnector.scrape` — one reading of every GPU at the scrape time — and it is meant
for the node agent (``gpu-ledger agent``), which samples a source every ``interval_s`` seconds and
ships the batches to the ledger; the ledger then reads those samples as a period-``interval_s``
source. :meth:`collect` exists to satisfy the ``MetricsConnector`` Protocol: it scrapes when *now*
lies in the window asked for and yields nothing otherwise. Use the ``prometheus`` connector for
history.

The text is parsed with ``prometheus_client``'s parser; the mapping to samples (units, MIG, pods,
node) is the profile's (:mod:`connectors.dcgm` for dcgm-exporter), shared with the ``prometheus``
connector.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import ClassVar, Literal

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field

from connectors import dcgm
from connectors.exporter_profile import ExporterProfile, Series, Stamp
from connectors.prometheus import HttpSourceConfig, build_client, request_with_retries
from connectors.sdk import ConnectorConfig, DeviceInfo, SampleBatch, Sampling, to_ms


class DcgmScrapeConfig(HttpSourceConfig):
    """``type = "dcgm_scrape"``: one dcgm-exporter, scraped directly (by the node agent).

    ``url`` is the exporter's ``/metrics`` (e.g. ``http://127.0.0.1:9400/metrics``);
    ``interval_s`` is how often the agent scrapes it, in seconds: a reading stands for at most
    2 × ``interval_s``. ``node`` names the node the agent runs on; it overrides ``node_labels``
    (the exporter's ``hostname``/``Hostname`` label is the node where ``NODE_NAME`` is set, as the
    chart and the GPU Operator do; exporters before #129 wrote their own pod there).
    Plus the HTTP, TLS and device keys of :class:`connectors.prometheus.HttpSourceConfig`.
    """

    type: str = "dcgm_scrape"
    interval_s: float = Field(15.0, ge=1.0, le=3600.0)
    node: str | None = None


def parse_metrics(
    text: str, ts_ms: int, stamp: Stamp, profile: ExporterProfile = dcgm.PROFILE
) -> SampleBatch:
    """A ``/metrics`` page of ``profile``'s exporter as samples at ``ts_ms`` (a sample's own
    timestamp wins where it has one)."""
    series: list[Series] = []
    for family in text_string_to_metric_families(text):
        name = profile.field_of(family.name)  # DCGM: any case, some pipelines lower-case (#272)
        if name is None:
            continue
        for sample in family.samples:  # one per GPU or MIG instance
            if sample.name.endswith("_created"):
                continue
            at = ts_ms if sample.timestamp is None else round(float(sample.timestamp) * 1000)
            series.append(
                Series(name, sample.labels, np.array([at], np.int64), np.array([sample.value], float))
            )
    return profile.to_batch(series, stamp)


class DcgmScrapeConnector:
    """One dcgm-exporter ``/metrics`` endpoint; see the module docstring for when to use it."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = DcgmScrapeConfig

    def __init__(
        self,
        config: DcgmScrapeConfig,
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.sampling = Sampling.every(config.interval_s, presence_gap_s=config.presence_gap_s)
        self._owns_client = client is None
        self._client = client if client is not None else build_client(config)
        self._clock, self._sleep = clock, sleep
        self._stamp = config.stamp(node=config.node)
        self._profile = config.exporter_profile()

    def scrape(self) -> SampleBatch:
        """Every GPU's reading now, timestamped with the clock at the request."""
        now = self._clock()
        response = request_with_retries(self._client, self.config, self.config.url, {}, self._sleep)
        return parse_metrics(response.text, to_ms(now), self._stamp, self._profile)

    def close(self) -> None:
        """Close the HTTP client the connector made itself (an injected one is the caller's)."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> DcgmScrapeConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def discover(self) -> list[DeviceInfo]:
        return self.scrape().devices

    # The node agent's Sampler interface (service/agent/sampler.py): with
    # `source = "connectors.dcgm_scrape:DcgmScrapeConnector"` the agent scrapes an exporter every
    # period and ships the readings — a site without Prometheus still gets a ledger.
    devices = discover

    def sample(self) -> SampleBatch:
        return self.scrape()

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """A scrape when ``start <= now < end``; nothing otherwise (a scrape has no history)."""
        if start <= self._clock() < end:
            yield self.scrape()
