"""The agent's ``xpu-smi`` and ``npu-smi`` samplers, run against fake executables that print the
recorded outputs (tests/fixtures/xpum/, tests/fixtures/ascend/; hand values in their READMEs) —
the only fake is the vendor's binary itself. Then what broken tools do: missing, garbage, NaN,
non-zero exit, hanging, flooding — a clear error each time, and the agent loop keeps going."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from connectors.npu_smi import NpuSmiSampler, parse_info
from connectors.sdk import ConfigurationError, ConnectorError, RetriableError, SampleBatch, WorkloadInfo
from connectors.smi_exec import SmiOptions
from connectors.xpu_smi import DUMP_ARGS, XpuSmiSampler, parse_dump, parse_ps
from service.agent.config import AgentSettings
from service.agent.loop import Agent
from service.agent.sampler import load_sampler
from service.agent.ship import Shipper
from service.agent.spool import Spool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1024 * 1024
ROW = "Timestamp, DeviceId, GPU Power (W)\n13:00:00.000,    0, "
GPU_A, GPU_B = "00000000-0000-0029-0000-002f0bd58086", "00000000-0000-009a-0000-002f0bd58086"


def fake_tool(tmp_path: Path, name: str, answers: dict[str, str], extra: str = "") -> Path:
    """An executable ``name`` that prints ``answers[" ".join(argv)]`` (a fixture file's text) and
    fails with status 2 on any other arguments, as the real tools do on a bad command line."""
    path = tmp_path / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"answers = {answers!r}\n"
        f"{extra}\n"
        "args = ' '.join(sys.argv[1:])\n"
        "if args not in answers:\n"
        "    print('Error: unknown arguments: ' + args); sys.exit(2)\n"
        "sys.stdout.write(answers[args])\n"
    )
    path.chmod(0o755)
    return path


def xpu_smi(tmp_path: Path, dump: str | None = None, extra: str = "") -> Path:
    x = FIXTURES / "xpum"
    return fake_tool(
        tmp_path,
        "xpu-smi",
        {
            "discovery -j": (x / "xpu-smi-discovery.json").read_text(),
            "discovery -d 0 -j": (x / "xpu-smi-discovery-0.json").read_text(),
            "discovery -d 1 -j": (x / "xpu-smi-discovery-1.json").read_text(),
            " ".join(DUMP_ARGS): dump if dump is not None else (x / "xpu-smi-dump.csv").read_text(),
            "ps -j": (x / "xpu-smi-ps.json").read_text(),
        },
        extra,
    )


def rows(batch: SampleBatch) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(device, metric, workload) → (value, share) of one batch's rows (each once)."""
    c = batch.columns
    keys = list(zip(c["device_id"], c["metric"], c["workload_key"], strict=True))
    assert len(set(keys)) == len(keys)
    return dict(zip(keys, zip(c["value"], c["share"], strict=True), strict=True))


def test_the_agent_loads_the_xpu_smi_sampler_and_reads_every_gpu(tmp_path: Path) -> None:
    # The host's /proc as the agent reads it: PID 40211 (python on GPU 0) runs in Slurm job 4242.
    proc = tmp_path / "proc" / "40211"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
    (proc / "status").write_text("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\n")
    (proc / "comm").write_text("python\n")
    settings = AgentSettings(
        service_url="http://svc", token="t" * 20, name="intel-node", spool_dir=tmp_path / "spool",
        source="connectors.xpu_smi:XpuSmiSampler", proc_root=tmp_path / "proc", docker_socket=None,
        source_options={"binary": str(xpu_smi(tmp_path)), "node": "xe-node-01", "region": "dc1"},
    )  # fmt: skip
    sampler = load_sampler(settings)
    assert isinstance(sampler, XpuSmiSampler)
    sampler._clock = lambda: 1_764_421_200.25  # the agent's clock stamps readings, not the CSV's
    batch = sampler.sample()
    job = "slurm:4242"  # GPU 0's process; GPU 1 lists only xpu-smi itself: unallocated
    expected = {
        (GPU_A, "gpu_util", job): (90.0, 1.0),
        (GPU_A, "sm_active", job): (60.0, 1.0),
        (GPU_A, "mem_bw", job): (35.0, 1.0),
        (GPU_A, "power_w", job): (480.5, 1.0),
        (GPU_A, "energy_j", job): (3_600_000.0, 1.0),
        (GPU_A, "mem_used_b", job): (63488.0 * MIB, 1.0),
        (GPU_A, "mem_total_b", job): (137_438_953_472.0, 1.0),
        (GPU_A, "temp_c", job): (61.0, 1.0),
        (GPU_B, "gpu_util", ""): (0.0, 1.0),  # compute group 0.00; its all-engines N/A is not needed
        (GPU_B, "sm_active", ""): (0.05, 1.0),
        (GPU_B, "mem_bw", ""): (0.0, 1.0),
        (GPU_B, "power_w", ""): (195.25, 1.0),
        (GPU_B, "energy_j", ""): (1_200_000.0, 1.0),
        (GPU_B, "mem_used_b", ""): (3072.0 * MIB, 1.0),
        (GPU_B, "mem_total_b", ""): (137_438_953_472.0, 1.0),
        (GPU_B, "temp_c", ""): (41.0, 1.0),
    }
    assert rows(batch) == expected
    assert set(batch.columns["ts_ms"]) == {1_764_421_200_250}
    assert [(w.workload_key, w.facts.get("slurm.job")) for w in batch.workloads] == [(job, "4242")]
    assert [(d.device_id, d.gpu_model, d.node, d.region, d.gpu_index, d.vendor) for d in batch.devices] == [
        (GPU_A, "Intel Data Center GPU Max 1550", "xe-node-01", "dc1", 0, "intel"),
        (GPU_B, "Intel Data Center GPU Max 1550", "xe-node-01", "dc1", 1, "intel"),  # named from PCI id 0xbd5
    ]
    assert (sampler.pci_bus_id(GPU_A), sampler.pci_bus_id(GPU_B), sampler.pci_bus_id("x")) == (
        "0000:29:00.0",
        "0000:9a:00.0",
        None,
    )


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("[]", "xpu-smi ps -j: expected a JSON object, got list"),
        (
            '{"error": "Level Zero Initialization Error", "errno": 3}',
            "xpu-smi ps -j: Level Zero Initialization",
        ),
        ('{"device_util_by_proc_list": {"a": 1}}', "device_util_by_proc_list is not a list"),
        ('{"device_util_by_proc_list": [{"process_id": "1; rm", "device_id": 0}]}', "[0] has no process_id"),
        ('{"device_util_by_proc_list": [{"process_id": true, "device_id": 0}]}', "[0] has no process_id"),
        ("Error: no GPU\n", "xpu-smi ps -j: not JSON: Error: no GPU"),
    ],
)
def test_garbage_ps_output_is_an_error(output: str, message: str) -> None:
    with pytest.raises(ConnectorError) as caught:
        parse_ps(output)
    assert message in str(caught.value)


