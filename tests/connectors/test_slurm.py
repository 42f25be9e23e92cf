"""The slurm connector: sacct --parsable2 records → GPU jobs' workloads and facts, exact counts and
GPU-hours (tests/fixtures/slurm/README.md has the hand totals), hostile lines refused with file,
line and field, and the sacct command run for real (a stand-in executable on PATH)."""

from __future__ import annotations

import datetime as dt
import stat
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.registry import default_registry
from connectors.sdk import ConfigurationError, ConnectorError, RetriableError, WorkloadInfo
from connectors.sdk.facts import FactsBatch, WorkloadFactsSource
from connectors.slurm import SACCT_FIELDS, SlurmConnector, gpu_hours_by, parse_sacct, workloads

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
DAY = FIXTURES / "sacct-2026-11-30.txt"
NOHEADER = FIXTURES / "sacct-2026-11-30-allocations-noheader.txt"
HEADER = "|".join(SACCT_FIELDS)
UTC = dt.UTC


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def parse(text: str, **kw):
    return parse_sacct(text, file="t.txt", **kw)


def test_fixture_counts_and_gpu_hours_per_account_match_the_hand_totals() -> None:
    records = parse_sacct(DAY.read_text(), file=str(DAY))
    assert records.read == 20
    assert records.skipped == {"job steps": 5, "pending jobs": 1, "jobs without GPUs": 3}
    assert records.refused == []
    assert records.jobs.height == 11
    assert gpu_hours_by(records.jobs) == {"bio": Decimal(24), "chem": Decimal(6), "physics": Decimal(63)}
    assert gpu_hours_by(records.jobs, "user") == {
        "alice": Decimal("5.25"),
        "bob": Decimal(7),
        "carol": Decimal(8),
        "dave": Decimal("0.75"),
        "erin": Decimal(8),
        "frank": Decimal(16),
        "heidi": Decimal(48),
    }


def test_a_noheader_line_of_the_wrong_width_names_the_configured_fields() -> None:
    line = "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|01:00:00|extra"
    [refused] = parse(line).refused
    assert (refused.line, refused.reason) == (1, "13 fields, the configured fields are 12")


def test_noheader_allocations_file_reads_the_same_jobs() -> None:
    # XDMoD's flags (--noheader --allocations): the configured fields name the columns.
    with_steps = parse_sacct(DAY.read_text(), file="a").jobs.drop("line")
    records = parse_sacct(NOHEADER.read_text(), file="b")
    assert (records.read, records.skipped, records.refused) == (
        15,
        {"pending jobs": 1, "jobs without GPUs": 3},
        [],
    )
    assert records.jobs.drop("line").equals(with_steps)


def test_job_id_forms_times_and_gpus_are_read_exactly() -> None:
    jobs = parse_sacct(DAY.read_text(), file="a").jobs
    rows = {r["line"]: r for r in jobs.iter_rows(named=True)}
    array = rows[6]
    assert (array["job_id"], array["job_id_raw"], array["gpus"]) == ("5000_1", "5001", 1)
    het = rows[9]
    assert (het["job_id"], het["job_id_raw"], het["account"], het["qos"]) == ("6000+0", "6000", "bio", "high")
    running = rows[11]
    assert (running["state"], running["start"], running["end"]) == ("RUNNING", utc(2026, 11, 30, 20), None)
    assert running["node_list"] == "gpu[04-05]"
    cancelled = rows[14]
    assert (cancelled["state"], cancelled["end"]) == ("CANCELLED", utc(2026, 11, 30, 13, 45))
    long = rows[21]
    assert (long["start"], long["end"]) == (utc(2026, 11, 28, 18), utc(2026, 11, 30, 18))
    typed_and_untyped = rows[2]  # gres/gpu:h200=2,gres/gpu=2: the total, not 4
    assert typed_and_untyped["gpus"] == 2


def test_workloads_are_the_cgroup_and_dcgm_keys_with_facts() -> None:
    found = workloads(parse_sacct(DAY.read_text(), file="a").jobs)
    keys = [w.workload_key for w in found]
    raw = ["4711", "5001", "5002", "6000", "7000", "7100", "7300", "7400", "7500", "7700"]
    assert keys == [f"{p}:{r}" for r in raw for p in ("slurm", "hpc")]
    facts = {
        "slurm.job": "5001",
        "slurm.user": "alice",
        "slurm.account": "chem",
        "slurm.partition": "gpu",
        "slurm.qos": "normal",
    }
    assert found[2] == WorkloadInfo("slurm:5001", user_name="alice", workload="5000_1", facts=facts)
    assert found[3] == WorkloadInfo("hpc:5001", user_name="alice", workload="5000_1", facts=facts)


