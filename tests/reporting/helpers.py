"""Helpers of the reporting tests: GraphQL answers and view sums keyed the same way, compared with
money exact (Decimal strings) and GPU-hours to GraphQL's 6 printed decimals."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy import Connection, text

#: GraphQL dimension field → reporting view column.
COLUMN = {
    "environment": "environment",
    "provider": "provider",
    "account": "account",
    "region": "region",
    "cluster": "cluster",
    "node": "node",
    "device": "device_id",
    "gpuModel": "gpu_model",
    "instanceType": "instance_type",
    "project": "project",
    "team": "team",
    "user": "user_name",
    "namespace": "namespace",
    "workload": "workload",
    "vendor": "vendor",
    "ownerRule": "owner_rule",
}
ENUM = {
    "environment": "ENVIRONMENT",
    "provider": "PROVIDER",
    "account": "ACCOUNT",
    "region": "REGION",
    "cluster": "CLUSTER",
    "node": "NODE",
    "device": "DEVICE",
    "gpuModel": "GPU_MODEL",
    "instanceType": "INSTANCE_TYPE",
    "project": "PROJECT",
    "team": "TEAM",
    "user": "USER",
    "namespace": "NAMESPACE",
    "workload": "WORKLOAD",
    "vendor": "VENDOR",
    "ownerRule": "OWNER_RULE",
}
#: Absolute slack of a GPU-hour figure: GraphQL prints 6 decimals (round half-even of the double).
HOURS_SLACK = 1e-6


def gql(base: str, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
    r = httpx.post(f"{base}/graphql", json={"query": query, "variables": dict(variables or {})}, timeout=60)
    body = r.json()
    assert "errors" not in body, body
    data: dict[str, Any] = body["data"]
    return data


def window(start: dt.datetime, end: dt.datetime) -> dict[str, str]:
    return {"start": start.isoformat().replace("+00:00", "Z"), "end": end.isoformat().replace("+00:00", "Z")}


def instant(value: str | None) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(value)


def money(value: Decimal) -> str:
    """A NUMERIC as GraphQL writes an amount (9 decimals, no exponent)."""
    return format(value.quantize(Decimal("1E-9")), "f")


def view_rows(conn: Connection, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(text(sql), dict(params or {}))]


def keyed(rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> dict[tuple[Any, ...], Mapping[str, Any]]:
    out: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for r in rows:
        k = tuple(r[c] for c in key)
        assert k not in out, f"duplicate key {k}"
        out[k] = r
    return out


def close(view_value: float | None, graphql_value: float | None) -> bool:
    if view_value is None or graphql_value is None:
        return view_value is graphql_value
    return math.isclose(float(view_value), graphql_value, rel_tol=0, abs_tol=HOURS_SLACK)
