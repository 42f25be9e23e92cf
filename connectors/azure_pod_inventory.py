"""Pod names for Container insights GPU rows: ``KubePodInventory`` in the same Log Analytics workspace.

The agent (microsoft/Docker-Provider, ``KubernetesApiClient.rb`` and ``CAdvisorMetricsAPIClient.rb``)
tags its ``container.azm.ms/gpu`` rows with ``containerName = "<podUid>/<container>"`` only: the
``k8sNamespace`` tag is commented out and there is no controller tag. Its pod inventory
(``in_kube_podinventory.rb``) writes ``KubePodInventory`` rows with the same ``PodUid`` (both take
``kubernetes.io/config.hash`` for a kube-system pod without owner, ``metadata.uid`` otherwise), the
pod's ``Name``, ``Namespace`` and first owner (``ControllerKind``/``ControllerName``: a
Deployment's pod names its ReplicaSet). One query per Log Analytics window asks for the UIDs that
window's GPU rows name, latest row per UID, within ``margin`` of the window (the inventory is
collected every 60 s, not at the GPU rows' instants).

A workspace that does not collect the table (a data collection rule without
``Microsoft-KubePodInventory``: Log Analytics answers 400, "Failed to resolve table … named
'KubePodInventory'"), or an answer without the table's columns, gives no rows: the GPU rows keep
their pod UIDs, and the caller counts and logs them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from typing import Any

import polars as pl

from connectors.azure_inventory import query_latest
from connectors.sdk import WorkloadInfo

#: What the join keeps, per pod UID.
COLUMNS = ("PodUid", "Namespace", "Name", "ControllerKind", "ControllerName")
_UID = re.compile(r"^[0-9A-Za-z-]{1,64}$")  # metadata.uid (a UUID) or a config hash (hex)


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=dict.fromkeys(COLUMNS, pl.String))


def read_answer(result: Any) -> pl.DataFrame | None:
    """A ``LogsQueryResult``'s first table as ``COLUMNS`` (one row per pod UID; empty names as
    None), or None when the answer does not have those columns."""
    if result is None or not result.tables:
        return None
    table = result.tables[0]
    names = list(table.columns)
    if any(c not in names for c in COLUMNS):
        return None
    at = [names.index(c) for c in COLUMNS]
    rows = [[None if r[i] in ("", None) else str(r[i]) for i in at] for r in table.rows]
    frame = pl.DataFrame(rows, schema=dict.fromkeys(COLUMNS, pl.String), orient="row")
    return frame.drop_nulls("PodUid").unique("PodUid", keep="first", maintain_order=True)


def query(
    request: Callable[[str, tuple[dt.datetime, dt.datetime]], Any],
    uids: Iterable[str],
    start: dt.datetime,
    end: dt.datetime,
    margin: dt.timedelta,
) -> Any:
    """Run the inventory query (the latest row of each pod UID) through ``request(kql, timespan)``;
    None where the workspace has no ``KubePodInventory`` table (HTTP 400 naming it). Other errors
    propagate."""
    return query_latest(
        request, "KubePodInventory", COLUMNS[0], COLUMNS[1:], uids, _UID, (start, end), margin
    )


def workloads(rows: pl.DataFrame, inventory: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """Per ``containerName`` of ``rows`` (tags decoded): ``workload_key``, ``namespace``,
    ``workload`` (see ``connectors.azure_monitor``), and the pod UIDs ``inventory`` has no row for."""
    attrs = (
        rows.filter(pl.col("containerName").is_not_null())
        .group_by("containerName")
        .agg(pl.col("k8sNamespace").drop_nulls().first(), pl.col("controllerName").drop_nulls().first())
    )
    parts = pl.col("containerName").str.split_exact("/", 1)
    found = pl.col("Name").is_not_null()
    frame = (
        attrs.with_columns(
            parts.struct.field("field_0").alias("pod_uid"),
            parts.struct.field("field_1").fill_null("").alias("container"),
        )
        .join(inventory, left_on="pod_uid", right_on="PodUid", how="left")
        .with_columns(
            pl.when(found).then("Namespace").otherwise("k8sNamespace").alias("namespace"),
            pl.when(found).then("Name").otherwise("pod_uid").alias("pod"),
            pl.when(found).then("Name").otherwise(pl.coalesce("controllerName", "pod_uid")).alias("workload"),
        )
        .with_columns(
            pl.format("k8s:{}/{}/{}", pl.col("namespace").fill_null(""), "pod", "container").alias(
                "workload_key"
            )
        )
    )
    return frame, sorted(frame.filter(~found)["pod_uid"].unique().to_list())


def workload_infos(frame: pl.DataFrame) -> list[WorkloadInfo]:
    return [
        WorkloadInfo(workload_key=r["workload_key"], namespace=r["namespace"], workload=r["workload"])
        for r in frame.iter_rows(named=True)
    ]