def test_typed_only_gpus_are_summed_where_xdmod_counts_none() -> None:
    text = (
        f"{HEADER}\n"
        "9|9|u|acct|gpu|normal|COMPLETED|billing=4,gres/gpu:a100=2,gres/gpu:h100=1,node=1|n1|"
        "2026-11-30T00:00:00|2026-11-30T02:00:00|02:00:00\n"
    )
    jobs = parse(text).jobs
    assert jobs["gpus"].to_list() == [3]
    assert gpu_hours_by(jobs) == {"acct": Decimal(6)}


def test_times_with_offsets_and_time_zones() -> None:
    text = (
        f"{HEADER}\n"
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T10:00:00+0100|2026-11-30T11:00:00+01:00|01:00:00\n"
        "2|2|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T10:00:00Z|2026-11-30T11:00:00-0230|03:30:00\n"
        "3|3|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-07-01T10:00:00|2026-07-01T11:00:00|01:00:00\n"
    )
    jobs = parse(text, time_zone="Europe/Berlin").jobs
    assert jobs["start"].to_list() == [utc(2026, 11, 30, 9), utc(2026, 11, 30, 10), utc(2026, 7, 1, 8)]
    assert jobs["end"].to_list() == [utc(2026, 11, 30, 10), utc(2026, 11, 30, 13, 30), utc(2026, 7, 1, 9)]


def test_a_local_time_that_happens_twice_is_refused_not_guessed() -> None:
    # 2026-10-25 02:30 happens twice in Berlin (clocks go back at 03:00).
    text = f"{HEADER}\n1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-10-25T02:30:00|2026-10-25T04:00:00|02:30:00\n"
    records = parse(text, time_zone="Europe/Berlin")
    assert [(r.line, r.column) for r in records.refused] == [(2, "Start")]
    assert "run sacct with TZ=UTC" in records.refused[0].reason


HOSTILE = [
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=two|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00",
        "AllocTRES",
        "not a number",
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00",
        None,
        "11 fields, the header has 12",
    ),
    (
        "x|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00:00",
        "JobID",
        'not a job id: "x"',
    ),
    (
        "1|1x|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00",
        "JobIDRaw",
        "not a job id",
    ),
    (
        "1|1|u|a|p|q|EXPLODED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00",
        "State",
        "unknown job state",
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00",
        "AllocTRES",
        "not TRES",
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=99999999999|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1",
        "AllocTRES",
        "over",
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|yesterday|2026-11-30T01:00:00|1:00",
        "Start",
        'not a time: "yesterday"',
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T25:00:00|2026-11-30T01:00:00|1:00",
        "Start",
        "not a time",
    ),
    ("1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|Unknown|2026-11-30T01:00:00|1:00", "Start", "has a start"),
    ("1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|Unknown|1:00", "End", "an ended job has an end"),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T02:00:00|2026-11-30T01:00:00|0:00",
        "End",
        "before Start",
    ),
    (
        "1|1|u\x1b[2J|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00",
        "User",
        "control",
    ),
    ("1|1||a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1:00", "User", "empty"),
    (
        "1|1|u|" + "a" * 301 + "|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|1",
        "Account",
        "300",
    ),
    (
        "1|1|u|a|p|q|COMPLETED|gres/gpu=1|" + "n" * 70_000 + "|2026-11-30T00:00:00|x|1",
        None,
        "longer than 65536",
    ),
]


@pytest.mark.parametrize(("line", "column", "reason"), HOSTILE, ids=[h[2][:30] for h in HOSTILE])
def test_hostile_lines_are_refused_with_line_and_field(line: str, column: str | None, reason: str) -> None:
    good = "2|2|u|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|2026-11-30T01:00:00|01:00:00"
    records = parse(f"{HEADER}\n{good}\n{line}\n{good.replace('2|2|', '3|3|')}\n")
    assert records.read == 3
    assert records.jobs["job_id"].to_list() == ["2", "3"]
    [refused] = records.refused
    assert (refused.file, refused.line, refused.column) == ("t.txt", 3, column)
    assert reason in refused.reason
    assert refused.raw is not None and len(refused.raw) <= 1000


