"""Bearer JWTs from an OIDC issuer, checked against its JWKS.

A JWT is accepted when: its header ``alg`` is in ``oidc_algorithms`` (asymmetric only: never
``none``, never HS*, so the public JWKS can't be used as an HMAC secret); its ``kid`` names a key of
the issuer's JWKS of a matching key type; the signature holds; ``iss`` and ``aud`` are the configured
ones; ``exp`` is in the future (``oidc_leeway_s`` of skew allowed; ``exp``, ``iss``, ``aud`` and
``sub`` are required). Its ``oidc_scope_claim`` (a list of names, or a space-separated string)
is mapped to scopes through ``oidc_group_scopes``; a JWT whose claim maps to no scope is
authenticated but may do nothing (HTTP 403 ``FORBIDDEN``).

Keys are fetched with a timeout and cached for ``oidc_jwks_cache_s``. A ``kid`` not in the cache
refetches the set (key rotation), at most once per ``oidc_jwks_min_refresh_s`` so random ``kid``
values can't turn every request into a fetch. A failed refetch keeps serving the keys it has.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from jwt.exceptions import InvalidKeyError, PyJWKError

from service.auth.config import AuthSettings
from service.auth.principal import Principal
from service.logging import get_logger

log = get_logger(__name__)

#: JWK key type each algorithm family needs.
_KTY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


class JwtRejected(Exception):
    """The JWT is not acceptable (HTTP 401); the message is safe to show the caller."""


class JwtNoScopes(Exception):
    """The JWT is valid but its claim maps to no scope (HTTP 403); ``subject`` names the caller."""

    def __init__(self, subject: str, message: str):
        super().__init__(message)
        self.subject = subject


class JwksUnavailable(Exception):
    """The issuer's keys could not be fetched and none are cached (HTTP 503)."""


@dataclass(frozen=True)
class SigningKey:
    """One usable key of the set: its key type and the algorithm it declares (``alg``), if any."""

    jwk: jwt.PyJWK
    kty: str
    alg: str | None

    def fits(self, alg: str) -> bool:
        return self.kty == _KTY.get(alg[:2]) and self.alg in (None, alg)


class JwksCache:
    """The signing keys of one JWKS URL, by ``kid``."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        cache_s: float = 300.0,
        min_refresh_s: float = 30.0,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url, self.timeout_s, self.cache_s, self.min_refresh_s = url, timeout_s, cache_s, min_refresh_s
        self.client = client or httpx.Client(timeout=timeout_s, follow_redirects=False)
        self.clock = clock
        self._keys: dict[str | None, SigningKey] = {}
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = threading.Lock()
        self.fetches = 0

    def _fetch(self) -> None:
        self._tried_at = self.clock()
        self.fetches += 1
        try:
            response = self.client.get(self.url, timeout=self.timeout_s)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("jwks fetch failed", url=self.url, error=f"{type(exc).__name__}: {exc}")
            if not self._keys:
                raise JwksUnavailable(f"cannot fetch the issuer's keys from {self.url}") from None
            return  # keep serving the keys we have
        keys: dict[str | None, SigningKey] = {}
        for item in data.get("keys", []) if isinstance(data, Mapping) else []:
            if not isinstance(item, Mapping) or item.get("use", "sig") != "sig":
                continue
            try:
                jwk = jwt.PyJWK(dict(item))
                alg = item.get("alg")
                declared = alg if isinstance(alg, str) else None
                keys[item.get("kid")] = SigningKey(jwk, str(item["kty"]), declared)
            except (PyJWKError, InvalidKeyError, ValueError, TypeError):
                continue  # a key type we can't use: skip it, like other clients do
        self._keys, self._fetched_at = keys, self._tried_at

    def key(self, kid: str | None) -> SigningKey:
        with self._lock:
            now = self.clock()
            stale = self._fetched_at is None or now - self._fetched_at >= self.cache_s
            may_fetch = self._tried_at is None or now - self._tried_at >= self.min_refresh_s
            if stale and may_fetch:
                self._fetch()
            found = self._pick(kid)
            if found is None and may_fetch and not stale:
                self._fetch()  # the issuer may have rotated its keys
                found = self._pick(kid)
            if found is None:
                if self._fetched_at is None:
                    raise JwksUnavailable(f"cannot fetch the issuer's keys from {self.url}")
                raise JwtRejected("JWT signed by an unknown key (kid)" if kid else "JWT without a key id")
            return found

    def _pick(self, kid: str | None) -> SigningKey | None:
        if kid is not None:
            return self._keys.get(kid)
        # No kid: acceptable only when the issuer has exactly one key.
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None


def _scopes_of(claim: Any, group_scopes: Mapping[str, tuple[str, ...]]) -> set[str]:
    groups = claim.split() if isinstance(claim, str) else claim if isinstance(claim, list) else []
    return {s for g in groups if isinstance(g, str) for s in group_scopes.get(g, ())}


class OidcVerifier:
    """Checks bearer JWTs as the module docstring says; ``verify`` gives the caller."""

    def __init__(self, settings: AuthSettings, jwks: JwksCache | None = None):
        if not settings.oidc_enabled:
            raise ValueError("OIDC is not configured (oidc_issuer)")
        self.settings = settings
        self.jwks = jwks or JwksCache(
            str(settings.oidc_jwks_url),
            timeout_s=settings.oidc_jwks_timeout_s,
            cache_s=settings.oidc_jwks_cache_s,
            min_refresh_s=settings.oidc_jwks_min_refresh_s,
        )

    def verify(self, token: str) -> Principal:
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise JwtRejected("malformed JWT") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in s.oidc_algorithms:
            allowed = ", ".join(s.oidc_algorithms)
            raise JwtRejected(f"JWT algorithm {str(alg)[:20]!r} not allowed (allowed: {allowed})")
        kid = header.get("kid")
        key = self.jwks.key(kid if isinstance(kid, str) else None)
        if not key.fits(alg):
            raise JwtRejected(f"JWT algorithm {alg} does not match its key")
        try:
            claims = jwt.decode(
                token,
                key.jwk.key,
                algorithms=[alg],
                audience=s.oidc_audience,
                issuer=s.oidc_issuer,
                leeway=s.oidc_leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise JwtRejected("JWT expired") from None
        except jwt.InvalidAudienceError:
            raise JwtRejected("JWT audience not accepted") from None
        except jwt.InvalidIssuerError:
            raise JwtRejected("JWT issuer not accepted") from None
        except jwt.InvalidSignatureError:
            raise JwtRejected("JWT signature invalid") from None
        except jwt.MissingRequiredClaimError as exc:
            raise JwtRejected(f"JWT lacks the {exc.claim!r} claim") from None
        except jwt.ImmatureSignatureError:
            raise JwtRejected("JWT not valid yet") from None
        except jwt.InvalidTokenError:
            raise JwtRejected("invalid JWT") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise JwtRejected("JWT subject (sub) must be a non-empty string")
        scopes = _scopes_of(claims.get(s.oidc_scope_claim), s.oidc_group_scopes)
        if not scopes:
            raise JwtNoScopes(subject, f"JWT claim {s.oidc_scope_claim!r} maps to no scope of this service")
        return Principal.of(subject, "jwt", scopes)
