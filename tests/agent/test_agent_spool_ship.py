"""The agent's spool (order, sequence, crash recovery) and shipper (retry, backoff, quarantine)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path

import httpx
import pytest
from agent_fakes import FakeClock, FakeSampler

from service.agent.config import AgentConfigError, AgentSettings, load_agent_settings
from service.agent.loop import Agent
from service.agent.ship import Shipper, backoff_delay_s
from service.agent.spool import Spool

T0 = dt.datetime(2025, 9, 10, tzinfo=dt.UTC)


def _spool(path: Path) -> Spool:
    return Spool(path, "host1", "node-a")


def test_sequence_persists_and_open_batch_survives_a_crash(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    sampler = FakeSampler(clock, n=2)
    spool = _spool(tmp_path)
    spool.append(sampler.sample())
    first = spool.seal()
    assert first is not None and first.name == "000000000001.batch"
    clock.sleep(5)
    spool.append(sampler.sample())  # batch 2 is open when the agent "crashes"
    with (tmp_path / "000000000002.open").open("ab") as f:
        f.write(b'{"devices": [], "workl')  # a torn last line
    spool.delete(first)

    again = _spool(tmp_path)  # restart: the open batch is sealed under its own id
    assert [p.name for p in again.pending()] == ["000000000002.batch"]
    payload = again.payload(again.pending()[0])
    assert payload["batch_id"] == "host1:2" and payload["agent"] == "node-a"
    assert payload["samples"]["ts_ms"] == [int(T0.timestamp() * 1000) + 5000] * 14
    again.delete(again.pending()[0])
    assert _spool(tmp_path).next_seq() == 3  # never reused, even with an empty spool


def test_nan_readings_never_reach_the_wire(tmp_path: Path) -> None:
    sampler = FakeSampler(FakeClock(T0), n=1)
    batch = sampler.sample()
    batch.samples = batch.samples.with_columns(
        value=batch.samples["value"].scatter(0, float("nan")), workload_key=None
    )
    spool = _spool(tmp_path)
    spool.append(batch)
    payload = spool.payload(spool.seal())  # type: ignore[arg-type]
    assert len(payload["samples"]["value"]) == 6 and set(payload["samples"]["workload_key"]) == {""}


class Service:
    """An httpx transport answering from a script of status codes (then 200)."""

    def __init__(self, statuses: list[int]):
        self.statuses, self.seen = list(statuses), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.seen.append((body["batch_id"], request.headers["authorization"]))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 599:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status, json={"duplicate": status == 200 and len(self.seen) > 9})


def _spooled(tmp_path: Path, batches: int) -> Spool:
    clock = FakeClock(T0)
    sampler, spool = FakeSampler(clock, n=1), _spool(tmp_path)
    for _ in range(batches):
        spool.append(sampler.sample())
        spool.seal()
        clock.sleep(60)
    return spool


def test_ship_in_order_and_retry_after_failures(tmp_path: Path) -> None:
    spool = _spooled(tmp_path, 3)
    service = Service([503, 599, 200, 429, 200, 200])
    shipper = Shipper(
        httpx.Client(transport=httpx.MockTransport(service)), "http://svc/api/v1/batches", "tok"
    )
    results = [shipper.ship(spool) for _ in range(4)]
    assert [r.failed for r in results] == [True, True, True, False]
    assert shipper.failures == 0 and spool.pending() == []
    assert [b for b, _ in service.seen] == ["host1:1", "host1:1", "host1:1", "host1:2", "host1:2", "host1:3"]
    assert service.seen[0][1] == "Bearer tok"


def test_bad_batch_is_quarantined_and_auth_failure_keeps_everything(tmp_path: Path) -> None:
    spool = _spooled(tmp_path, 2)
    service = Service([401, 400, 200])
    shipper = Shipper(httpx.Client(transport=httpx.MockTransport(service)), "http://svc/x", "tok")
    assert shipper.ship(spool).failed and len(spool.pending()) == 2  # 401: nothing deleted
    result = shipper.ship(spool)
    assert (result.rejected, result.shipped, result.failed) == (1, 1, False)
    assert [p.name for p in (tmp_path / "rejected").glob("*.batch")] == ["000000000001.batch"]
    assert "HTTP 400" in (tmp_path / "rejected" / "000000000001.reason").read_text()


def test_backoff_is_jittered_and_capped() -> None:
    rng = random.Random(1)
    delays = [backoff_delay_s(n, 1.0, 60.0, rng) for n in (1, 2, 3, 10, 30) for _ in range(200)]
    assert all(0 <= d <= 60 for d in delays)
    assert max(delays[:200]) <= 1.0 and max(delays[600:]) > 30  # grows, then capped
    assert len(set(delays)) == len(delays)  # jitter: a fleet does not retry in lockstep


def test_loop_samples_through_an_outage_and_drains(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    down = {"until": T0 + dt.timedelta(minutes=10)}

    def handler(request: httpx.Request) -> httpx.Response:
        if clock() < down["until"]:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"duplicate": False})

    settings = AgentSettings(
        service_url="http://svc", token="t" * 20, name="node-a", agent_id="host1", spool_dir=tmp_path,
        backoff_cap_s=60,
    )  # fmt: skip
    shipper = Shipper(httpx.Client(transport=httpx.MockTransport(handler)), settings.batches_url, "t",
                      cap_s=60, rng=random.Random(3))  # fmt: skip
    spool = _spool(tmp_path)
    agent = Agent(settings, sampler=FakeSampler(clock, n=1), spool=spool, shipper=shipper,
                  clock=clock, sleep=clock.sleep)  # fmt: skip
    agent.run(until=T0 + dt.timedelta(minutes=5))
    assert agent.ticks == 60 and len(spool.pending()) == 5  # nothing shipped, all spooled
    agent.run(until=T0 + dt.timedelta(minutes=20))  # a restarted agent picks them up
    assert spool.pending() == [] and agent.ticks == 60 + 180
    assert spool.next_seq() == 21  # 5 + 15 batches of 12 ticks, one batch per minute


def test_config(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        '[agent]\nservice_url = "http://svc/"\ntoken = "s3cr3t-t0ken"\nname = "n"\nspool_dir = "/tmp/s"\n'
    )
    settings = load_agent_settings(path)
    assert settings.batches_url == "http://svc/api/v1/batches"
    assert (settings.period_s, settings.ship_every_s, settings.metrics_port, settings.source) == (
        5,
        60,
        9400,
        "nvml",
    )
    assert "s3cr3t" not in repr(settings)
    path.write_text(path.read_text() + "perod_s = 3\n")
    with pytest.raises(AgentConfigError, match='key "perod_s": unknown key'):
        load_agent_settings(path)
    path.write_text("[agnet]\n")
    with pytest.raises(AgentConfigError, match="unknown top-level key"):
        load_agent_settings(path)


def test_nvml_sampler_is_the_default_and_built_lazily(tmp_path: Path) -> None:
    from service.agent.sampler import load_sampler

    settings = AgentSettings(
        service_url="http://svc", token="t", name="node-a", spool_dir=tmp_path, period_s=2,
        source_options={"cluster": "c1", "node": "n17"},
    )  # fmt: skip
    sampler = load_sampler(settings)  # no GPU here: NVML is only started by the first reading
    assert type(sampler).__name__ == "NvmlSampler"
    assert (sampler.config.period_s, sampler.config.cluster, sampler.config.node) == (2, "c1", "n17")  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match='source_options.*key "clustr": unknown key'):
        load_sampler(dataclasses.replace(settings, source_options={"clustr": "c1"}))


def test_the_nvml_sampler_gets_the_configured_attribution(tmp_path: Path) -> None:
    from connectors.attribution import ProcessAttributor, Rule
    from service.agent.sampler import load_sampler

    settings = AgentSettings(
        service_url="http://svc", token="t", name="node-a", spool_dir=tmp_path,
        attribution_rules=[{"namespace": "team-(.*)", "team": "$1"}],
        docker_socket=tmp_path / "docker.sock", proc_root=tmp_path / "proc",
    )  # fmt: skip
    sampler = load_sampler(settings)
    attributor = sampler.attributor  # type: ignore[attr-defined]
    assert isinstance(attributor, ProcessAttributor)
    assert attributor.rules == [Rule(namespace="team-(.*)", team="$1")]
    assert attributor.proc_root == tmp_path / "proc"
    assert attributor.docker is not None and attributor.docker.socket == tmp_path / "docker.sock"
    no_docker = load_sampler(dataclasses.replace(settings, docker_socket=None))
    assert no_docker.attributor.docker is None  # type: ignore[attr-defined]
