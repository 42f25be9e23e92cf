"""``gpu-ledger export``: the file it writes is the endpoint's answer byte for byte; its mistakes
are one line and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from api.conftest import serve
from export.helpers import export
from ledger_rows import row
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.cli import app

W = ["--start", "2025-01-06T00:00:00Z", "--end", "2025-01-06T02:00:00Z"]
WINDOW = [("start", "2025-01-06T00:00:00Z"), ("end", "2025-01-06T02:00:00Z")]


@pytest.fixture
def ledger(put, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    put(
        [
            row(h, f"GPU-{d}", f"job-{d}", project=p, team="ml", busy_s=900.0 * (h + 1), idle_s=600.0, cost=c,
                idle_cost="0.25")
            for h in range(2)
            for d, p, c in (("a", "alpha", "1.5"), ("b", "beta", "2.000000001"))
        ]
        + [row(h, "GPU-free", idle_s=3600.0, cost="1", idle_cost="1") for h in range(2)]
    )  # fmt: skip


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["export", *args])
    return result.exit_code, result.stdout, result.stderr


CASES = [
    (
        "usage",
        ["--granularity", "HOUR", "--group-by", "DEVICE"],
        [("granularity", "HOUR"), ("groupBy", "DEVICE")],
    ),
    (
        "cost",
        ["--group-by", "PROJECT", "--group-by", "TEAM", "--idle-policy", "SHARE_BY_USAGE"],
        [("groupBy", "PROJECT,TEAM"), ("idlePolicy", "SHARE_BY_USAGE")],
    ),
    (
        "idle-waste",
        ["--granularity", "DAY", "--group-by", "PROJECT,DEVICE", "--threshold-pct", "25"],
        [("granularity", "DAY"), ("groupBy", "PROJECT,DEVICE"), ("thresholdPct", "25")],
    ),
    (
        "effective-cost",
        ["--filter", "project=alpha", "--filter", "project=beta", "--metric", "SM_ACTIVE"],
        [("project", "alpha"), ("project", "beta"), ("metric", "SM_ACTIVE")],
    ),
]


@pytest.mark.parametrize(("question", "options", "params"), CASES)
def test_the_file_equals_the_endpoint_answer(
    engine: Engine,
    ledger: None,
    tmp_path: Path,
    question: str,
    options: list[str],
    params: list[tuple[str, str]],
) -> None:
    for base in serve(engine):
        for fmt in ("arrow", "parquet", "csv"):
            out = tmp_path / f"answer.{fmt}"
            code, stdout, stderr = run(question, *W, *options, "--output", str(out))
            assert code == 0, stderr
            r = export(base, question, fmt, [*WINDOW, *params])
            assert r.status_code == 200, r.text
            assert out.read_bytes() == r.content, (question, fmt)
            assert stdout.startswith(f"{question}: {r.headers['x-export-rows']} rows")


@pytest.mark.parametrize("codec", ["lz4", "ZSTD"])
def test_compression_equals_the_endpoint_and_reads_back(
    engine: Engine, ledger: None, tmp_path: Path, codec: str
) -> None:
    import polars as pl

    out, plain = tmp_path / "compressed.arrow", tmp_path / "plain.arrow"
    for base in serve(engine):
        code, _, stderr = run("usage", *W, "--group-by", "DEVICE", "--compression", codec, "-o", str(out))
        assert code == 0, stderr
        r = export(base, "usage", "arrow", [*WINDOW, ("groupBy", "DEVICE"), ("compression", codec)])
        assert r.status_code == 200, r.text
        assert out.read_bytes() == r.content
    assert run("usage", *W, "--group-by", "DEVICE", "-o", str(plain))[0] == 0
    assert out.read_bytes() != plain.read_bytes()
    assert pl.read_ipc_stream(out).equals(pl.read_ipc_stream(plain))


def test_format_option_beats_the_suffix(engine: Engine, ledger: None, tmp_path: Path) -> None:
    out = tmp_path / "answer.bin"
    code, _, stderr = run("usage", *W, "--format", "csv", "-o", str(out))
    assert code == 0, stderr
    assert out.read_text().splitlines()[0].startswith("period_start,gpu_hours,effective_gpu_hours")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("usage", *W, "-o", "x.xlsx"), "--format 'xlsx': use one of arrow, parquet, csv"),
        (
            ("usage", *W, "-o", "x.csv", "--group-by", "SPLEEN"),
            "--group-by: groupBy 'SPLEEN' is not a dimension",
        ),
        (
            ("usage", "--start", "2025-01-06T00:30:00Z", "--end", "2025-01-06T02:00:00Z", "-o", "x.csv"),
            "--start: window start 2025-01-06T00:30:00+00:00 is not a whole UTC hour",
        ),  # fmt: skip
        (
            ("usage", "--start", "today", "--end", "2025-01-06T02:00:00Z", "-o", "x.csv"),
            "--start: start 'today'",
        ),
        (("usage", *W, "-o", "x.csv", "--filter", "nonsense"), "--filter 'nonsense': expected KEY=VALUE"),
        (("usage", *W, "-o", "x.csv", "--filter", "colour=red"), "--filter colour=…: usage has no parameter"),
        (("usage", *W, "-o", "x.csv", "--currency", "EUR"), "--currency: usage has no parameter 'currency'"),
        (("idle-waste", *W, "-o", "x.csv", "--threshold-pct", "3"), "--threshold-pct: UNSUPPORTED_THRESHOLD"),
        (("cost", *W, "-o", "x.csv", "--currency", "QQQ"), "--currency: UNKNOWN_CURRENCY"),
        (("gpus", *W, "-o", "x.csv"), "no export named 'gpus'"),
        (("usage", *W, "-o", "x.csv", "--compression", "lz4"), "--compression: compression is a parameter"),
        (("usage", *W, "-o", "x.arrow", "--compression", "gzip"), "--compression: compression 'gzip' is not"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(
    ledger: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(*args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-ledger: error: ") and message in lines[0], err
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file
