"""examples/: every config loads through the real settings loader (connector keys validated by the
registry's config models) and every connector it names is built by the registry; the node agent's
file loads through the agent's own loader. A key renamed in the code fails here, not for a user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from connectors.registry import default_registry
from service.agent.config import load_agent_settings
from service.agent.sampler import load_sampler
from service.db import make_engine
from service.settings import load_settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# The plugin example is a package (its pyproject.toml is no service configuration): test_example_plugin.py.
SERVICE_CONFIGS = sorted(
    p for p in EXAMPLES.rglob("*.toml") if p.name not in ("agent.toml", "pyproject.toml")
)

#: The settings issue 14 asks an example of, and the connector types each one must show.
REQUIRED = {
    "onprem-dcgm-prometheus.toml": {"prometheus", "slurm"},
    "node-agent/service.toml": {"agent"},
    "aws.toml": {"cloudwatch", "aws_cur"},
    "gcp.toml": {"gcp_monitoring", "gcp_billing"},
    "azure.toml": {"azure_monitor", "azure_cost"},
    "hybrid-with-bills.toml": {
        "prometheus",
        "cloudwatch",
        "gcp_monitoring",
        "azure_monitor",
        "aws_cur",
        "focus",
    },
}


@pytest.fixture(autouse=True)
def no_ledger_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files alone: no GPU_LEDGER_* variable of the machine running the tests mixes in."""
    for name in [n for n in os.environ if n.upper().startswith("GPU_LEDGER_")]:
        monkeypatch.delenv(name)


def test_every_setting_has_its_example_and_the_readme_lists_them() -> None:
    found = {p.relative_to(EXAMPLES).as_posix() for p in SERVICE_CONFIGS}
    assert found == set(REQUIRED)
    readme = (EXAMPLES / "README.md").read_text()
    for name in [*REQUIRED, "node-agent/agent.toml"]:
        assert f"({name})" in readme, name


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_example_loads_and_its_connectors_build(name: str, sqlite_url: str) -> None:
    settings = load_settings(EXAMPLES / name)
    assert {c.type for c in settings.connectors} == REQUIRED[name]
    registry = default_registry()
    engine = make_engine(sqlite_url)
    try:
        for config in settings.connectors:
            extra = {"engine": engine} if config.type == "agent" else {}
            connector = registry.build(config, **extra)
            assert connector.config.name == config.name
    finally:
        engine.dispose()
    assert settings.instance_catalog() is not None  # [[instance_types]] merge into the catalog
    for site in settings.sites:
        assert site.match_region or site.match_cluster


def test_hybrid_prices_every_environment_and_converts_currencies() -> None:
    settings = load_settings(EXAMPLES / "hybrid-with-bills.toml")
    assert {c.environment for c in settings.rate_cards} == {"aws", "gcp", "azure"}
    assert {s.currency for s in settings.sites} == {"EUR"}
    assert {(f.base, f.quote) for f in settings.fx_rates} == {("EUR", "USD")}
    assert settings.auth.oidc_enabled


def test_node_agent_example_loads_through_the_agent_and_matches_the_service() -> None:
    agent = load_agent_settings(EXAMPLES / "node-agent" / "agent.toml")
    sampler = load_sampler(agent)  # NVML itself is started on the first sample: no GPU needed here
    service = load_settings(EXAMPLES / "node-agent" / "service.toml")
    assert [c.name for c in service.connectors if c.type == "agent"] == [agent.name]
    assert service.connector(agent.name).period_s == agent.period_s == sampler.config.period_s
    assert sampler.config.region in {s.match_region for s in service.sites}
    assert len(agent.attribution_rules) == 2


def test_a_misspelt_key_in_an_example_fails_with_its_name(tmp_path: Path) -> None:
    text = (EXAMPLES / "aws.toml").read_text().replace("regions = [", "region_list = [", 1)
    (tmp_path / "aws.toml").write_text(text)
    with pytest.raises(ValueError, match='key "region_list"'):
        load_settings(tmp_path / "aws.toml")
