from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from fake_connectors import fake_registry

from service.settings import ConfigError, Settings, load_settings
from service.urls import mask_url

CONFIG = """
database_url = "sqlite:///from-file.db"
max_window_days = 100
log_format = "json"

[[connectors]]
name = "dc1"
type = "fake"
url = "http://127.0.0.1:9090"
token = "s3cret-token"

[[connectors]]
name = "bills-eu"
type = "fakebill"
path = "/data/cur"
enabled = false

[[sites]]
name = "dc1"
match_region = "dc1"
currency = "USD"
default_capex_per_gpu = "30000"
price_per_kwh = "0.12"

[[rate_cards]]
name = "p5"
environment = "aws"
instance_type = "p5.48xlarge"
rate_per_gpu_hour = "6.88"
currency = "USD"
valid_from = "2020-01-01T00:00:00Z"

[[fx_rates]]
base = "EUR"
quote = "USD"
day = 2025-09-01
rate = "1.17"
"""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpu-ledger.toml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    s = load_settings(registry=fake_registry())
    assert s.database_url == "sqlite:///gpu-ledger.db"
    assert (s.max_window_days, s.page_size_max, s.idle_threshold_pct) == (400, 500, 5.0)
    assert s.log_format == "console" and s.connectors == []


def test_file_is_read(tmp_path: Path) -> None:
    s = load_settings(_write(tmp_path, CONFIG), registry=fake_registry())
    assert s.database_url == "sqlite:///from-file.db"
    assert s.max_window_days == 100 and s.log_format == "json"
    assert [c.name for c in s.connectors] == ["dc1", "bills-eu"]
    assert s.connector("dc1").url == "http://127.0.0.1:9090"  # type: ignore[attr-defined]
    assert s.connector("bills-eu").enabled is False
    assert s.sites[0].price_per_kwh == Decimal("0.12")
    assert s.rate_cards[0].rate_per_gpu_hour == Decimal("6.88")
    assert s.fx_rates[0].rate == Decimal("1.17")


def test_config_path_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_CONFIG", str(_write(tmp_path, CONFIG)))
    assert load_settings(registry=fake_registry()).max_window_days == 100


def test_env_wins_over_file_for_scalars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", "sqlite:///from-env.db")
    monkeypatch.setenv("GPU_LEDGER_MAX_WINDOW_DAYS", "7")
    s = load_settings(_write(tmp_path, CONFIG), registry=fake_registry())
    assert s.database_url == "sqlite:///from-env.db" and s.max_window_days == 7
    assert s.log_format == "json"  # not overridden: from the file


def test_env_overrides_connector_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_CONNECTORS__DC1__URL", "http://other:9090")
    monkeypatch.setenv("GPU_LEDGER_CONNECTORS__DC1__INTERVAL_S", "60")
    monkeypatch.setenv("GPU_LEDGER_CONNECTORS__DC1__REGIONS", '["us-east-1", "eu-west-1"]')
    monkeypatch.setenv("GPU_LEDGER_CONNECTORS__BILLS_EU__ENABLED", "true")
    s = load_settings(_write(tmp_path, CONFIG), registry=fake_registry())
    dc1 = s.connector("dc1")
    assert dc1.url == "http://other:9090" and dc1.interval_s == 60.0  # type: ignore[attr-defined]
    assert dc1.regions == ["us-east-1", "eu-west-1"]  # type: ignore[attr-defined]
    assert s.connector("bills-eu").enabled is True


def test_env_override_of_unknown_connector_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_LEDGER_CONNECTORS__NOPE__URL", "x")
    with pytest.raises(ConfigError, match=r"GPU_LEDGER_CONNECTORS__NOPE__URL: no connector named 'NOPE'"):
        load_settings(_write(tmp_path, CONFIG), registry=fake_registry())


def test_unknown_connector_key_names_file_table_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, CONFIG.replace('url = "http', 'urll = "http'))
    with pytest.raises(ConfigError) as err:
        load_settings(path, registry=fake_registry())
    msg = str(err.value)
    assert str(path) in msg and '[[connectors]] #1 name="dc1"' in msg and 'key "urll": unknown key' in msg


def test_unknown_connector_type_lists_known(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[connectors]]\nname = "x"\ntype = "prometheus"\n')
    known = r'unknown connector type "prometheus"; known types: fake, fakebill'
    with pytest.raises(ConfigError, match=known):
        load_settings(path, registry=fake_registry())


def test_bad_value_names_key(tmp_path: Path) -> None:
    path = _write(tmp_path, CONFIG.replace('price_per_kwh = "0.12"', 'price_per_kwh = "cheap"'))
    with pytest.raises(ConfigError, match=r'\[\[sites\]\] #1 name="dc1": key "price_per_kwh"'):
        load_settings(path, registry=fake_registry())


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown top-level key.*'databse_url'"):
        load_settings(_write(tmp_path, 'databse_url = "x"\n'), registry=fake_registry())


def test_bad_scalar(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='key "log_format"'):
        load_settings(_write(tmp_path, 'log_format = "xml"\n'), registry=fake_registry())


def test_duplicate_connector_name(tmp_path: Path) -> None:
    text = '[[connectors]]\nname = "a"\ntype = "fake"\n' * 2
    with pytest.raises(ConfigError, match='duplicate connector name "a"'):
        load_settings(_write(tmp_path, text), registry=fake_registry())


def test_toml_syntax_error_names_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "max_window_days = \n")
    with pytest.raises(ConfigError, match=f"{path}: not valid TOML"):
        load_settings(path, registry=fake_registry())


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml", registry=fake_registry())


def test_secrets_masked_in_repr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", "postgresql+psycopg://ledger:pa55word@db/ledger")
    s = load_settings(_write(tmp_path, CONFIG), registry=fake_registry())
    text = repr(s) + str(s)
    assert "pa55word" not in text and "s3cret-token" not in text
    assert "ledger:***@db" in text
    assert s.connector("dc1").token.get_secret_value() == "s3cret-token"  # type: ignore[attr-defined]


def test_mask_url() -> None:
    assert mask_url("postgresql://u:p%40ss@h/d") == "postgresql://u:***@h/d"
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"


def test_api_settings() -> None:
    api = Settings(max_window_days=9).api_settings()
    assert (api.max_window_days, api.page_size_max, api.idle_threshold_pct) == (9, 500, 5.0)


def test_describes_names_other_configured_connectors(tmp_path: Path) -> None:
    from connectors.registry import default_registry

    def slurm(describes: str) -> str:
        return (
            '[[connectors]]\nname = "nodes-a"\ntype = "synthetic"\n'
            f'[[connectors]]\nname = "slurm-a"\ntype = "slurm"\npath = "sacct.txt"\ndescribes = {describes}\n'
        )

    ok = load_settings(_write(tmp_path, slurm('["nodes-a"]')), registry=default_registry())
    assert ok.connector("slurm-a").describes == ("nodes-a",)  # type: ignore[attr-defined]
    for bad, named in (('["nodes-b"]', "nodes-b"), ('["slurm-a"]', "slurm-a")):
        with pytest.raises(ConfigError) as caught:
            load_settings(_write(tmp_path, slurm(bad)), registry=default_registry())
        assert str(caught.value).endswith(
            f'[[connectors]] #2 name="slurm-a": key "describes": no other connector is named "{named}" '
            "(configured: nodes-a)"
        )
    with pytest.raises(ConfigError, match='key "describes"'):
        load_settings(_write(tmp_path, slurm("[]")), registry=default_registry())
