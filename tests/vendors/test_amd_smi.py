"""The agent's ``amd-smi`` sampler against a fake ``amd-smi`` executable that prints the recorded
outputs (tests/fixtures/amd/, hand values in its README) — the only fake is AMD's binary itself:
both JSON shapes amd-smi prints, and what a broken tool does (garbage, an unknown unit, a GPU the
listing does not name, a non-zero exit): a clear error each time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.amd_smi import METRIC_ARGS, AmdSmiSampler
from connectors.sdk import ConnectorError, RetriableError, SampleBatch
from service.agent.config import AgentSettings
from service.agent.sampler import load_sampler

AMD = Path(__file__).resolve().parents[1] / "fixtures" / "amd"
MIB = 1024 * 1024
U0, U1 = "1fff74a1-0000-1000-80a1-7a2ed5f0e4c2", "a7ff74a1-0000-1000-8040-3a5ad2cb5e73"
METRIC = " ".join(METRIC_ARGS)


def fake_amd_smi(tmp_path: Path, metric: str | None = None, status: int = 0) -> Path:
    """An ``amd-smi`` printing the recorded answer to each command line it is given (``metric``
    instead of the recorded reading when set); other arguments fail with status 2, as amd-smi does."""
    answers = {
        "list --json": (AMD / "amd-smi-list.json").read_text(),
        "static --asic --json": (AMD / "amd-smi-static-asic.json").read_text(),
        METRIC: metric if metric is not None else (AMD / "amd-smi-metric.json").read_text(),
    }
    path = tmp_path / "amd-smi"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nanswers = {answers!r}\n"
        "args = ' '.join(sys.argv[1:])\n"
        "if args not in answers:\n    print('amd-smi: error: invalid choice: ' + args); sys.exit(2)\n"
        f"sys.stdout.write(answers[args]); sys.exit({status} if args.startswith('metric') else 0)\n"
    )
    path.chmod(0o755)
    return path


def rows(batch: SampleBatch) -> dict[tuple[str, str], float]:
    c = batch.columns
    keys = list(zip(c["device_id"], c["metric"], strict=True))
    assert len(set(keys)) == len(keys) and set(c["workload_key"]) == {""} and set(c["share"]) == {1.0}
    return dict(zip(keys, c["value"], strict=True))


def _sampler(tmp_path: Path, **fake: object) -> AmdSmiSampler:
    options = {"binary": str(fake_amd_smi(tmp_path, **fake)), "node": "mi300-node-01"}  # type: ignore[arg-type]
    return AmdSmiSampler(options, clock=lambda: 1_764_669_600.5)


def test_the_agent_loads_the_amd_smi_sampler_and_reads_every_gpu(tmp_path: Path) -> None:
    settings = AgentSettings(
        service_url="http://svc", token="t" * 20, name="amd-node", spool_dir=tmp_path / "spool",
        source="connectors.amd_smi:AmdSmiSampler",
        source_options={"binary": str(fake_amd_smi(tmp_path)), "node": "mi300-node-01", "region": "dc2"},
    )  # fmt: skip
    sampler = load_sampler(settings)
    assert isinstance(sampler, AmdSmiSampler)
    sampler._clock = lambda: 1_764_669_600.5
    batch = sampler.sample()
    # hand values of tests/fixtures/amd/README.md: edge temperature N/A on an MI300X → hotspot;
    # MB are MiB; energy already in J
    assert rows(batch) == {
        (U0, "gpu_util"): 87.0, (U0, "mem_bw"): 41.0, (U0, "power_w"): 612.0, (U0, "temp_c"): 71.0,
        (U0, "mem_used_b"): 150000.0 * MIB, (U0, "mem_total_b"): 196592.0 * MIB,
        (U0, "energy_j"): 1234567.891,
        (U1, "gpu_util"): 0.0, (U1, "mem_bw"): 0.0, (U1, "power_w"): 130.0, (U1, "temp_c"): 40.0,
        (U1, "mem_used_b"): 283.0 * MIB, (U1, "mem_total_b"): 196592.0 * MIB, (U1, "energy_j"): 987654.321,
    }  # fmt: skip
    assert set(batch.columns["ts_ms"]) == {1_764_669_600_500}
    assert [(d.device_id, d.gpu_model, d.vendor, d.node, d.region, d.gpu_index) for d in batch.devices] == [
        (U0, "AMD Instinct MI300X", "amd", "mi300-node-01", "dc2", 0),
        (U1, "AMD Instinct MI300X", "amd", "mi300-node-01", "dc2", 1),
    ]


def test_the_gpu_data_envelope_of_later_releases_reads_the_same(tmp_path: Path) -> None:
    sampler = _sampler(tmp_path, metric=(AMD / "amd-smi-metric-gpu-data.json").read_text())
    got = rows(sampler.sample())
    assert (got[(U0, "gpu_util")], got[(U0, "power_w")], got[(U0, "energy_j")]) == (55.0, 500.0, 1240000.5)
    assert (got[(U1, "gpu_util")], got[(U1, "temp_c")], got[(U1, "mem_used_b")]) == (
        100.0,
        80.0,
        190000.0 * MIB,
    )


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        ("Segmentation fault", ConnectorError, "amd-smi metric --json: not JSON: Segmentation fault"),
        ('{"error": "x"}', ConnectorError, "expected a list of GPUs"),
        ('[{"gpu": "0"}]', ConnectorError, "entry [0] has no integer 'gpu' index"),
        ('[{"gpu": 7, "usage": {}}]', ConnectorError, "gpu 7 is not in `amd-smi list`"),
        ('[{"gpu": 0, "power": {"socket_power": {"value": 612, "unit": "kW"}}}]', ConnectorError,
         "gpu 0 power.socket_power: unit 'kW', expected one of W, mW"),
        ('[{"gpu": 0, "usage": {"gfx_activity": {"value": "NaN", "unit": "%"}}}]', ConnectorError,
         "gpu 0 usage.gfx_activity: value 'NaN' is not a finite number"),
        ('[{"gpu": 0, "usage": {"gfx_activity": 87}}]', ConnectorError,
         "gpu 0 usage.gfx_activity: expected {'value': …, 'unit': …}"),
    ],
)  # fmt: skip
def test_a_broken_answer_is_an_error_naming_the_gpu_and_field(
    tmp_path: Path, answer: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as exc:
        _sampler(tmp_path, metric=answer).sample()
    assert message in str(exc.value)


def test_na_values_are_no_reading_and_a_failing_tool_is_retried_next_period(tmp_path: Path) -> None:
    na = '[{"gpu": 1, "usage": {"gfx_activity": "N/A", "umc_activity": {"value": "N/A", "unit": "%"}},'
    na += ' "temperature": {"edge": "N/A", "hotspot": {"value": 44, "unit": "C"}}}]'
    assert rows(_sampler(tmp_path, metric=na).sample()) == {(U1, "temp_c"): 44.0}
    with pytest.raises(RetriableError, match="exited with status 1"):
        _sampler(tmp_path, status=1).sample()


def test_the_sampler_keeps_the_agent_small() -> None:
    code = "import sys, connectors.amd_smi, connectors.sdk.vendors\n"
    code += "print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.replace("'", '"')))
    assert loaded & {"polars", "numpy", "pydantic", "sqlalchemy", "httpx"} == set()