def test_every_kind_of_line_at_once_adds_up() -> None:
    lines = [h[0] for h in HOSTILE] + DAY.read_text().splitlines()[1:]
    records = parse(HEADER + "\n" + "\n".join(lines) + "\n\n")
    assert records.read == len(HOSTILE) + 20
    assert len(records.refused) == len(HOSTILE)
    assert records.jobs.height + sum(records.skipped.values()) + len(records.refused) == records.read
    assert [r.line for r in records.refused] == list(range(2, 2 + len(HOSTILE)))


def test_parsable_with_trailing_delimiter_and_crlf() -> None:
    line = "1|1|u|a|p|q|COMPLETED|gres/gpu=2|n|2026-11-30T00:00:00|2026-11-30T01:00:00|01:00:00"
    text = f"{HEADER}|\r\n{line}|\r\n"
    records = parse(text)
    assert (records.read, records.refused) == (1, [])
    assert records.jobs["gpus"].to_list() == [2]


def test_a_header_without_required_fields_is_an_error_naming_them() -> None:
    with pytest.raises(ConnectorError, match=r"t.txt: the header \(line 1\) lacks User, Account"):
        parse("JobID|JobIDRaw|State|AllocTRES|Partition|Start|End\n1|1|COMPLETED|gres/gpu=1|p|x|y\n")


def test_empty_output_is_nothing_read() -> None:
    for text in ("", "\n\n", HEADER + "\n"):
        records = parse(text)
        assert (records.read, records.jobs.height, records.refused, records.skipped) == (0, 0, [], {})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from("0123456789|_+.[]-=,:/TZabcU \x00é\r"), max_size=80), max_size=20
    )
)
def test_any_text_parses_without_exceptions_and_counts_add_up(lines: list[str]) -> None:
    records = parse(HEADER + "\n" + "\n".join(lines))
    assert records.jobs.height + sum(records.skipped.values()) + len(records.refused) == records.read
    assert records.read == sum(1 for part in "\n".join(lines).split("\n") if part.strip(" \r"))


# --- the connector ------------------------------------------------------------------------------


def build(**table) -> SlurmConnector:
    connector = default_registry().build({"name": "slurm-main", "type": "slurm", **table})
    assert isinstance(connector, SlurmConnector)
    return connector


def test_registered_under_its_entry_point_and_a_facts_source() -> None:
    connector = build(path=str(DAY))
    assert isinstance(connector, WorkloadFactsSource)
    batch = connector.facts(utc(2026, 11, 30), utc(2026, 12, 1))
    assert isinstance(batch, FactsBatch)
    assert (batch.read, batch.accepted, len(batch.workloads)) == (20, 11, 20)


def test_bad_config_names_the_key() -> None:
    from connectors.registry import ConnectorConfigError

    with pytest.raises(ConnectorConfigError, match='key "time_zone": .*unknown IANA time zone'):
        build(path="x", time_zone="Mars/Olympus")
    with pytest.raises(ConnectorConfigError, match="fields lacks JobIDRaw"):
        build(
            path="x", fields=["JobID", "User", "Account", "Partition", "State", "AllocTRES", "Start", "End"]
        )
    with pytest.raises(ConnectorConfigError, match='key "clusters"'):
        build(clusters="a; rm -rf /")


def test_unreadable_or_oversized_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        build(path=str(tmp_path / "missing.txt")).facts(utc(2026, 11, 30), utc(2026, 12, 1))
    big = tmp_path / "big.txt"
    big.write_bytes(DAY.read_bytes())
    with pytest.raises(ConnectorError, match="larger than max_bytes = 100"):
        build(path=str(big), max_bytes=100).facts(utc(2026, 11, 30), utc(2026, 12, 1))


def test_invalid_utf8_is_refused_by_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(
        DAY.read_bytes()
        + "9|9|jos\xe9|a|p|q|COMPLETED|gres/gpu=1|n|2026-11-30T00:00:00|x|1\n".encode("latin-1")
    )
    batch = build(path=str(path)).facts(utc(2026, 11, 30), utc(2026, 12, 1))
    assert [(r.file, r.line, r.reason) for r in batch.refused] == [(str(path), 22, "not UTF-8 text")]
    assert batch.read == 21


