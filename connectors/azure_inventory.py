"""One Container insights inventory table (``KubePodInventory``, ``KubeNodeInventory``) asked for
the latest row of each of some keys near a Log Analytics window — the query the pod and node
inventory joins (:mod:`connectors.azure_pod_inventory`, :mod:`connectors.azure_node_inventory`)
share.

Only keys that match the caller's pattern are put into the query (nothing else of the GPU rows'
text reaches KQL). A workspace that does not collect the table answers HTTP 400 naming it: that is
None, not an error, since the joins only name owners; other errors propagate.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def kql_time(t: dt.datetime) -> str:
    """``t`` as a KQL ``datetime()`` literal's text (UTC, microseconds)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def latest_kql(
    table: str,
    key: str,
    columns: Sequence[str],
    keys: Iterable[str],
    allowed: re.Pattern[str],
    start: dt.datetime,
    end: dt.datetime,
) -> str:
    """The query for the ``keys`` (those ``allowed`` matches) seen in ``[start, end)``: the latest
    row of each, as ``key`` then ``columns``."""
    listed = ", ".join(f'"{k}"' for k in sorted(set(keys)) if allowed.match(k))
    since, until = kql_time(start), kql_time(end)
    return (
        f"{table}\n"
        f"| where TimeGenerated >= datetime({since}) and TimeGenerated < datetime({until})\n"
        f"| where {key} in ({listed})\n"
        f"| summarize arg_max(TimeGenerated, {', '.join(columns)}) by {key}\n"
        f"| project {', '.join([key, *columns])}"
    )


def query_latest(
    request: Callable[[str, tuple[dt.datetime, dt.datetime]], Any],
    table: str,
    key: str,
    columns: Sequence[str],
    keys: Iterable[str],
    allowed: re.Pattern[str],
    window: tuple[dt.datetime, dt.datetime],
    margin: dt.timedelta,
) -> Any:
    """Run :func:`latest_kql` over ``window`` widened by ``margin`` through ``request(kql,
    timespan)``; None where the workspace has no ``table`` (HTTP 400 naming it)."""
    from azure.core.exceptions import HttpResponseError

    first, last = window[0] - margin, window[1] + margin
    try:
        return request(latest_kql(table, key, columns, keys, allowed, first, last), (first, last))
    except HttpResponseError as exc:
        if exc.status_code == 400 and table.lower() in str(exc).lower():
            return None
        raise
