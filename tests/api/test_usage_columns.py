"""``usage`` served as columns (service.api.frame_rows, leaf_lists.ColumnRows) answers exactly as
the row path did: ``analytics.usage`` rows built into ``UsageRow`` objects, serialized field by
field — for every granularity, several groupings, metrics, filters, scopes and pages; and the
column-wise cursors are ``Page.key_cursors``' text."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any

import httpx
import polars as pl
import pytest
from api.conftest import serve
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics import usage as analytics
from service.analytics.access import Access
from service.analytics.dims import Dimension, Granularity, LedgerFilter
from service.analytics.paging import Page
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.api.context import ApiContext, ApiSettings
from service.api.frame_rows import _split_cursors, cursor_column, rounded_column, rounded_series
from service.api.graphql import schema
from service.api.leaf_lists import ColumnRows
from service.api.types import UtilMetric, ledger_page
from service.api.usage import UsageRow
from service.auth.principal import PRINCIPAL_KEY, Principal

MIG = 1 / 7
FIELDS = "periodStart device project team gpuModel gpuHours effectiveGpuHours utilizationPct idleGpuHours "
FIELDS += "energyKwh coveragePct metric cursor"


def _ledger() -> list[Any]:
    rows = []
    for h in range(30):  # crosses midnight twice
        rows += [
            row(h, "GPU-a", "job-1", project="p1", team="t1", busy_s=1000.0 + h, idle_s=100.0,
                energy_j=1e6 + h),
            row(h, "MIG-m", "job-2", project="p2", gpu_fraction=MIG, present_s=1200.0, observed_s=1200.0,
                busy_s=7.0 * h, default_metric="gpu_util"),
            row(h, "MIG-m", "job-3", project="p1", team="t2", gpu_fraction=MIG, present_s=2400.0,
                observed_s=2000.0, busy_s=300.0),
            row(h, "gpu-é", environment="aws", gpu_model="H100", observed_s=0.0 if h % 5 == 0 else 3600.0),
        ]  # fmt: skip
    return rows


def _graphql(engine: Engine, scopes: list[str], args: str, variables: dict[str, Any]) -> list[dict[str, Any]]:
    query = f"query($w: TimeWindow!, $n: Int, $after: String) {{ usage(window: $w, {args} first: $n, after: $after) {{ {FIELDS} }} }}"  # noqa: E501
    principal = Principal.of("t", "token", scopes)
    context = ApiContext(engine, ApiSettings(), SimpleNamespace(scope={PRINCIPAL_KEY: principal}))
    result = asyncio.run(schema.execute(query, variables, context_value=context))
    assert not result.errors, result.errors
    return list(result.data["usage"])  # type: ignore[index]


def _row_path(
    engine: Engine, q: LedgerQuery, metric: str | None, first: int | None, after: str | None
) -> list[dict[str, Any]]:
    """What the resolver answered before columns: UsageRow.page of analytics.usage, serialized."""
    # the resolver binds cursors to the GraphQL enum member, as here
    api_metric = None if metric is None else UtilMetric[metric.upper()]
    page = ledger_page(ApiSettings(), "usage", q, first, after, api_metric)
    with engine.connect() as conn:
        rows = analytics.usage(conn, q, metric, page=page)
    objects = UsageRow.page(rows, page.key_cursors(r.key.order for r in rows))
    out = []
    for o in objects:
        out.append(
            {
                "periodStart": None if o.period_start is None else o.period_start.isoformat(),
                "device": o.device,
                "project": o.project,
                "team": o.team,
                "gpuModel": o.gpu_model,
                "gpuHours": o.gpu_hours,
                "effectiveGpuHours": o.effective_gpu_hours,
                "utilizationPct": o.utilization_pct,
                "idleGpuHours": o.idle_gpu_hours,
                "energyKwh": o.energy_kwh,
                "coveragePct": o.coverage_pct,
                "metric": o.metric,
                "cursor": o.cursor,
            }
        )
    return out


CASES = [
    (Granularity.HOUR, [Dimension.DEVICE], None, LedgerFilter(), ["read"]),
    (Granularity.HOUR, [Dimension.DEVICE], "gpu_util", LedgerFilter(), ["read:project:p1"]),
    (Granularity.HOUR, [Dimension.DEVICE], None, LedgerFilter({Dimension.ENVIRONMENT: ["aws"]}), ["read"]),
    (Granularity.HOUR, [Dimension.DEVICE, Dimension.PROJECT], None, LedgerFilter(), ["read"]),
    (Granularity.DAY, [Dimension.TEAM, Dimension.GPU_MODEL], "sm_active", LedgerFilter(), ["read:team:t2"]),
    (Granularity.WEEK, [Dimension.PROJECT], None, LedgerFilter(unallocated=False), ["read"]),
    (Granularity.MONTH, [], None, LedgerFilter(), ["read"]),
    (Granularity.TOTAL, [], None, LedgerFilter(), ["read"]),
    (Granularity.TOTAL, [Dimension.DEVICE], None, LedgerFilter(), ["read:project:nobody"]),
]


def _args(granularity: Granularity, group_by: list[Dimension], metric: str | None, flt: LedgerFilter) -> str:
    text = f"granularity: {granularity.name}, groupBy: [{', '.join(d.name for d in group_by)}],"
    if metric:
        text += f" metric: {metric.upper()},"
    parts = [
        f"{d.name.lower() if d is not Dimension.GPU_MODEL else 'gpuModel'}: {list(v)}"
        for d, v in flt.values.items()
    ]
    if flt.unallocated is not None:
        parts.append(f"unallocated: {str(flt.unallocated).lower()}")
    if parts:
        text += " filter: {" + ", ".join(parts).replace("'", '"') + "},"
    return text


def _access(scopes: list[str]) -> Access:
    return Principal.of("t", "token", scopes).access


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{'-'.join(d.name for d in c[1])}")
def test_columns_answer_as_the_row_path_did(engine: Engine, put, case: tuple[Any, ...]) -> None:  # type: ignore[no-untyped-def]
    put(_ledger())
    granularity, group_by, metric, flt, scopes = case
    window = {"start": at(1).isoformat(), "end": at(29).isoformat()}
    q = LedgerQuery(
        check_window(at(1), at(29), max_days=400), granularity, tuple(group_by), flt, access=_access(scopes)
    )
    args = _args(granularity, group_by, metric, flt)
    whole = _graphql(engine, scopes, args, {"w": window, "n": None, "after": None})
    assert whole == _row_path(engine, q, metric, None, None)
    assert whole or scopes == ["read:project:nobody"]
    for first in (1, 7):  # pages: the same rows, the same cursors, continued from each other's
        pages: list[dict[str, Any]] = []
        after = None
        while True:
            got = _graphql(engine, scopes, args, {"w": window, "n": first, "after": after})
            assert got == _row_path(engine, q, metric, first, after)
            pages += got
            if len(got) < first:
                break
            after = got[-1]["cursor"]
        assert pages == whole


def test_cursor_column_is_key_cursors_text() -> None:
    page = Page("usage", binding="bNd-_9")
    frame = pl.DataFrame(
        {
            "period_key": [480000, 480001, 2**31 - 1],
            "device": ['a"b', "é/\\x\u2028", None],
            "team": [None, "t", None],
        },
        schema_overrides={"team": pl.String},
    )
    for order in (["period_key", "device"], ["device", "team"], ["period_key"]):
        keys = zip(*(frame[c].to_list() for c in order), strict=True)
        assert cursor_column(page, frame, order) == page.key_cursors(keys)
    assert cursor_column(page, frame, []) == page.key_cursors([()] * 3)
    assert cursor_column(page, frame.clear(), ["device"]) == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.floats(allow_nan=False, allow_infinity=False),
            st.integers(-(10**12), 10**12).map(lambda k: k / 1e6 + 5e-7),  # ties at the 6th decimal
            st.integers(0, 10**7).map(lambda k: k / 8),
        ),
        max_size=60,
    )
)
def test_rounded_column_is_pythons_round(values: list[float | None]) -> None:
    got = rounded_column(pl.Series(values, dtype=pl.Float64))
    want = [None if v is None else round(v, 6) for v in values]
    assert [None if g is None else (g, math.copysign(1.0, g)) for g in got] == [
        None if w is None else (w, math.copysign(1.0, w)) for w in want
    ]
    series = rounded_series(pl.Series(values, dtype=pl.Float64))  # the spliced JSON's values
    assert series is not None and series.dtype == pl.Float64
    assert [None if g is None else (g, math.copysign(1.0, g)) for g in series.to_list()] == [
        None if w is None else (w, math.copysign(1.0, w)) for w in want
    ]


def test_rounded_series_leaves_non_finite_values_to_the_scalar() -> None:
    assert rounded_series(pl.Series([1.0, math.nan])) is None
    assert rounded_series(pl.Series([None, math.inf])) is None
    assert rounded_series(pl.Series([None, 0.1234565], dtype=pl.Float64)).to_list() == [
        None,
        round(0.1234565, 6),
    ]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[4] == ["read"]], ids=lambda c: f"{c[0].name}-{len(c[1])}"
)
def test_http_pages_are_the_in_process_answer(
    engine: Engine,
    put,
    case: tuple[Any, ...],
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """Over HTTP a page's list is JSON written by polars and spliced into the response
    (ColumnRows.json, an orjson.Fragment); it reads back as the in-process answer (real lists),
    aliases, repeated fields and ``__typename`` included, page by page."""
    put(_ledger())
    granularity, group_by, metric, flt, scopes = case
    window = {"start": at(1).isoformat(), "end": at(29).isoformat()}
    args = _args(granularity, group_by, metric, flt)
    spliced: list[bool] = []
    longest = 0
    json_of = ColumnRows.json

    def counted(self: ColumnRows, fields: Any) -> bytes | None:
        text = json_of(self, fields)
        spliced.append(text is not None)
        return text

    monkeypatch.setattr(ColumnRows, "json", counted)
    selections = (FIELDS, f"__typename u: utilizationPct {FIELDS} device d2: device")
    for base in serve(engine):
        for fields in selections:
            query = (
                f"query($w: TimeWindow!, $n: Int, $after: String) {{ usage(window: $w, {args} first: $n, "
                f"after: $after) {{ {fields} }} }}"
            )
            for first in (None, 7):
                after = None
                while True:
                    variables = {"w": window, "n": first, "after": after}
                    r = httpx.post(
                        f"{base}/graphql", json={"query": query, "variables": variables}, timeout=60
                    )
                    body = r.json()
                    assert "errors" not in body, body
                    principal = Principal.of("t", "token", scopes)
                    context = ApiContext(
                        engine, ApiSettings(), SimpleNamespace(scope={PRINCIPAL_KEY: principal})
                    )
                    local = asyncio.run(schema.execute(query, variables, context_value=context))
                    assert not local.errors and local.data is not None, local.errors
                    assert isinstance(local.data["usage"], list)  # in-process: real lists
                    assert body["data"]["usage"] == local.data["usage"]
                    got = body["data"]["usage"]
                    longest = max(longest, len(got))
                    if first is None or len(got) < first:
                        break
                    after = got[-1]["cursor"]
    # the HTTP answers took the spliced path (a list of one row is completed as usual)
    assert all(spliced) and bool(spliced) == (longest > 1)


def test_cursor_column_split_is_key_cursors_text() -> None:
    """The cursors built as a head's base64 and a (carry, Enum value)'s base64 joined: the same text
    as key_cursors for heads of every length mod 3 (carries of 0, 1, 2 bytes), several head
    columns, non-ASCII heads and last values, no head; nulls and a head cut inside a UTF-8
    character take the whole-text path, with the same result."""
    device = pl.Enum(["GPU-0", 'a"b', "é/\\x\u2028", "z"])
    for binding in ("bNd-_9", "jb_4zQOi", "x"):
        page = Page("usage", binding=binding)
        frame = pl.DataFrame(
            {
                "period_key": [7, 7, 48, 480000, 480000, 2**31 - 1, 7, 123],
                "team": ["t", "é", "t", "ü€", "t", "t", "é", "éé"],
                "device": ["GPU-0", 'a"b', "z", "é/\\x\u2028", "GPU-0", "z", "z", 'a"b'],
            },
            schema_overrides={"device": device},
        )
        frame = pl.concat([frame] * 20)  # few heads per row: the split applies
        for order in (
            ["period_key", "device"],
            ["team", "device"],
            ["period_key", "team", "device"],
            ["device"],
        ):
            keys = zip(*(frame[c].to_list() for c in order), strict=True)
            assert cursor_column(page, frame, order) == page.key_cursors(keys), (binding, order)
        assert _split_cursors(frame, ["period_key", "device"], binding) is not None
        assert _split_cursors(frame, ["device"], binding) is not None
        nulls = frame.with_columns(
            pl.when(pl.col("period_key") == 7).then(None).otherwise(pl.col("device")).alias("device")
        )
        keys = zip(nulls["period_key"].to_list(), nulls["device"].to_list(), strict=True)
        assert cursor_column(page, nulls, ["period_key", "device"]) == page.key_cursors(keys)