def fake_sacct(tmp_path: Path, body: str) -> Path:
    """An executable standing in for sacct: records its arguments and TZ, then runs ``body``."""
    script = tmp_path / "sacct"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "TZ=$TZ" "$@" > "{tmp_path}/args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_runs_sacct_with_the_documented_flags_in_utc(tmp_path: Path) -> None:
    script = fake_sacct(tmp_path, f'cat "{DAY}"')
    connector = build(sacct=str(script), clusters="alpha", extra_args=["--partition=gpu"])
    batch = connector.facts(utc(2026, 11, 30), utc(2026, 12, 1))
    assert (batch.read, batch.accepted) == (20, 11)
    assert (tmp_path / "args").read_text().splitlines() == [
        "TZ=UTC",
        "--allusers",
        "--parsable2",
        "--allocations",
        "--duplicates",
        "--starttime",
        "2026-11-30T00:00:00",
        "--endtime",
        "2026-12-01T00:00:00",
        "--format",
        ",".join(SACCT_FIELDS),
        "--clusters",
        "alpha",
        "--partition=gpu",
    ]


def test_sacct_failures_are_classified(tmp_path: Path) -> None:
    window = (utc(2026, 11, 30), utc(2026, 12, 1))
    down = fake_sacct(
        tmp_path, 'echo "sacct: error: Problem talking to the database: Connection refused" >&2; exit 1'
    )
    with pytest.raises(RetriableError, match="exited 1: sacct: error: Problem talking to the database"):
        build(sacct=str(down)).facts(*window)
    with pytest.raises(ConfigurationError, match="sacct not found"):
        build(sacct=str(tmp_path / "nope")).facts(*window)
    slow = fake_sacct(tmp_path, "sleep 5")
    with pytest.raises(RetriableError, match="did not answer within 0.2 s"):
        build(sacct=str(slow), timeout_s=0.2).facts(*window)
    flood = fake_sacct(tmp_path, f'cat "{DAY}" "{DAY}"')
    with pytest.raises(ConnectorError, match="output larger than max_bytes = 3000"):
        build(sacct=str(flood), max_bytes=3000).facts(*window)


def test_facts_batch_refuses_counts_that_do_not_add_up() -> None:
    with pytest.raises(ValueError, match="do not add up"):
        FactsBatch(workloads=[], read=3, accepted=1, skipped={"steps": 1})
    with pytest.raises(ValueError, match="do not add up"):
        FactsBatch(workloads=[], read=0, accepted=1, skipped={"steps": -1})
    assert FactsBatch(workloads=[], read=2, accepted=1, skipped={"steps": 1}).read == 2


# --- sacct --json / slurmrestd's slurmdb jobs ---------------------------------------------------

JSON = FIXTURES / "sacct-2026-11-30.json"


def test_json_output_reads_the_same_jobs_as_the_text() -> None:
    from connectors.slurm import parse_sacct_json

    records = parse_sacct_json(JSON.read_text(), file=str(JSON))
    assert (records.read, records.skipped, records.refused) == (
        15,
        {"pending jobs": 1, "jobs without GPUs": 3},
        [],
    )
    text = parse_sacct(NOHEADER.read_text(), file="t").jobs.drop("line")
    assert records.jobs.drop("line").equals(text)
    assert records.jobs.filter(pl.col("job_id_raw") == "6000")["job_id"].to_list() == ["6000+0"]
    assert gpu_hours_by(records.jobs) == {"bio": Decimal(24), "chem": Decimal(6), "physics": Decimal(63)}


def job(**kw) -> dict:
    base = {
        "job_id": 1,
        "user": "u",
        "account": "a",
        "partition": "p",
        "qos": "q",
        "state": {"current": ["COMPLETED"]},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]},
        "time": {"start": 1764460800, "end": 1764464400},
    }
    return base | kw


