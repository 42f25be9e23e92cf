"""GET /export/…: scopes, refusals and limits, through the real app under uvicorn.

The ledger is hand-built (tests/ledger_rows.py): two projects in two teams, each on its own device,
and an unallocated device; the exports' numbers are computed here by hand."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import polars as pl
import pytest
from api.conftest import serve
from ledger_rows import at, row
from sqlalchemy import Engine, func, select

from service.analytics import columnar
from service.analytics.paging import Page
from service.auth.tokens import TokenStore
from service.export.arguments import ExportArgs
from service.export.formats import Format
from service.export.questions import QUESTIONS, Question
from service.models import LedgerHour

W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
PROJECT = {"alpha": "ml", "beta": "web"}
#: A project name with every character SQL quoting cares about.
ODD = "o'brien%_\\\"; DROP TABLE ledger_hour; --"


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    rows = []
    for h in range(2):
        rows.append(
            row(h, "GPU-a", "job-a", project="alpha", team="ml", busy_s=1800.0, idle_s=900.0, cost="2",
                idle_cost="0.5", energy_j=1_800_000.0)
        )  # fmt: skip
        rows.append(
            row(h, "GPU-b", "job-b", project="beta", team="web", busy_s=3600.0, cost="3", idle_cost="0")
        )
        rows.append(row(h, "GPU-free", idle_s=3600.0, cost="1.000000001", idle_cost="1.000000001"))
    rows.append(row(0, "GPU-odd", "job-odd", project=ODD, team="odd", cost="7", idle_cost="0"))
    put(rows)


@pytest.fixture
def app(engine: Engine, ledger: None) -> Iterator[tuple[str, dict[str, dict[str, str]]]]:
    store = TokenStore(engine)
    scopes = {
        "all": ["read"],
        "alpha": ["read:project:alpha"],
        "web": ["read:team:web"],
        "metrics": ["metrics"],
    }
    headers = {
        name: {"Authorization": f"Bearer {store.create(f'export-{name}', s)[0]}"}
        for name, s in scopes.items()
    }
    for base in serve(engine, auth={}, export_max_rows=6):
        yield base, headers


def get(base: str, path: str, params: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    r = httpx.get(f"{base}{path}", params=params, headers=headers, timeout=30)
    assert "Traceback" not in r.text
    return r


def csv_rows(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.status_code == 200, r.text
    return list(pl.read_csv(io.BytesIO(r.content), infer_schema=False).iter_rows(named=True))


def test_hand_computed_usage_and_cost(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    r = get(base, "/export/usage.csv", {**W, "granularity": "TOTAL", "groupBy": "PROJECT"}, headers["all"])
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    assert r.headers["content-disposition"] == 'attachment; filename="usage.csv"'
    by_project = {x["project"]: x for x in csv_rows(r)}
    # NULL (the unallocated device) sorts first; CSV writes it as an empty field.
    assert list(by_project) == [None, "alpha", "beta", ODD]
    alpha = by_project["alpha"]
    assert alpha["period_start"] is None
    assert (alpha["gpu_hours"], alpha["effective_gpu_hours"], alpha["idle_gpu_hours"]) == (
        "2.0",
        "1.0",
        "0.5",
    )
    assert (alpha["utilization_pct"], alpha["coverage_pct"], alpha["energy_kwh"]) == ("50.0", "100.0", "1.0")
    assert alpha["metric"] == "SM_ACTIVE"
    assert by_project[None]["energy_kwh"] is None
    r = get(base, "/export/cost.parquet", {**W, "granularity": "DAY", "groupBy": "TEAM"}, headers["all"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.parquet"
    frame = pl.read_parquet(io.BytesIO(r.content))
    assert frame.schema["cost"] == pl.Decimal(38, 9)
    assert frame.schema["period_start"] == pl.Datetime("us", "UTC")
    assert frame.select("period_start", "team", "cost", "idle_cost", "unallocated", "rate_source").rows() == [
        (at(0), None, Decimal("2.000000002"), Decimal("2.000000002"), True, "tco:site-1"),
        (at(0), "ml", Decimal("4.000000000"), Decimal("1.000000000"), False, "tco:site-1"),
        (at(0), "odd", Decimal("7.000000000"), Decimal("0E-9"), False, "tco:site-1"),
        (at(0), "web", Decimal("6.000000000"), Decimal("0E-9"), False, "tco:site-1"),
    ]


def test_a_scoped_token_sees_only_its_rows(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    params = {**W, "granularity": "HOUR", "groupBy": "PROJECT,DEVICE"}
    for question in ("usage", "cost", "idle-waste", "effective-cost"):
        alpha = csv_rows(get(base, f"/export/{question}.csv", params if question != "effective-cost" else
                             {**W, "groupBy": "PROJECT,DEVICE"}, headers["alpha"]))  # fmt: skip
        assert alpha and {(x["project"], x["device"]) for x in alpha} == {("alpha", "GPU-a")}, question
        web = csv_rows(get(base, f"/export/{question}.csv", {**W, "groupBy": "TEAM"}, headers["web"]))
        assert {x["team"] for x in web} == {"web"}, question
    # Grouped by nothing, a scoped caller's total is its own rows' total, not the fleet's.
    total = csv_rows(get(base, "/export/usage.csv", W, headers["web"]))
    assert [x["gpu_hours"] for x in total] == ["2.0"]
    # Under SHARE_EVENLY a scoped caller gets its own rows plus its share of the pool (as GraphQL).
    shared = csv_rows(get(base, "/export/cost.csv", {**W, "groupBy": "PROJECT", "idlePolicy": "SHARE_EVENLY"},
                          headers["alpha"]))  # fmt: skip
    assert [(x["project"], x["cost"], x["shared_idle_cost"]) for x in shared] == [
        ("alpha", "4.666666668", "0.666666668")
    ]


def test_callers_without_a_read_scope_are_refused(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    r = get(base, "/export/usage.arrow", W)
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED"
    r = get(base, "/export/usage.arrow", W, {"Authorization": "Bearer not-a-token"})
    assert r.status_code == 401
    r = get(base, "/export/usage.arrow", W, headers["metrics"])
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    r = get(base, "/export/no-such.arrow", W)  # unknown paths too: authentication first
    assert r.status_code == 401


def test_the_vs_prometheus_contract(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    hour = {"start": "2025-01-06T00:00:00Z", "end": "2025-01-06T01:00:00Z"}
    r = get(base, "/export/usage.arrow", {**hour, "granularity": "HOUR", "groupBy": "DEVICE"}, headers["all"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.arrow.stream"
    frame = pl.read_ipc_stream(io.BytesIO(r.content))
    assert frame.columns[:2] == ["period_start", "device"]
    # text columns travel dictionary-encoded: an Enum of the answer's own values, sorted
    assert frame.schema["device"] == pl.Enum(["GPU-a", "GPU-b", "GPU-free", "GPU-odd"])
    assert frame.schema["metric"] == pl.Enum(sorted(set(frame["metric"].cast(pl.String))))
    assert frame.schema["gpu_hours"] == pl.Float64
    assert frame.select("device", "gpu_hours", "utilization_pct").rows() == [
        ("GPU-a", 1.0, 50.0),
        ("GPU-b", 1.0, 100.0),
        ("GPU-free", 1.0, 0.0),
        ("GPU-odd", 1.0, 0.0),
    ]


HOSTILE: list[tuple[str, dict[str, Any] | list[tuple[str, str]], int, str, str | None]] = [
    ("/export/usage.csv", {"end": W["end"]}, 400, "INVALID_ARGUMENT", "start"),
    ("/export/usage.csv", {**W, "start": "yesterday"}, 400, "INVALID_ARGUMENT", "start"),
    ("/export/usage.csv", {**W, "start": "2025-13-01T00:00:00Z"}, 400, "INVALID_ARGUMENT", "start"),
    ("/export/usage.csv", {**W, "start": "2025-01-06T00:00:00"}, 400, "INVALID_WINDOW", "start"),
    ("/export/usage.csv", {**W, "end": "2025-01-06T01:30:00Z"}, 400, "WINDOW_NOT_ALIGNED", "end"),
    ("/export/usage.csv", {**W, "start": "2025-01-06T00:00:00+05:30"}, 400, "WINDOW_NOT_ALIGNED", "start"),
    ("/export/usage.csv", {**W, "end": "2025-01-05T00:00:00Z"}, 400, "INVALID_WINDOW", "end"),
    (
        "/export/usage.csv",
        {"start": "0001-01-01T00:00:00Z", "end": "9999-12-31T23:00:00Z"},
        400,
        "WINDOW_TOO_LARGE",
        "end",
    ),  # fmt: skip
    ("/export/usage.csv", {**W, "groupBy": "DEVICE,NOPE"}, 400, "INVALID_ARGUMENT", "groupBy"),
    ("/export/usage.csv", {**W, "groupBy": "device; DROP TABLE x"}, 400, "INVALID_ARGUMENT", "groupBy"),
    ("/export/usage.csv", {**W, "granularity": "FORTNIGHT"}, 400, "INVALID_ARGUMENT", "granularity"),
    ("/export/usage.csv", {**W, "metric": "power"}, 400, "INVALID_ARGUMENT", "metric"),
    ("/export/usage.csv", {**W, "first": "10"}, 400, "INVALID_ARGUMENT", "first"),
    ("/export/usage.csv", [*W.items(), ("start", W["start"])], 400, "INVALID_ARGUMENT", "start"),
    ("/export/usage.csv", {**W, "project": "a\x00b"}, 400, "INVALID_ARGUMENT", "project"),
    ("/export/usage.csv", {**W, "project": "x" * 5000}, 400, "INVALID_ARGUMENT", "project"),
    (
        "/export/usage.csv",
        [*W.items(), *(("device", f"d{i}") for i in range(1001))],
        400,
        "INVALID_ARGUMENT",
        None,
    ),  # fmt: skip
    ("/export/usage.csv", {**W, "unallocated": "maybe"}, 400, "INVALID_ARGUMENT", "unallocated"),
    ("/export/usage.csv", {**W, "fields": "gpu_hours,secret"}, 400, "INVALID_ARGUMENT", "fields"),
    ("/export/usage.csv", {**W, "fields": "device"}, 400, "INVALID_ARGUMENT", "fields"),  # not grouped
    ("/export/usage.csv", {**W, "thresholdPct": "5"}, 400, "INVALID_ARGUMENT", "thresholdPct"),  # not usage's
    ("/export/effective-cost.csv", {**W, "granularity": "HOUR"}, 400, "INVALID_ARGUMENT", "granularity"),
    ("/export/idle-waste.csv", {**W, "thresholdPct": "7"}, 400, "UNSUPPORTED_THRESHOLD", "thresholdPct"),
    ("/export/idle-waste.csv", {**W, "thresholdPct": "nan"}, 400, "INVALID_ARGUMENT", "thresholdPct"),
    ("/export/idle-waste.csv", {**W, "thresholdPct": "1e999"}, 400, "INVALID_ARGUMENT", "thresholdPct"),
    ("/export/cost.csv", {**W, "currency": "ZZZ"}, 400, "UNKNOWN_CURRENCY", "currency"),
    ("/export/cost.csv", {**W, "currency": "'; --"}, 400, "UNKNOWN_CURRENCY", "currency"),
    ("/export/cost.csv", {**W, "idlePolicy": "SHARE"}, 400, "INVALID_ARGUMENT", "idlePolicy"),
    ("/export/usage.xlsx", W, 404, "NOT_FOUND", "format"),
    ("/export/passwords.csv", W, 404, "NOT_FOUND", "question"),
    ("/export/usage%00.csv", W, 404, "NOT_FOUND", "question"),
    ("/export/%27%3B--.csv", W, 404, "NOT_FOUND", "question"),
    ("/export/usage.csv.csv", W, 404, "NOT_FOUND", "question"),
    (
        "/export/usage.csv",
        {**W, "granularity": "HOUR", "groupBy": "DEVICE,PROJECT"},
        413,
        "RESULT_TOO_LARGE",
        None,
    ),  # fmt: skip
    (
        "/export/cost.csv",
        {**W, "granularity": "HOUR", "groupBy": "DEVICE", "idlePolicy": "SHARE_EVENLY"},
        413,
        "RESULT_TOO_LARGE",
        None,
    ),  # fmt: skip
]


def test_hostile_input_is_a_clear_4xx(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    """Each request of HOSTILE: its status, its code, the parameter named; never a 500 or a traceback."""
    base, headers = app
    for path, params, status, code, parameter in HOSTILE:
        r = get(base, path, params, headers["all"])
        assert r.status_code == status, (path, params, r.text)
        body = r.json()
        assert (body["code"], body["parameter"]) == (code, parameter), (path, params, body)
        assert body["error"] and len(body["error"]) <= 500


def test_filter_values_are_values_never_sql(
    app: tuple[str, dict[str, dict[str, str]]], engine: Engine
) -> None:
    base, headers = app
    for value in ("' OR '1'='1", "alpha' --", "%", "_lpha", "alpha\\"):
        r = get(base, "/export/usage.csv", {**W, "groupBy": "PROJECT", "project": value}, headers["all"])
        assert csv_rows(r) == [], value
    odd = csv_rows(
        get(base, "/export/usage.csv", {**W, "groupBy": "PROJECT", "project": ODD}, headers["all"])
    )
    assert [(x["project"], x["gpu_hours"]) for x in odd] == [(ODD, "1.0")]
    # Several values of one key: repeated parameters (a value is taken whole, commas included).
    both = csv_rows(get(base, "/export/usage.csv", [*W.items(), ("groupBy", "PROJECT"), ("project", "alpha"),
                                                     ("project", "beta"), ("project", "alpha,beta")],
                        headers["all"]))  # fmt: skip
    assert [x["project"] for x in both] == ["alpha", "beta"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(LedgerHour)).scalar_one() == 7


def test_query_timeout_is_504(engine: Engine, ledger: None) -> None:
    for base in serve(engine, limits={"request_timeout_s": 1e-9}):
        r = get(base, "/export/usage.csv", W)
        assert r.status_code == 504 and r.json()["code"] == "QUERY_TIMEOUT", r.text
        assert "gpu-ledger export" in r.json()["error"]


def test_export_paths_are_metric_labels_others_are_not(engine: Engine, ledger: None) -> None:
    for base in serve(engine):
        assert get(base, "/export/usage.csv", W).status_code == 200
        assert get(base, "/export/evil-1.csv", W).status_code == 404
        assert get(base, "/export/evil-2.parquet", W).status_code == 404
        metrics = get(base, "/metrics").text
    assert 'route="/export/usage.csv"' in metrics
    assert "evil" not in metrics


def test_fields_choose_and_order_the_columns(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    params = {**W, "groupBy": "PROJECT", "fields": "idle_cost,project,idle_gpu_hours"}
    rows = csv_rows(get(base, "/export/idle-waste.csv", params, headers["all"]))
    assert rows[1] == {"idle_cost": "1.000000000", "project": "alpha", "idle_gpu_hours": "0.5"}


def test_effective_cost_default_group_by_and_none(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    default = pl.read_csv(io.BytesIO(get(base, "/export/effective-cost.csv", W, headers["all"]).content))
    assert default.columns[:3] == ["period_start", "environment", "gpu_model"]
    none = csv_rows(get(base, "/export/effective-cost.csv", {**W, "groupBy": ""}, headers["all"]))
    # 7 GPU-hours, cost 2+2+3+3+1.000000001×2+7 = 19.000000002; per GPU-hour rounded half-even.
    assert [(x["gpu_hours"], x["cost"], x["cost_per_gpu_hour"]) for x in none] == [
        ("7.0", "19.000000002", "2.714285715")
    ]


def test_a_period_start_is_utc(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    r = get(base, "/export/usage.arrow", {**W, "granularity": "DAY"}, headers["all"])
    frame = pl.read_ipc_stream(io.BytesIO(r.content))
    assert frame["period_start"].to_list() == [dt.datetime(2025, 1, 6, tzinfo=dt.UTC)]


def test_a_registered_question_is_served_in_its_formats(
    engine: Engine, ledger: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry is open (issue 14 adds focus.csv): the route, the formats and the metric labels
    follow it."""

    def build(conn: Any, args: ExportArgs, page: Page, _context: Any) -> pl.DataFrame:
        return columnar.usage_frame(conn, args.query, page=page)

    question = Question("gpu-hours", "usage", frozenset({"granularity"}), ("gpu_hours",), build,
                        formats=frozenset({Format.CSV}))  # fmt: skip
    monkeypatch.setitem(QUESTIONS, question.name, question)
    for base in serve(engine):
        rows = csv_rows(get(base, "/export/gpu-hours.csv", {**W, "groupBy": "DEVICE"}))
        assert [(x["device"], x["gpu_hours"]) for x in rows] == [
            ("GPU-a", "2.0"), ("GPU-b", "2.0"), ("GPU-free", "2.0"), ("GPU-odd", "1.0")
        ]  # fmt: skip
        r = get(base, "/export/gpu-hours.parquet", W)
        assert r.status_code == 404 and r.json()["parameter"] == "format"
        assert "no gpu-hours export as 'parquet'; there are csv" in r.json()["error"]
        assert 'route="/export/gpu-hours.csv"' in get(base, "/metrics").text


