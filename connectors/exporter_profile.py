"""One vendor's Prometheus exporter, as the ``prometheus`` and ``dcgm_scrape`` connectors read it.

A fleet's GPUs are scraped by their vendor's exporter: NVIDIA's dcgm-exporter, AMD's ROCm
device-metrics-exporter, Intel's XPU Manager exporter, Huawei's npu-exporter. The HTTP side of
reading them is the same (Prometheus' API for history, a ``/metrics`` page for a scrape); what
differs is *which series to ask for* and *how a series becomes ledger samples*. An
:class:`ExporterProfile` holds exactly that, and nothing else:

* ``fields`` — the exporter's metric names the connectors ask for (as the exporter spells them
  by default). ``any_case`` says whether a case variant of a name is the same field (some
  pipelines lower-case DCGM's names, dcgm-exporter issue #272); ``with_prefix`` gives the
  profile of an exporter configured to prefix every name (AMD's ``MetricsFieldPrefix``).
* ``to_batch(series, stamp)`` — the mapping: :class:`Series` (one field's readings of one label
  set, in the exporter's own unit, ``field`` already the canonical name from ``fields``) and the
  source's :class:`Stamp` → one columnar :class:`~connectors.sdk.SampleBatch` with devices
  (their ``vendor`` set) and workloads. All vendor knowledge — units, which label names the device,
  partitions/MIG, which counter is "busy" — lives in it.
* ``vendor``, ``exporter``, ``exporter_pod_pattern`` (the exporter's own pod name, never a
  workload nor a node, when ``exporter_pod_pattern`` is not configured) and ``check_query`` (what
  a missing-data message tells the operator to run).

A profile is registered by name in :mod:`connectors.exporter_profiles` and chosen per connector
with ``exporter = "<name>"`` (default ``dcgm``). A new vendor is one module defining a ``PROFILE``
plus one line there; :mod:`connectors.exporter_map` is the generic mapping for exporters that
write one series per device and field with plain labels (no MIG-style instance rules), which a
profile may use as its ``to_batch`` through an :class:`~connectors.exporter_map.ExporterLabels`
description. :mod:`connectors.dcgm` is the NVIDIA instance with its own mapping (MIG, time-shared
GPUs); :mod:`connectors.rocm_exporter` the AMD one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from connectors.sdk import SampleBatch, WorkloadInfo

DEFAULT_NODE_LABELS = ("node", "kubernetes_node", "NODE_NAME", "hostname", "Hostname")
#: (namespace, pod, container) label triples, first pod found wins
DEFAULT_POD_LABELS: tuple[tuple[str, str, str], ...] = (
    ("exported_namespace", "exported_pod", "exported_container"),
    ("namespace", "pod", "container"),
    ("pod_namespace", "pod_name", "container_name"),
)
DEFAULT_EXPORTER_POD_PATTERN = r"dcgm-exporter"


@dataclass(frozen=True, slots=True)
class Series:
    """One exporter time series: its field name, its labels and its readings (ms, raw unit)."""

    field: str
    labels: Mapping[str, str]
    ts_ms: np.ndarray  # int64
    values: np.ndarray  # float64


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the source's configuration adds to every device, and how its labels are read."""

    environment: Literal["onprem", "aws", "gcp", "azure"] = "onprem"
    region: str | None = None
    cluster: str | None = None
    node: str | None = None  # overrides node_labels (the node agent knows where it runs)
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS
    pod_labels: tuple[tuple[str, str, str], ...] = DEFAULT_POD_LABELS
    exporter_pod_pattern: str = DEFAULT_EXPORTER_POD_PATTERN
    _exporter: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pattern = self.exporter_pod_pattern or r"(?!)"  # '' matches nothing
        object.__setattr__(self, "_exporter", re.compile(pattern))

    def is_exporter_pod(self, name: str) -> bool:
        return self._exporter.search(name) is not None


def target_pods(series: Iterable[Mapping[str, str]], stamp: Stamp) -> frozenset[str]:
    """Pods that are a scrape target's own label: ``X`` of a ``pod_labels`` pod label ``X`` on a
    series that also carries ``exported_X`` (Prometheus renamed the exporter's ``X`` there)."""
    found: set[str] = set()
    names = [pod for _, pod, _ in stamp.pod_labels]
    for labels in series:
        for name in names:
            value = labels.get(name)
            if value and labels.get(f"exported_{name}"):
                found.add(value)
    return frozenset(found)


def k8s_workload(ns: str, pod: str, container: str) -> WorkloadInfo:
    """The workload ``k8s:<ns>/<pod>/<container>`` an exporter's pod labels name, with the
    attribution facts ``k8s.namespace``/``k8s.pod``/``k8s.container`` it has (docs/attribution.md)."""
    names = {"k8s.namespace": ns, "k8s.pod": pod, "k8s.container": container}
    facts = {k: v for k, v in names.items() if v}
    return WorkloadInfo(f"k8s:{ns}/{pod}/{container}", namespace=ns or None, workload=pod, facts=facts)


ToBatch = Callable[[Iterable[Series], Stamp], SampleBatch]


@dataclass(frozen=True, slots=True)
class ExporterProfile:
    """How one vendor's exporter is read (see the module docstring)."""

    name: str
    vendor: str
    exporter: str
    fields: tuple[str, ...]
    to_batch: ToBatch
    exporter_pod_pattern: str
    check_query: str
    any_case: bool = False
    prefix: str = ""
    #: how a missing-data message names the fields (default: the first two)
    shown_fields: str = ""

    def with_prefix(self, prefix: str) -> ExporterProfile:
        """This profile for an exporter that writes ``prefix`` before every metric name."""
        return replace(self, prefix=prefix)

    @property
    def stored_names(self) -> tuple[str, ...]:
        """The names as the exporter writes them (prefix included)."""
        return tuple(self.prefix + f for f in self.fields)

    def field_of(self, stored: str) -> str | None:
        """The canonical field a stored metric name is (its prefix dropped; any case where the
        profile allows it), or None when it is none of this profile's."""
        if not stored.startswith(self.prefix) and not (
            self.any_case and stored.lower().startswith(self.prefix.lower())
        ):
            return None
        bare = stored[len(self.prefix) :]
        if bare in self.fields:
            return bare
        if self.any_case:
            folded = bare.casefold()
            return next((f for f in self.fields if f.casefold() == folded), None)
        return None

    def canonical(self, series: Iterable[Series]) -> list[Series]:
        """``series`` renamed to their canonical fields; series of other metrics dropped."""
        out = []
        for s in series:  # one step per series, never per sample
            name = self.field_of(s.field)
            if name is not None:
                out.append(s if name == s.field else replace(s, field=name))
        return out

    def missing_hint(self, where: str, start: str, hours: float, url: str) -> str:
        """What a run that found none of this exporter's series tells the operator to check."""
        shown = self.shown_fields or ", ".join(self.stored_names[:2])
        case = " in any case" if self.any_case else ""
        return (
            f"no {self.exporter} series ({shown}, …{case}) with {where} from {start} for {hours:g} h "
            f"at {url}: check that Prometheus scrapes {self.exporter} there (`{self.check_query}`), "
            "that label_selector matches its series, and that the window is within the server's retention"
        )