def test_the_dump_falls_back_to_all_engines_and_leaves_na_out() -> None:
    header = (
        "Timestamp, DeviceId, Compute engine group utilization (%), "
        "Average % utilization of all GPU Engines, GPU Power (W)"
    )
    got = parse_dump(f"{header}\n13:00:00.000,    0,  N/A, 42.50,  N/A\n")
    assert got == {"0": {"gpu_util": 42.5}}


def test_a_warning_on_stderr_does_not_spoil_the_reading(tmp_path: Path) -> None:
    # xpu-smi without access to /dev/mei*: a warning on stderr, the utilizations read N/A
    warn = (
        "sys.stderr.write('\\nWARNING: Elevated privileges required for the following metrics:\\n"
        "  - Metric 9 (EU_ACTIVE) - will display as N/A\\n')"
    )
    dump = (
        "Timestamp, DeviceId, Compute engine group utilization (%), GPU EU Array Active (%), GPU Power (W)\n"
        "13:00:00.000,    0,  N/A,  N/A, 480.50\n"
    )
    sampler = XpuSmiSampler({"binary": str(xpu_smi(tmp_path, dump, warn)), "processes": False})
    got = rows(sampler.sample())
    assert got == {(GPU_A, "power_w", ""): (480.5, 1.0), (GPU_A, "mem_total_b", ""): (137_438_953_472.0, 1.0)}
    (tmp_path / "f").mkdir()  # a failing tool: its stderr is quoted
    error = "sys.stderr.write('dcmi module initialize failed. ret is -8005')"
    failing = fake_tool(tmp_path / "f", "npu-smi", {}, error)
    with pytest.raises(
        RetriableError, match="unknown arguments: info dcmi module initialize failed. ret is -8005"
    ):
        NpuSmiSampler({"binary": str(failing)}).sample()


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "no 'Timestamp, DeviceId, …' header in its output: nothing"),
        ("Error: Level Zero Initialization Error\n", "header in its output: Error: Level Zero"),
        (ROW + "1e999\n", "line 2, column 'GPU Power (W)': '1e999' is not a reading"),
        (ROW + "nan\n", "line 2, column 'GPU Power (W)': 'nan' is not a reading"),
        (ROW + "-3\n", "'-3' is not a reading"),
        (ROW + "lots\n", "line 2, column 'GPU Power (W)': 'lots' is not a number"),
        (ROW[:-2] + "\n", "line 2: 2 fields, the header has 3"),
        (ROW.replace("0, ", "x;rm, ") + "5\n", "column 'DeviceId': 'x;rm' is not a device id"),
        ("Timestamp, Power\n", "line 1: expected 'Timestamp, DeviceId, …'"),
        ("Timestamp, DeviceId, GPU Power (W)\nError: Device not found\n", "line 2: Error: Device not found"),
    ],
)  # fmt: skip
def test_garbage_dump_output_is_an_error_naming_line_and_column(output: str, message: str) -> None:
    with pytest.raises(ConnectorError) as caught:
        parse_dump(output)
    assert message in str(caught.value)