def test_arrow_text_columns_are_dictionaries_of_their_values() -> None:
    """Each String column becomes an Enum of its distinct values in sorted order (nulls stay null,
    an all-null or empty column has no categories); other columns and CSV/Parquet are untouched."""
    frame = pl.DataFrame(
        {
            "device": ["b", None, "a", "b"],
            "none": pl.Series([None] * 4, dtype=pl.String),
            "x": [1.5, 2.0, None, 3.0],
        }
    )
    sink = io.BytesIO()
    Format.ARROW.write(frame, sink)
    back = pl.read_ipc_stream(io.BytesIO(sink.getvalue()))
    assert back.schema == {"device": pl.Enum(["a", "b"]), "none": pl.Enum([]), "x": pl.Float64}
    assert back.with_columns(pl.col("device", "none").cast(pl.String)).equals(frame)
    assert back["device"].to_physical().to_list() == [1, None, 0, 1]
    sink = io.BytesIO()
    Format.PARQUET.write(frame, sink)
    assert pl.read_parquet(io.BytesIO(sink.getvalue())).schema["device"] == pl.String
    sink = io.BytesIO()
    Format.CSV.write(frame, sink)
    assert sink.getvalue().decode().splitlines()[:3] == ["device,none,x", "b,,1.5", ",,2.0"]
    empty = pl.DataFrame(schema={"device": pl.String})
    sink = io.BytesIO()
    Format.ARROW.write(empty, sink)
    assert pl.read_ipc_stream(io.BytesIO(sink.getvalue())).schema == {"device": pl.Enum([])}


