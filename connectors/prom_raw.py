"""Raw samples from a Prometheus server: what the ``prometheus`` connector reads, and how.

* **Which fields.** One metadata call per chunk, ``/api/v1/label/__name__/values`` with
  ``match[]={__name__=~"(?i)(DCGM_FI_DEV_GPU_UTIL|…)", <label_selector>}`` (the fields of the
  connector's exporter profile, :mod:`connectors.exporter_profile`) and the chunk's
  ``start``/``end``, names the exporter fields stored there, in whatever case they are stored;
  only those are asked for. The exporter's own spellings win: a case variant
  (``dcgm_fi_dev_gpu_util``, exporter issue #272) is read only in a chunk where no field is stored
  under its exporter name, and only for a profile whose names are case-insensitive (a fleet stored
  in both cases needs one connector per spelling, split by ``label_selector``).
* **Raw samples.** A field is read with an instant query of a range selector,
  ``NAME{<label_selector>}[<span>ms]`` at the span's last millisecond: the matrix holds every
  stored sample at the scrape's own timestamp (no grid, no lookback, staleness markers left out).
  Prometheus 2 includes both ends of a range and Prometheus 3 only the right one, so the range asked
  for is one millisecond longer than needed and the extra sample is dropped here.
* **Query size.** Prometheus refuses a query that would hold more than ``--query.max-samples``
  (default 50 M) samples, and a large answer costs memory on both sides. So a chunk is read in
  spans of at most ``max_query_samples`` samples, sized from the samples per millisecond the last
  answer for that field held (the first span of a run is one hour); an answer refused for holding
  too many samples is asked again in halves. Once a field's rate is known its chunk is asked as at
  least ``PARALLEL`` spans at once, so that Prometheus encodes one while this process decodes
  another (10 days of 200 GPUs: 5.6 → 4.3 s, medians of 3 on a loaded 2-core machine).
* **Context held, not re-read.** The ingestor reads one presence gap before and after every day
  (service/ledger/ingest.py), so consecutive days overlap by two presence gaps. The last
  ``2 × presence + 1 h`` of every read are held (already mapped, as sample rows) and the next
  ``collect`` that starts inside them gets them from memory and reads only what follows. Held rows
  are trusted only for times at least ``LATE_MS`` before the read (samples may still arrive for
  the last minutes) and only for ``HELD_FOR_S`` after it; a new connector (a new run, a restart
  after a crash) holds nothing and reads all the context it needs.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import orjson
import polars as pl

from connectors.exporter_profile import ExporterProfile, Series
from connectors.prom_decode import MatrixError, decode_matrix
from connectors.sdk import ConnectorError, DeviceInfo, SampleBatch, WorkloadInfo, empty_samples

HOUR_MS = 3_600_000
FIRST_SPAN_MS = HOUR_MS  # a field's first span in a run, before its rate is known
MIN_SPAN_MS = 1_000
LATE_MS = 15 * 60_000  # samples younger than this at read time may still be arriving
HELD_FOR_S = 600.0
PARALLEL = 2  # spans of one field asked at once
_TOO_MANY = re.compile(r"too many samples", re.IGNORECASE)
#: Gets ``url`` with ``params``; a status in ``accept`` is returned instead of raising.
Get = Callable[[str, dict[str, str], frozenset[int]], httpx.Response]


def stored_fields(names: Iterable[str], profile: ExporterProfile) -> list[str]:
    """Names to read of those stored: exporter spellings if any is stored, else case variants."""
    known = sorted({n for n in names if profile.field_of(n) is not None})
    spelled = set(profile.stored_names)
    exact = [n for n in known if n in spelled]
    return exact or known


class RawReader:
    """Reads one field's raw samples over a span, in queries Prometheus and memory can hold."""

    def __init__(
        self, base_url: str, selector: str, get: Get, max_query_samples: int, profile: ExporterProfile
    ) -> None:
        self._url, self._selector, self._get = base_url, selector, get
        self._profile = profile
        self._max_samples = max_query_samples
        self._rate: dict[str, float] = {}  # samples per ms of span, per field name, last seen
        self._pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="prometheus-query")

    def present(self, first_ms: int, end_ms: int) -> list[str]:
        """Exporter fields with samples stored in ``[first_ms, end_ms)``, as stored."""
        alternatives = "|".join(self._profile.stored_names)  # metric names: no regex metacharacters
        matchers = [f'__name__=~"(?i)({alternatives})"', *([self._selector] if self._selector else [])]
        params = {
            "match[]": "{" + ", ".join(matchers) + "}",
            "start": f"{first_ms / 1000:.3f}",
            "end": f"{(end_ms - 1) / 1000:.3f}",
        }
        url = f"{self._url}/api/v1/label/__name__/values"
        response = self._get(url, params, frozenset())
        try:
            body = orjson.loads(response.content)
            if body.get("status") != "success" or not isinstance(body.get("data"), list):
                raise ConnectorError(f"{url}: {body.get('errorType')}: {body.get('error')}")
            return stored_fields((str(name) for name in body["data"]), self._profile)
        except (ValueError, AttributeError) as exc:
            raise ConnectorError(f"{url}: unreadable label values answer: {exc}") from exc

    def read(self, name: str, first_ms: int, end_ms: int) -> list[Series]:
        """Every stored sample of field ``name`` with ``first_ms <= ts < end_ms``: once the field's
        rate is known, in ``PARALLEL`` or more spans asked at once (the server encodes one while
        this process decodes another)."""
        rate = self._rate.get(name)
        if rate is None:
            return self._serial(name, first_ms, end_ms)
        parts = max(PARALLEL, math.ceil(rate * (end_ms - first_ms) / self._max_samples))
        width = max(MIN_SPAN_MS, -(-(end_ms - first_ms) // parts))
        spans = [(a, min(a + width, end_ms)) for a in range(first_ms, end_ms, width)]
        series: list[Series] = []
        for (a, b), found in zip(spans, self._pool.map(lambda s: self._span(name, *s), spans), strict=True):
            series.extend(self._serial(name, a, b) if found is None else found)  # refused: halves
        self._rate[name] = max(sum(s.ts_ms.size for s in series) / (end_ms - first_ms), 1e-9)
        return series

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _serial(self, name: str, first_ms: int, end_ms: int) -> list[Series]:
        series: list[Series] = []
        at = first_ms
        while at < end_ms:
            rate = self._rate.get(name)
            span = FIRST_SPAN_MS if rate is None else int(self._max_samples / max(rate, 1e-9))
            span = min(end_ms - at, max(MIN_SPAN_MS, span))
            found = self._span(name, at, at + span)
            if found is None:  # refused: too many samples for the server
                self._rate[name] = max(rate or 0.0, 2 * self._max_samples / span)
                if span <= MIN_SPAN_MS:
                    raise ConnectorError(
                        f"{self._url}: {name} holds more samples in {MIN_SPAN_MS} ms than the server "
                        "allows in one query (--query.max-samples)"
                    )
                continue
            samples = sum(s.ts_ms.size for s in found)
            self._rate[name] = max(samples / span, 1e-9)
            series.extend(found)
            at += span
        return series

    def _span(self, name: str, first_ms: int, end_ms: int) -> list[Series] | None:
        selector = f"{{{self._selector}}}" if self._selector else ""
        params = {
            # one ms more than the span: Prometheus 2 includes the range's left end, 3 does not
            "query": f"{name}{selector}[{end_ms - first_ms + 1}ms]",
            "time": f"{(end_ms - 1) / 1000:.3f}",
        }
        url = f"{self._url}/api/v1/query"
        response = self._get(url, params, frozenset({422}))
        if response.status_code == 422:
            if _TOO_MANY.search(response.text):
                return None
            raise ConnectorError(f"{url}: HTTP 422: {response.text[:200]}")
        try:
            matrix = decode_matrix(response.content)
        except MatrixError as exc:
            raise ConnectorError(f"{url}: unreadable query answer: {exc}") from exc
        keep = matrix.ts_ms >= first_ms  # the extra millisecond on the left
        found = []
        for i, labels in enumerate(matrix.labels):
            lo, hi = matrix.offsets[i], matrix.offsets[i + 1]
            mask = keep[lo:hi]
            ts, values = matrix.ts_ms[lo:hi], matrix.values[lo:hi]
            if not mask.all():
                ts, values = ts[mask], values[mask]
            if ts.size:
                found.append(Series(name, labels, ts, values))
        return found


@dataclass(frozen=True, slots=True)
class Held:
    """Sample rows of ``[first_ms, until_ms)`` kept from the last read, with their descriptions."""

    first_ms: int
    until_ms: int
    samples: pl.DataFrame
    devices: dict[str, DeviceInfo]
    workloads: dict[str, WorkloadInfo]
    read_at: float  # time.monotonic() of the read

    def serves(self, first_ms: int) -> bool:
        fresh = time.monotonic() - self.read_at <= HELD_FOR_S
        return fresh and self.first_ms <= first_ms < self.until_ms

    def batch(self, first_ms: int, end_ms: int) -> SampleBatch:
        """The held rows in ``[first_ms, min(end_ms, until_ms))``."""
        ts = pl.col("ts_ms")
        rows = self.samples.filter((ts >= first_ms) & (ts < min(end_ms, self.until_ms)))
        return _described(rows, self.devices, self.workloads)


def hold(batches: list[SampleBatch], first_ms: int, until_ms: int) -> Held:
    """The rows of ``batches`` in ``[first_ms, until_ms)``, to serve the next read from."""
    ts = pl.col("ts_ms")
    parts: list[pl.DataFrame] = []
    devices: dict[str, DeviceInfo] = {}
    workloads: dict[str, WorkloadInfo] = {}
    for batch in batches:
        part = batch.samples.filter((ts >= first_ms) & (ts < until_ms))
        if part.height:
            parts.append(part)
            devices.update((d.device_id, d) for d in batch.devices)
            workloads.update((w.workload_key, w) for w in batch.workloads)
    samples = pl.concat(parts) if parts else empty_samples()
    return Held(first_ms, until_ms, samples, devices, workloads, time.monotonic())


def _described(
    rows: pl.DataFrame, devices: dict[str, DeviceInfo], workloads: dict[str, WorkloadInfo]
) -> SampleBatch:
    """A batch of ``rows`` with the descriptions of the devices and workloads they name."""
    used_devices = set(rows["device_id"].unique().to_list())
    used_workloads = set(rows["workload_key"].unique().to_list())
    return SampleBatch(
        rows,
        [d for k, d in devices.items() if k in used_devices],
        [w for k, w in workloads.items() if k in used_workloads],
    )
