"""Ingesting a facts connector (``kind = "facts"``: the ``slurm`` connector): one run per window.

The connector's ``facts(start, end)`` (connectors.sdk.facts) gives workloads with their attribution
facts; they are kept in ``workload_fact`` under the connector's name (one upsert per workload
key), where the rules find them for the metrics sources' rows with the same key
(service.attribution.shared_facts) — at their next ingest, and for rows already in the ledger on
``gpu-ledger reattribute``. Given the ``[[attribution]]`` rules, the run then re-applies them to
the ledger rows of its window (``service.attribution.reattribute``), so rows a metrics source wrote
before the facts arrived (a job's first minutes: sacct is asked every 15 minutes) get their owner
without anyone running ``reattribute``; nothing else of a row changes. Records the connector refused go to the
``rejection`` table with file, line, field and reason; the run's counts are ``read`` = every record
read (skipped ones count as accepted: they were read and deliberately left out), ``rejected`` =
refused. A run with refusals ends DEGRADED (the facts that were read are kept; last_error says how
many were refused and where to look), one without OK; either moves the watermark to the window's
end. A connector with a ``saved(batch)`` method (``kubernetes``: it answers only what changed) is
told once the batch's facts are committed; a run that fails before never tells it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine

from connectors.sdk import ConnectorStatus
from connectors.sdk.facts import WorkloadFactsSource
from service.attribution.ledger import save_fact_scope, save_workload_facts
from service.attribution.reattribute import reattribute
from service.attribution.rules import AttributionRule
from service.dbtypes import table_of
from service.models import Rejection
from service.run_recorder import RunRecorder


@dataclass(frozen=True, slots=True)
class FactsResult:
    """What one facts run did (``status`` OK or DEGRADED; the run's id for its rejections)."""

    run_id: int
    status: ConnectorStatus
    read: int
    accepted: int
    refused: int
    workloads: int
    skipped: dict[str, int] = field(default_factory=dict)
    ledger_rows: int = 0  # ledger rows whose owner the new facts changed

    def summary(self) -> str:
        skipped = ", ".join(f"{why}: {n}" for why, n in sorted(self.skipped.items()))
        return (
            f"{self.status}: {self.read} records read, {self.accepted} kept as facts of {self.workloads} "
            f"workloads, {self.refused} refused, {self.ledger_rows} ledger rows re-owned (run {self.run_id})"
            + (f"; skipped {skipped}" if skipped else "")
        )


def ingest_facts(
    engine: Engine,
    name: str,
    connector: WorkloadFactsSource,
    start: dt.datetime,
    end: dt.datetime,
    *,
    attribution_rules: Sequence[AttributionRule] = (),
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> FactsResult:
    """Run facts connector ``name`` over ``[start, end)`` (module docstring)."""
    type_name = str(getattr(getattr(connector, "config", None), "type", "facts"))
    with RunRecorder(engine, name, type_name, start, end, clock) as run:
        batch = connector.facts(start, end)
        workloads = {w.workload_key: w for w in batch.workloads}
        with engine.begin() as conn:
            describes = getattr(getattr(connector, "config", None), "describes", None)
            save_fact_scope(conn, name, describes, clock())  # before the facts: they are read by it
            kept = save_workload_facts(conn, name, workloads, list(workloads), clock())
            if batch.refused:
                conn.execute(
                    table_of(Rejection).insert(),
                    [
                        {
                            "run_id": run.run_id,
                            "connector": name,
                            "file": r.file[:500],
                            "line": r.line,
                            "field": (r.column or None) and r.column[:100],
                            "reason": r.reason,
                            "raw": r.raw,
                        }
                        for r in batch.refused
                    ],
                )
        saved = getattr(connector, "saved", None)
        if callable(saved):  # committed: a source that answers only changes may forget them now
            saved(batch)
        # No new facts, nothing to re-decide (the kubernetes connector's quiet minutes).
        rerun = attribution_rules and workloads
        moved = reattribute(engine, attribution_rules, start, end).rows_changed if rerun else 0
        run.counts.add(
            accepted=batch.read - len(batch.refused), rejected=len(batch.refused), ledger_rows=moved
        )
        status = ConnectorStatus.DEGRADED if batch.refused else ConnectorStatus.OK
        error = (
            f"{len(batch.refused)} of {batch.read} records refused (rejection table, run {run.run_id}); "
            f"first: {batch.refused[0].message()}"
            if batch.refused
            else None
        )
        run.finish(status, watermark=end, error=error)
    return FactsResult(
        run_id=run.run_id,
        status=status,
        read=batch.read,
        accepted=batch.accepted,
        refused=len(batch.refused),
        workloads=kept,
        skipped=dict(batch.skipped),
        ledger_rows=moved,
    )