def test_an_enum_column_keeps_only_its_rows_values_in_sorted_order() -> None:
    """A dictionary column read from the day segments (an Enum over a whole day) is written with
    exactly the values its rows hold: codes renumbered, nulls kept, unsorted categories sorted."""
    wide = pl.Series("device", ["d", None, "b", "d"], dtype=pl.Enum(["a", "b", "c", "d"]))
    unsorted = pl.Series("metric", ["y", "x", "x", "y"], dtype=pl.Enum(["y", "x"]))
    exact = pl.Series("team", ["p", "q", "q", None], dtype=pl.Enum(["p", "q"]))
    sink = io.BytesIO()
    Format.ARROW.write(pl.DataFrame([wide, unsorted, exact]), sink)
    back = pl.read_ipc_stream(io.BytesIO(sink.getvalue()))
    assert back.schema == {
        "device": pl.Enum(["b", "d"]),
        "metric": pl.Enum(["x", "y"]),
        "team": pl.Enum(["p", "q"]),
    }
    assert back["device"].to_list() == ["d", None, "b", "d"]
    assert back["device"].to_physical().to_list() == [1, None, 0, 1]
    assert back["metric"].to_list() == ["y", "x", "x", "y"]
    assert back["team"].to_list() == ["p", "q", "q", None]


