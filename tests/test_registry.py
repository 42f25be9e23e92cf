from __future__ import annotations

import logging

import pytest
from fake_connectors import FakeMetrics, ep, fake_registry

from connectors.registry import ConnectorConfigError, Registry, UnknownConnectorType, default_registry


def test_finds_class_by_type_name() -> None:
    assert fake_registry().connector_class("fake") is FakeMetrics


def test_unknown_type_lists_known_types() -> None:
    known = r'unknown connector type "nope"; known types: fake, fakebill'
    with pytest.raises(UnknownConnectorType, match=known):
        fake_registry().connector_class("nope")


def test_disabled_types_are_not_known() -> None:
    reg = fake_registry(disabled=("fakebill",))
    assert reg.known_types() == ["fake"]
    with pytest.raises(UnknownConnectorType, match="disabled by GPU_LEDGER_DISABLED_CONNECTORS"):
        reg.connector_class("fakebill")


def test_disabled_list_read_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_DISABLED_CONNECTORS", " fake , other")
    reg = Registry([ep("fake", "fake_connectors:FakeMetrics")])
    assert reg.disabled == {"fake", "other"}


def test_missing_optional_dependency_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    reg = Registry(
        [ep("npu", "fake_plugin_missing_dep:Connector"), ep("fake", "fake_connectors:FakeMetrics")]
    )
    with caplog.at_level(logging.WARNING), pytest.raises(UnknownConnectorType, match="gpu_ledger_test_sdk"):
        reg.connector_class("npu")
    assert "npu" in caplog.text
    assert reg.known_types() == ["fake"]


def test_other_import_errors_are_raised() -> None:
    reg = Registry([ep("broken", "fake_plugin_broken:Connector"), ep("gone", "fake_connectors_gone:X")])
    with pytest.raises(RuntimeError, match="plugin bug"):
        reg.connector_class("broken")
    with pytest.raises(ModuleNotFoundError):  # the plugin's own module missing: a broken install
        reg.connector_class("gone")


def test_build_validates_and_constructs() -> None:
    conn = fake_registry().build({"name": "a", "type": "fake", "url": "http://x", "interval_s": 60})
    assert isinstance(conn, FakeMetrics)
    assert conn.config.interval_s == 60.0


def test_unknown_key_names_key_and_connector() -> None:
    with pytest.raises(ConnectorConfigError, match=r'connector "a" \(type "fake"\): key "urll": unknown key'):
        fake_registry().validate({"name": "a", "type": "fake", "urll": "http://x"})


def test_secrets_masked_in_repr() -> None:
    config = fake_registry().validate({"name": "a", "type": "fake", "token": "hunter2"})
    assert "hunter2" not in repr(config)


def test_builtins_registered_through_entry_points() -> None:
    # `pip install -e .` registers the built-ins in the same group third parties use.
    assert "synthetic" in default_registry()._eps