def test_npu_smi_info_gives_each_chip_split_between_its_workloads(tmp_path: Path) -> None:
    text = (FIXTURES / "ascend/npu-smi-info.txt").read_text()
    binary = fake_tool(tmp_path, "npu-smi", {"info": text})

    class ByPid:  # the agent's attributor, at its interface (cgroups are tested in test_attribution)
        def workload(self, pid: int) -> WorkloadInfo:
            key = {2314: "k8s:llm/pretrain-0/worker", 2377: "docker:0123abcd"}[pid]
            return WorkloadInfo(key)

    sampler = NpuSmiSampler(
        {"binary": str(binary), "node": "npu-node-01"}, ByPid(), clock=lambda: 1_764_421_200.0
    )
    batch = sampler.sample()
    chip0, chip1, chip2 = "npu-node-01/npu0-0", "npu-node-01/npu1-0", "npu-node-01/npu2-0"
    pod, box = "k8s:llm/pretrain-0/worker", "docker:0123abcd"
    expected = {}
    for who in (pod, box):  # two workloads on chip 0: each holds half of every reading
        for metric, value in (("power_w", 352.6), ("temp_c", 57.0), ("sm_active", 87.0), ("gpu_util", 87.0),
                              ("mem_used_b", 52314.0 * MIB), ("mem_total_b", 65536.0 * MIB)):  # fmt: skip
            expected[(chip0, metric, who)] = (value, 0.5)
    for metric, value in (("power_w", 96.9), ("temp_c", 36.0), ("sm_active", 0.0), ("gpu_util", 0.0),
                          ("mem_used_b", 3403.0 * MIB), ("mem_total_b", 65536.0 * MIB)):  # fmt: skip
        expected[(chip1, metric, "")] = (value, 1.0)
    expected[(chip2, "mem_total_b", "")] = (65536.0 * MIB, 1.0)  # chip 2 reads NA for the rest
    assert rows(batch) == expected
    assert {w.workload_key for w in batch.workloads} == {pod, box}
    assert [(d.device_id, d.gpu_model, d.gpu_index, d.node, d.vendor) for d in batch.devices] == [
        (chip0, "Ascend 910B3", 0, "npu-node-01", "huawei"),
        (chip1, "Ascend 910B3", 1, "npu-node-01", "huawei"),
        (chip2, "Ascend 910B3", 2, "npu-node-01", "huawei"),
    ]
    assert [sampler.pci_bus_id(c) for c in (chip0, chip1, chip2, "x")] == [
        "0000:C1:00.0",
        "0000:C2:00.0",
        "0000:81:00.0",
        None,
    ]


