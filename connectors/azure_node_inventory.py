"""AKS node labels for Container insights GPU rows: ``KubeNodeInventory`` in the same workspace.

The Container insights agent (microsoft/Docker-Provider, ``source/plugins/ruby/in_kube_nodes.rb``)
writes one ``KubeNodeInventory`` row per node and collection with ``Computer`` = the node name
(what the GPU rows' ``Computer`` holds) and ``Labels`` = ``[metadata.labels]`` serialized: a JSON
*array* holding the node's label object (``[{"agentpool": "a100pool", "kubernetes.azure.com/…":
…}]``). One query per Log Analytics window asks for the nodes that window's GPU rows name, latest
row per node, within ``margin`` of the window; each node's labels become its GPUs' facts
``k8s.node_label:<key>`` (:func:`connectors.cloud_tags.facts`).

A workspace that does not collect the table (HTTP 400 naming ``KubeNodeInventory``), an answer
without its columns, or a ``Labels`` text that is no such JSON gives no labels for those nodes:
never an error, since labels only name owners and the GPU-hours are the same without them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from connectors.azure_inventory import query_latest
from connectors.cloud_tags import NODE_LABEL, facts

#: A node name as Kubernetes allows it (DNS subdomain): nothing else is put into the query.
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def query(
    request: Callable[[str, tuple[dt.datetime, dt.datetime]], Any],
    nodes: Iterable[str],
    start: dt.datetime,
    end: dt.datetime,
    margin: dt.timedelta,
) -> Any:
    """Run the node query (the latest ``Labels`` of each node) through ``request(kql, timespan)``;
    None where the workspace has no ``KubeNodeInventory`` table. Other errors propagate."""
    return query_latest(
        request, "KubeNodeInventory", "Computer", ("Labels",), nodes, _NODE, (start, end), margin
    )


def labels(result: Any) -> dict[str, dict[str, str]]:
    """A ``LogsQueryResult`` → node name → its labels as ``k8s.node_label:<key>`` facts."""
    if result is None or not result.tables:
        return {}
    table = result.tables[0]
    names = list(table.columns)
    if "Computer" not in names or "Labels" not in names:
        return {}
    node_at, labels_at = names.index("Computer"), names.index("Labels")
    out: dict[str, dict[str, str]] = {}
    for row in table.rows:
        node, text = row[node_at], row[labels_at]
        if not isinstance(node, str) or not isinstance(text, str):
            continue
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, list) and len(value) == 1:  # the agent's [labels] form
            value = value[0]
        if isinstance(value, dict):
            out[node] = facts(((k, v) for k, v in value.items() if isinstance(v, str)), NODE_LABEL)
    return out
