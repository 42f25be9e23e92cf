"""The facts half of the connector contract: sources that say who owns workloads, and nothing else.

A scheduler's accounting (Slurm's ``sacct``), an inventory or a CMDB knows which job or pod belongs
to which account, partition or user, but measures no GPU. Such a source is a
:class:`WorkloadFactsSource`: asked for a window, it returns one :class:`FactsBatch` of
``WorkloadInfo`` — the workload keys the metrics sources use (``slurm:<jobid>``, ``hpc:<jobid>``,
``k8s:…``) with their attribution facts. The ingestor keeps them per (connector, workload key), and
``[[attribution]]`` rules name the owner of every ledger row whose workload key they describe, at
ingest and again on ``gpu-ledger reattribute`` (docs/attribution.md).

Nothing is lost: every record the source read is accepted, skipped for a stated reason (a job
step, a job that never started, a job without GPUs) or refused with where and why, and
``read == accepted + sum(skipped) + len(refused)`` holds for every batch (checked on creation).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

from connectors.sdk.metrics import WorkloadInfo

if TYPE_CHECKING:
    from connectors.sdk.billing import RefusedRow
    from connectors.sdk.config import ConnectorConfig


@dataclass(frozen=True, slots=True)
class FactsBatch:
    """What a facts source said for a window.

    ``workloads``: one ``WorkloadInfo`` per workload key (its ``facts``, and the owner the source
    itself names, e.g. the job's user). ``read``: records read; ``accepted``: records that gave
    workloads; ``skipped``: reason → records read and deliberately left out; ``refused``: records
    that could not be read, each with file, line, field and reason (quarantined by the ingestor).
    """

    workloads: list[WorkloadInfo]
    read: int
    accepted: int
    skipped: Mapping[str, int] = field(default_factory=dict)
    refused: list[RefusedRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        counted = self.accepted + sum(self.skipped.values()) + len(self.refused)
        if counted != self.read or min(self.accepted, self.read, *self.skipped.values(), 0) < 0:
            raise ValueError(
                f"facts batch counts do not add up: read {self.read} != accepted {self.accepted} "
                f"+ skipped {sum(self.skipped.values())} + refused {len(self.refused)}"
            )


@runtime_checkable
class WorkloadFactsSource(Protocol):
    """A source of attribution facts about workloads (no samples, no money)."""

    kind: ClassVar[Literal["facts"]]
    config_model: ClassVar[type[ConnectorConfig]]

    def facts(self, start: dt.datetime, end: dt.datetime) -> FactsBatch:
        """Facts about the workloads that ran in ``[start, end)`` (UTC), as far as the source knows.

        A source may also define ``saved(batch)``: the ingestor calls it once the batch it just
        returned is committed, so a source that watches (``kubernetes``) can answer only changes."""
        ...