@pytest.mark.parametrize(
    ("record", "column", "reason"),
    [
        (job(job_id="1"), None, "job_id is not a count"),
        (job(job_id=True), None, "job_id is not a count"),
        (job(user=7), None, "user is not text"),
        (job(tres={"allocated": [{"type": "gres", "name": "gpu", "count": 1.5}]}), None, "tres.count"),
        (job(time={"start": 10**20, "end": 1}), None, "time.start is not a count"),
        (job(time={"start": {"set": True, "number": 10**15}, "end": 1}), None, "time.start is not a time"),
        (job(state={"current": ["EXPLODED"]}), "State", "unknown job state"),
        (job(time={"start": 1764464400, "end": 1764460800}), "End", "before Start"),
        (job(user="x\x1b[2J"), "User", "control"),
        ("not a job", None, "not a job record"),
    ],
)
def test_hostile_json_jobs_are_refused_by_position(record, column, reason) -> None:
    import json

    from connectors.slurm import parse_sacct_json

    records = parse_sacct_json(json.dumps({"jobs": [job(job_id=2), record, job(job_id=3)]}), file="j.json")
    assert records.read == 3 and records.jobs["job_id"].to_list() == ["2", "3"]
    [refused] = records.refused
    assert (refused.file, refused.line, refused.column) == ("j.json", 2, column)
    assert reason in refused.reason


def test_json_that_is_not_sacct_output_is_an_error() -> None:
    from connectors.slurm import parse_sacct_json

    with pytest.raises(ConnectorError, match=r"j.json: not JSON \(Expecting value, line 1 column 1\)"):
        parse_sacct_json("JobID|JobIDRaw", file="j.json")
    with pytest.raises(ConnectorError, match='no "jobs" list'):
        parse_sacct_json('{"errors": [{"error": "Unable to contact slurmdbd"}]}', file="j.json")


def test_runs_sacct_json(tmp_path: Path) -> None:
    script = fake_sacct(tmp_path, f'cat "{JSON}"')
    batch = build(sacct=str(script), output="json").facts(utc(2026, 11, 30), utc(2026, 12, 1))
    assert (batch.read, batch.accepted, len(batch.workloads)) == (15, 11, 20)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:4] == ["TZ=UTC", "--allusers", "--json", "--allocations"] and "--format" not in args


# --- slurmrestd -----------------------------------------------------------------------------------


class _Slurmrestd(BaseHTTPRequestHandler):
    """slurmrestd's slurmdb jobs endpoint: the JSON fixture for the right token, 401 otherwise."""

    seen: list[tuple[str, str | None, str | None]]
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(
            (self.path, self.headers.get("X-SLURM-USER-NAME"), self.headers.get("X-SLURM-USER-TOKEN"))
        )
        ok = self.headers.get("X-SLURM-USER-TOKEN") == "eyJ.jwt.sig"
        status = self.status if ok else 401
        body = JSON.read_bytes() if status == 200 else b'{"errors": [{"error": "Authentication failure"}]}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slurmrestd() -> Iterator[tuple[str, type[_Slurmrestd]]]:
    handler = type("Handler", (_Slurmrestd,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_reads_slurmrestd_slurmdb_jobs(slurmrestd) -> None:
    url, handler = slurmrestd
    connector = build(url=url, output="json", user_name="ledger", token="eyJ.jwt.sig")
    batch = connector.facts(utc(2026, 11, 30), utc(2026, 12, 1))
    assert (batch.read, batch.accepted, len(batch.workloads)) == (15, 11, 20)
    assert handler.seen == [
        (
            "/slurmdb/v0.0.40/jobs?start_time=2026-11-29T00%3A00%3A00&end_time=2026-12-02T00%3A00%3A00",
            "ledger",
            "eyJ.jwt.sig",
        )
    ]
    assert "eyJ" not in repr(connector.config)


def test_slurmrestd_failures_are_classified(slurmrestd) -> None:
    from connectors.sdk import FatalSourceError

    url, handler = slurmrestd
    window = (utc(2026, 11, 30), utc(2026, 12, 1))
    with pytest.raises(FatalSourceError, match="HTTP 401 .check user_name and token"):
        build(url=url, output="json", token="wrong").facts(*window)
    handler.status = 503
    with pytest.raises(RetriableError, match="HTTP 503"):
        build(url=url, output="json", token="eyJ.jwt.sig").facts(*window)
    handler.status = 200
    with pytest.raises(ConnectorError, match="answer larger than max_bytes = 1000"):
        build(url=url, output="json", token="eyJ.jwt.sig", max_bytes=1000).facts(*window)
    with pytest.raises(RetriableError, match="ConnectError"):
        build(url="http://127.0.0.1:9", output="json").facts(*window)
    from connectors.registry import ConnectorConfigError

    with pytest.raises(ConnectorConfigError, match='output = "json"'):
        build(url=url)
    with pytest.raises(ConnectorConfigError, match="not both"):
        build(url=url, path="x", output="json")
