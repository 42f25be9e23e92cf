"""Every export equals GraphQL's answer to the same question, column by column and row by row, on
the demo fleet, on SQLite and on PostgreSQL, in all three formats read back with polars."""

from __future__ import annotations

from typing import Any

import pytest
from api.conftest import serve
from export.helpers import (
    EXPORT_NAMES,
    FORMATS,
    assert_same,
    expected_columns,
    export,
    export_params,
    graphql_rows,
    load_demo_fleet,
    read,
)
from sqlalchemy import Engine

CASES: list[tuple[str, dict[str, Any]]] = [
    ("usage", {"granularity": "HOUR", "groupBy": ["DEVICE"]}),
    ("usage", {"granularity": "DAY", "groupBy": ["PROJECT", "ENVIRONMENT"], "metric": "GPU_UTIL"}),
    ("usage", {"granularity": "TOTAL", "filter": {"environment": ["onprem", "aws"], "unallocated": False}}),
    ("usage", {"granularity": "WEEK", "groupBy": ["GPU_MODEL", "TEAM"]}),
    ("cost", {"granularity": "DAY", "groupBy": ["PROJECT"]}),
    ("cost", {"granularity": "HOUR", "groupBy": ["ENVIRONMENT", "DEVICE"]}),
    ("cost", {"granularity": "MONTH", "groupBy": ["TEAM", "ENVIRONMENT"], "idlePolicy": "SHARE_BY_USAGE"}),
    ("cost", {"groupBy": ["PROJECT"], "idlePolicy": "SHARE_EVENLY", "currency": "USD"}),
    ("idleWaste", {"granularity": "HOUR", "groupBy": ["DEVICE"]}),
    ("idleWaste", {"granularity": "DAY", "groupBy": ["GPU_MODEL"], "thresholdPct": 25}),
    ("idleWaste", {"groupBy": ["PROJECT"], "metric": "SM_ACTIVE"}),
    ("effectiveCost", {}),
    ("effectiveCost", {"groupBy": ["PROJECT", "GPU_MODEL"], "metric": "GPU_UTIL"}),
    ("effectiveCost", {"groupBy": [], "filter": {"project": ["llm-pretrain", "nobody"]}}),
    ("idleWaste", {"granularity": "DAY", "groupBy": ["ENVIRONMENT"], "currency": "USD"}),
    ("effectiveCost", {"groupBy": ["ENVIRONMENT", "GPU_MODEL"], "currency": "USD"}),
]


@pytest.mark.slow
def test_every_format_equals_graphql_on_the_demo_fleet(engine: Engine) -> None:
    load_demo_fleet(engine)
    for base in serve(engine):
        for field, case in CASES:
            rows = graphql_rows(base, field, case)
            assert rows or "filter" in case, (field, case)
            group_by = case.get("groupBy", ["ENVIRONMENT", "GPU_MODEL"] if field == "effectiveCost" else [])
            for fmt in FORMATS:
                r = export(base, EXPORT_NAMES[field], fmt, export_params(case))
                assert r.status_code == 200, r.text
                frame = read(fmt, r.content)
                assert frame.columns == expected_columns(field, group_by), (field, case)
                assert r.headers["x-export-rows"] == str(len(rows))
                assert_same(fmt, frame, rows)