def test_npu_smi_layout_of_a_later_release_and_a_card_without_hbm() -> None:
    # npu-smi 26.x: wider columns and a 'Process id in container' column; a 310P-style chip whose
    # memory is DDR (HBM 0 / 0) — read by the header's titles, not by position.
    text = (FIXTURES / "ascend/npu-smi-info-26.txt").read_text()
    (chip,) = parse_info(text)
    assert (chip.npu, chip.chip, chip.name, chip.bus_id) == (4, 0, "310P3", "0000:01:00.0")
    assert chip.values == {"power_w": 24.5, "temp_c": 44.0, "sm_active": 13.0, "gpu_util": 13.0,
                           "mem_used_b": 1560.0 * MIB, "mem_total_b": 44280.0 * MIB}  # fmt: skip


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "no '| NPU  Name | Health | …' table in its output: nothing"),
        ("dcmi module initialize failed. ret is -8005\n", "its output: dcmi module initialize failed"),
        ("| NPU Name | Health | Power(W) Temp(C) |\n| Chip | Bus-Id | AICore(%) |\n"
         "| 0 910B3 | OK | hot 50 |\n| 0 | 0000:C1:00.0 | 5 |\n", "line 3, Power(W): 'hot' is not a number"),
        ("| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n| 0 910B3 | OK | nan |\n"
         "| 0 | 0000:C1:00.0 | 5 |\n", "line 3, Power(W): 'nan' is not a reading"),
        ("| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n| 0 | 0000:C1:00.0 | 5 |\n",
         "line 3: a chip line before any NPU line"),
        ("| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n| zero 910B3 | OK | 1 |\n",
         "line 3: expected an NPU or chip line"),
        ("| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n| NPU Chip | Process id | name |\n"
         "| 9 0 | 77 | python | 1 |\n", "line 4: a process on NPU 9 chip 0, not in the table"),
        ("| NPU Name | Health | Power(W) |\n| Chip | Bus-Id | AICore(%) |\n| NPU Chip | Process id | name |\n"
         "| 0 0 | pid | python | 1 |\n", "line 4: expected '| NPU chip | pid | …'"),
    ],
)  # fmt: skip
def test_garbage_npu_smi_output_is_an_error_naming_the_line(output: str, message: str) -> None:
    with pytest.raises(ConnectorError) as caught:
        parse_info(output)
    assert message in str(caught.value)


def test_a_missing_tool_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    absent = str(tmp_path / "no-such-xpu-smi")
    with pytest.raises(ConfigurationError, match=r"no-such-xpu-smi: not found \(install it, or set binary"):
        XpuSmiSampler({"binary": absent}).sample()
    not_executable = tmp_path / "npu-smi"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigurationError, match="npu-smi: cannot run it: Permission denied"):
        NpuSmiSampler({"binary": str(not_executable)}).sample()


