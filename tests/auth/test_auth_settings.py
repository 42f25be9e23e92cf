"""The ``[auth]`` table: from the config file, overridden by ``GPU_LEDGER_AUTH__<KEY>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import ConfigError, load_settings

CONFIG = """
[auth]
oidc_issuer = "https://idp.example.com"
oidc_audience = "gpu-ledger"
oidc_jwks_url = "https://idp.example.com/jwks"
oidc_group_scopes = { "finops" = ["read"], "team-ml" = ["read:team:ml"] }
"""


def test_file_then_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    auth = load_settings(path).auth
    assert (auth.anonymous_read, auth.oidc_enabled, auth.oidc_algorithms) == (False, True, ("RS256", "ES256"))
    assert auth.oidc_group_scopes == {"finops": ("read",), "team-ml": ("read:team:ml",)}
    monkeypatch.setenv("GPU_LEDGER_AUTH__ANONYMOUS_READ", "true")
    monkeypatch.setenv("GPU_LEDGER_AUTH__OIDC_ALGORITHMS", '["ES256"]')
    monkeypatch.setenv("GPU_LEDGER_AUTH__OIDC_GROUP_SCOPES", '{"ops": ["metrics"]}')
    auth = load_settings(path).auth
    assert (auth.anonymous_read, auth.oidc_algorithms, auth.oidc_group_scopes) == (
        True,
        ("ES256",),
        {"ops": ("metrics",)},
    )
    assert auth.oidc_issuer == "https://idp.example.com"  # file keys not overridden stay


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[auth]\nanonymous = true\n", {}, '[auth]: key "anonymous": unknown key'),
        ('[auth]\noidc_algorithms = ["HS256"]\n', {}, "algorithm(s) HS256 not allowed"),
        ("", {"GPU_LEDGER_AUTH__OIDC_GROUP_SCOPES": '{"g": ["root"]}'}, "group 'g': unknown scope 'root'"),
        ("", {"GPU_LEDGER_AUTH__OIDC_ISSUER": "https://idp"}, "oidc_audience and oidc_jwks_url must be set"),
        ("auth = 1\n", {}, "'auth' must be a table ([auth])"),
    ],
)
def test_mistakes_name_the_table_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, env: dict[str, str], message: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(path))