def test_a_scoped_device_hour_export_names_only_its_devices(
    app: tuple[str, dict[str, dict[str, str]]],
) -> None:
    """The day segments hold every device of the day; a project-scoped caller's Arrow dictionary
    holds only the devices of its rows (no other project's device id travels in it)."""
    base, headers = app
    params = {**W, "granularity": "HOUR", "groupBy": "DEVICE"}
    r = get(base, "/export/usage.arrow", params, headers["alpha"])
    assert r.status_code == 200, r.text
    frame = pl.read_ipc_stream(io.BytesIO(r.content))
    assert frame.schema["device"] == pl.Enum(["GPU-a"])
    assert frame["device"].to_list() == ["GPU-a", "GPU-a"]
    assert b"GPU-b" not in r.content and b"GPU-odd" not in r.content


def test_arrow_buffers_are_compressed_on_request(app: tuple[str, dict[str, dict[str, str]]]) -> None:
    base, headers = app
    params = {
        "start": at(0).isoformat(),
        "end": at(1).isoformat(),
        "granularity": "HOUR",
        "groupBy": "DEVICE",
    }
    plain = get(base, "/export/usage.arrow", params, headers["all"])
    assert plain.status_code == 200, plain.text
    want = pl.read_ipc_stream(io.BytesIO(plain.content))
    for name in ("lz4", "ZSTD", "uncompressed"):
        r = get(base, "/export/usage.arrow", {**params, "compression": name}, headers["all"])
        assert r.status_code == 200, r.text
        assert pl.read_ipc_stream(io.BytesIO(r.content)).equals(want), name
        assert (r.content == plain.content) == (name == "uncompressed"), name
    for fmt, bad in (("arrow", "gzip"), ("arrow", ""), ("csv", "lz4"), ("parquet", "zstd")):
        r = get(base, f"/export/usage.{fmt}", {**params, "compression": bad}, headers["all"])
        assert r.status_code == 400 and r.json()["parameter"] == "compression", (fmt, bad, r.text)
    r = get(base, "/export/usage.arrow", [*params.items(), ("compression", "lz4"), ("compression", "lz4")],
            headers["all"])  # fmt: skip
    assert r.status_code == 400 and r.json()["parameter"] == "compression"