def test_failing_hanging_and_flooding_tools_are_retriable_errors(tmp_path: Path) -> None:
    failing = fake_tool(tmp_path, "npu-smi", {})
    with pytest.raises(
        RetriableError, match=r"`.*npu-smi info` exited with status 2: Error: unknown arguments: info"
    ):
        NpuSmiSampler({"binary": str(failing)}).sample()
    hanging = tmp_path / "hang" / "npu-smi"
    hanging.parent.mkdir()
    hanging.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    hanging.chmod(0o755)
    with pytest.raises(RetriableError, match=r"did not finish in 0.5 s"):
        NpuSmiSampler({"binary": str(hanging), "timeout_s": 0.5}).sample()
    flooding = tmp_path / "flood" / "npu-smi"
    flooding.parent.mkdir()
    flooding.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write('|' * (5 * 1024 * 1024))\n")
    flooding.chmod(0o755)
    with pytest.raises(RetriableError, match=r"printed more than 4194304 bytes; not read"):
        NpuSmiSampler({"binary": str(flooding)}).sample()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"binry": "x"}, "unknown option(s) binry"),
        ({"timeout_s": 0}, "timeout_s: expected seconds in (0, 300], got 0"),
        ({"timeout_s": True}, "timeout_s: expected seconds"),
        ({"environment": "mars"}, "environment: expected one of onprem, aws, gcp, azure, got 'mars'"),
        ({"node": 7}, "node: expected a string, got 7"),
        ({"processes": "yes"}, "processes: expected true or false, got 'yes'"),
    ],
)
def test_bad_options_are_errors_naming_the_key(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        SmiOptions.parse(options, binary="xpu-smi")
    assert str(caught.value).startswith("[agent.source_options] of the xpu-smi sampler: ")
    assert message in str(caught.value)


def test_the_agent_refuses_to_start_with_bad_sampler_options(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(
        '[agent]\nservice_url = "http://127.0.0.1:9"\ntoken = "tttttttttttttttttttt"\nname = "n"\n'
        f'spool_dir = "{tmp_path / "spool"}"\nsource = "connectors.npu_smi:NpuSmiSampler"\n'
        "[agent.source_options]\ntimeout = 5\n"
    )
    out = subprocess.run([sys.executable, "-m", "service.agent", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "[agent.source_options] of the npu-smi sampler: unknown option(s) timeout" in out.stderr


def test_a_broken_tool_never_stops_the_agent_loop(tmp_path: Path) -> None:
    dump = (FIXTURES / "xpum/xpu-smi-dump.csv").read_text()
    good = xpu_smi(tmp_path, dump)
    broken = tmp_path / "broken"
    broken.mkdir()
    garbage = xpu_smi(broken, ROW + "NaN\n")
    settings = AgentSettings(
        service_url="http://svc", token="t" * 20, name="n", agent_id="h", spool_dir=tmp_path / "s"
    )
    spool = Spool(tmp_path / "s", "h", "n", fsync=False)
    shipper = Shipper(
        httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503))), "http://svc", "t"
    )
    sampler = XpuSmiSampler({"binary": str(garbage)})
    agent = Agent(settings, sampler=sampler, spool=spool, shipper=shipper,
                  clock=lambda: dt.datetime(2025, 3, 3, tzinfo=dt.UTC), sleep=lambda s: None)  # fmt: skip
    agent.tick()
    agent.tick()
    assert (agent.ticks, agent.tick_errors) == (0, 2)  # logged, nothing spooled, still running
    sampler.options = SmiOptions.parse({"binary": str(good)}, binary="xpu-smi")  # the tool is fixed
    agent.tick()
    assert (agent.ticks, agent.tick_errors) == (1, 2)
    assert os.listdir(tmp_path / "s")  # the good reading was spooled


def test_the_samplers_keep_the_agent_small() -> None:
    # What `source = "connectors.xpu_smi:XpuSmiSampler"` / npu_smi load in the agent's process.
    from agent.test_agent_imports import NOT_IN_AGENT

    code = (
        "import sys, connectors.xpu_smi, connectors.npu_smi\n"
        "print(' '.join({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    assert "connectors" in loaded and loaded & NOT_IN_AGENT == set()
