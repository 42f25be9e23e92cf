"""The ``[auth]`` table of the config file (``Settings.auth``).

::

    [auth]
    anonymous_read = false          # callers without a token read everything (demo on loopback only)
    oidc_issuer = "https://login.example.com/realms/corp"   # JWTs must carry this `iss`
    oidc_audience = "gpu-ledger"    # …and this `aud`
    oidc_jwks_url = "https://login.example.com/realms/corp/protocol/openid-connect/certs"
    oidc_algorithms = ["RS256", "ES256"]   # allow-list; `none` and HS* are refused here
    oidc_scope_claim = "groups"     # claim holding group names (a list, or a space-separated string)
    oidc_group_scopes = { "finops" = ["read"], "team-ml" = ["read:team:ml"] }
    oidc_leeway_s = 30              # clock skew allowed on exp/nbf/iat
    oidc_jwks_cache_s = 300         # how long fetched keys are trusted before a refetch
    oidc_jwks_min_refresh_s = 30    # an unknown `kid` refetches the keys at most this often
    oidc_jwks_timeout_s = 5         # JWKS fetch timeout

``oidc_jwks_url`` must be ``https://`` (``http://`` only on a loopback address).
Environment: ``GPU_LEDGER_AUTH__<KEY>=value`` (values starting with ``[`` or ``{`` are JSON).
OIDC is on when ``oidc_issuer`` is set; it then needs ``oidc_audience`` and ``oidc_jwks_url``.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.auth.principal import ScopeError, check_scope

#: Asymmetric algorithms PyJWT verifies with a public key from a JWKS.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


def is_loopback(host: str) -> bool:
    """``host`` is 127.0.0.0/8, ::1 or ``localhost`` (any other name may resolve anywhere)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AuthSettings(BaseModel):
    """Who may call the service (see the module docstring for each key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    anonymous_read: bool = False
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_url: str | None = None
    oidc_algorithms: tuple[str, ...] = ("RS256", "ES256")
    oidc_scope_claim: str = Field(default="groups", min_length=1)
    oidc_group_scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    oidc_leeway_s: float = Field(default=30.0, ge=0, le=300)
    oidc_jwks_cache_s: float = Field(default=300.0, ge=0)
    oidc_jwks_min_refresh_s: float = Field(default=30.0, ge=0)
    oidc_jwks_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("oidc_algorithms")
    @classmethod
    def _algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # `none` and HMAC would let anyone holding the (public) JWKS forge a token.
        bad = [a for a in value if a not in ASYMMETRIC_ALGORITHMS]
        if bad:
            allowed = ", ".join(sorted(ASYMMETRIC_ALGORITHMS))
            raise ValueError(f"algorithm(s) {', '.join(bad)} not allowed; use asymmetric ones: {allowed}")
        if not value:
            raise ValueError("at least one algorithm is needed")
        return value

    @field_validator("oidc_group_scopes")
    @classmethod
    def _group_scopes(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for group, scopes in value.items():
            for scope in scopes:
                try:
                    check_scope(scope)
                except ScopeError as exc:
                    raise ValueError(f"group {group!r}: {exc}") from None
        return value

    @field_validator("oidc_jwks_url")
    @classmethod
    def _jwks_over_tls(cls, value: str | None) -> str | None:
        # Whoever can change the key set in transit can sign any JWT: TLS, except on loopback.
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback(parts.hostname or "")):
                raise ValueError("must be an https:// URL (http:// only on a loopback address)")
        return value

    @model_validator(mode="after")
    def _oidc_complete(self) -> AuthSettings:
        if self.oidc_issuer is not None:
            missing = [k for k in ("oidc_audience", "oidc_jwks_url") if not getattr(self, k)]
            if missing:
                raise ValueError(f"oidc_issuer is set: {' and '.join(missing)} must be set too")
        return self

    @property
    def oidc_enabled(self) -> bool:
        return self.oidc_issuer is not None

    def with_anonymous_read(self) -> AuthSettings:
        return self.model_copy(update={"anonymous_read": True})

    def describe(self) -> dict[str, Any]:
        """What is on, for the startup log line."""
        return {"anonymous_read": self.anonymous_read, "oidc_issuer": self.oidc_issuer}
