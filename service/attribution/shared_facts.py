"""Facts one source keeps about a workload key that another source's rows carry.

A facts connector (``slurm``: a scheduler's accounting) measures nothing: its facts are kept in
``workload_fact`` under its own name and describe keys the metrics sources write
(``slurm:<jobid>`` from the node agent, ``hpc:<jobid>`` from dcgm-exporter). When the rules name the
owner of a metrics source's rows — at ingest and on ``reattribute`` — the facts of every *other*
source about the same key are merged in: the row's own source wins a fact key, then the most
recently updated other source. A facts connector whose ``describes`` names the metrics sources
of its own cluster (``fact_scope``, kept by each of its runs) lends its facts to those sources'
rows only: two clusters' jobs numbered alike keep their own accounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import polars as pl
from sqlalchemy import Connection, select

from connectors.sdk import WorkloadInfo
from service.attribution.engine import facts_series
from service.dbtypes import table_of
from service.models import FactScope, WorkloadFact

#: Keys per ``IN (…)``: under both databases' parameter limits.
KEY_CHUNK = 5_000


def other_facts(conn: Connection, source: str, keys: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per workload key, the facts sources other than ``source`` keep about it (a later update
    wins a fact key); keys nobody else describes are absent."""
    t, scope = table_of(WorkloadFact), table_of(FactScope)
    names = sorted({k for k in keys if k})
    if not names:
        return {}
    scoped = {s: set(d) for s, d in conn.execute(select(scope.c.source, scope.c.describes)) if d is not None}
    found: list[Any] = []
    for i in range(0, len(names), KEY_CHUNK):
        stmt = select(t.c.workload_key, t.c.facts, t.c.updated_at, t.c.source).where(
            t.c.workload_key.in_(names[i : i + KEY_CHUNK]), t.c.source != source, t.c.facts.is_not(None)
        )
        found += list(conn.execute(stmt))
    merged: dict[str, dict[str, str]] = {}
    for key, facts, _updated, other in sorted(found, key=lambda r: (r[2], r[3])):
        if other in scoped and source not in scoped[other]:
            continue  # another cluster's job with the same number
        if isinstance(facts, Mapping):
            merged.setdefault(key, {}).update({str(k): str(v) for k, v in facts.items()})
    return merged


def with_other_facts(
    workloads: Mapping[str, WorkloadInfo], others: Mapping[str, Mapping[str, str]]
) -> dict[str, WorkloadInfo]:
    """``workloads`` with the other sources' facts merged in, their own facts winning."""
    out = dict(workloads)
    for key, facts in others.items():
        own = workloads.get(key)
        if own is None:
            out[key] = WorkloadInfo(workload_key=key, facts=dict(facts))
        else:
            out[key] = replace(own, facts={**facts, **own.facts})
    return out


def with_other_facts_frame(conn: Connection, question: pl.DataFrame) -> pl.DataFrame:
    """``question`` (``reattribute``'s: one row per ``source``, ``workload_key`` with a ``facts``
    column) with the other sources' facts about each key merged into ``facts``, its own winning."""
    if question.is_empty():
        return question
    others: dict[tuple[str, str], dict[str, str]] = {}
    for (source,), part in (
        question.select("source", "workload_key").unique().partition_by("source", as_dict=True).items()
    ):
        found = other_facts(conn, str(source), part["workload_key"].to_list())
        others |= {(str(source), key): facts for key, facts in found.items()}
    if not others:
        return question
    merged = []
    for source, key, own in question.select("source", "workload_key", "facts").iter_rows():
        facts = dict(others.get((source, key), {}))
        facts |= {f["key"]: f["value"] for f in own or ()}
        merged.append(facts)
    return question.with_columns(facts_series(merged))
