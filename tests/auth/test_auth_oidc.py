"""OIDC JWTs checked against a real JWKS endpoint on 127.0.0.1 with keys made in the test."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from oidc_fake import ISSUER, Issuer, Key, oidc_settings, rsa_key
from pydantic import ValidationError

from service.auth.config import AuthSettings
from service.auth.oidc import JwksUnavailable, JwtNoScopes, JwtRejected, OidcVerifier


def verifier(issuer: Issuer, **overrides: object) -> OidcVerifier:
    return OidcVerifier(oidc_settings(issuer, **overrides))


def test_rs256_and_es256_tokens_map_groups_to_scopes(issuer: Issuer, rsa_a: Key, ec_a: Key) -> None:
    v = verifier(issuer)
    p = v.verify(issuer.token(rsa_a, groups=("finops", "team-ml", "unmapped")))
    assert (p.name, p.kind, p.scopes) == ("alice@example.com", "jwt", frozenset({"read", "read:team:ml"}))
    p = v.verify(issuer.token(ec_a, groups=("team-ml",)))
    assert p.scopes == frozenset({"read:team:ml"}) and p.access.teams == frozenset({"ml"})
    assert issuer.fetches == 1  # the keys are cached


def test_scope_claim_may_be_a_space_separated_string(issuer: Issuer, rsa_a: Key) -> None:
    v = verifier(issuer, oidc_scope_claim="roles")
    assert v.verify(issuer.token(rsa_a, roles="ops finops")).scopes == frozenset({"metrics", "read"})


def test_no_mapped_group_is_authenticated_but_has_no_scope(issuer: Issuer, rsa_a: Key) -> None:
    with pytest.raises(JwtNoScopes, match="JWT claim 'groups' maps to no scope") as caught:
        verifier(issuer).verify(issuer.token(rsa_a, groups=("interns",)))
    assert caught.value.subject == "alice@example.com"


def test_key_rotation_refetches_on_an_unknown_kid(issuer: Issuer, rsa_a: Key, rsa_b: Key) -> None:
    v = verifier(issuer)
    assert v.verify(issuer.token(rsa_a)).name == "alice@example.com"
    issuer.published = [rsa_b]  # the issuer rotates: rsa-a is gone, rsa-b is new
    assert v.verify(issuer.token(rsa_b)).name == "alice@example.com"
    assert issuer.fetches == 2
    with pytest.raises(JwtRejected, match=r"^JWT signed by an unknown key \(kid\)$"):
        v.verify(issuer.token(rsa_a))  # the retired key no longer signs for anyone


def test_unknown_kids_refetch_at_most_once_per_min_refresh(issuer: Issuer, rsa_a: Key) -> None:
    v = verifier(issuer, oidc_jwks_min_refresh_s=60)
    stranger = rsa_key("stranger")
    v.verify(issuer.token(rsa_a))
    for _ in range(5):
        with pytest.raises(JwtRejected, match="unknown key"):
            v.verify(issuer.token(stranger))
    assert issuer.fetches == 1  # random kids can't turn requests into fetches


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"iss": "https://evil.example"}, "JWT issuer not accepted"),
        ({"aud": "someone-else"}, "JWT audience not accepted"),
        ({"minutes": -5}, "JWT expired"),
        ({"sub": None}, "JWT lacks the 'sub' claim"),
    ],
)
def test_claims_are_checked(issuer: Issuer, rsa_a: Key, claims: dict[str, object], message: str) -> None:
    claims = dict(claims)
    minutes = float(claims.pop("minutes", 10))  # type: ignore[arg-type]
    token = issuer.token(rsa_a, minutes=minutes, **claims)
    if claims.get("sub", "") is None:
        token = issuer.token(rsa_a, minutes=minutes)
        payload = jwt.decode(token, options={"verify_signature": False})
        del payload["sub"]
        token = jwt.encode(payload, rsa_a.private, algorithm="RS256", headers={"kid": rsa_a.kid})
    with pytest.raises(JwtRejected, match=f"^{message}$"):
        verifier(issuer).verify(token)


def test_expiry_has_a_small_leeway(issuer: Issuer, rsa_a: Key) -> None:
    token = issuer.token(rsa_a, minutes=-0.25)  # expired 15 s ago
    assert verifier(issuer, oidc_leeway_s=30).verify(token).name == "alice@example.com"
    with pytest.raises(JwtRejected, match="^JWT expired$"):
        verifier(issuer, oidc_leeway_s=0).verify(token)


def _b64(data: dict[str, object] | bytes) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_alg_none_is_refused(issuer: Issuer, rsa_a: Key) -> None:
    payload = jwt.decode(issuer.token(rsa_a), options={"verify_signature": False})
    token = f"{_b64({'alg': 'none', 'kid': rsa_a.kid})}.{_b64(payload)}."
    with pytest.raises(JwtRejected, match=r"^JWT algorithm 'none' not allowed \(allowed: RS256, ES256\)$"):
        verifier(issuer).verify(token)


def test_hs256_signed_with_the_public_key_is_refused(issuer: Issuer, rsa_a: Key) -> None:
    # The classic confusion: HMAC "signed" with the issuer's public key, which anyone can fetch.
    public_pem = rsa_a.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    payload = jwt.decode(issuer.token(rsa_a), options={"verify_signature": False})
    header = _b64({"alg": "HS256", "typ": "JWT", "kid": rsa_a.kid})
    signing_input = f"{header}.{_b64(payload)}".encode()
    signature = _b64(hmac.new(public_pem, signing_input, hashlib.sha256).digest())
    with pytest.raises(JwtRejected, match="^JWT algorithm 'HS256' not allowed"):
        verifier(issuer).verify(f"{header}.{_b64(payload)}.{signature}")


def test_an_allowed_alg_with_the_wrong_key_type_is_refused(issuer: Issuer, rsa_a: Key, ec_a: Key) -> None:
    token = issuer.token(ec_a, headers={"kid": rsa_a.kid})  # ES256 claiming the RSA key
    with pytest.raises(JwtRejected, match="^JWT algorithm ES256 does not match its key$"):
        verifier(issuer).verify(token)


def test_tampered_payload_fails_the_signature(issuer: Issuer, rsa_a: Key) -> None:
    header, _payload, signature = issuer.token(rsa_a, groups=("team-ml",)).split(".")
    forged = jwt.decode(issuer.token(rsa_a), options={"verify_signature": False}) | {"groups": ["finops"]}
    with pytest.raises(JwtRejected, match="^JWT signature invalid$"):
        verifier(issuer).verify(f"{header}.{_b64(forged)}.{signature}")


def test_malformed_token(issuer: Issuer) -> None:
    with pytest.raises(JwtRejected, match="^malformed JWT$"):
        verifier(issuer).verify("not.a.jwt")


def test_unreachable_jwks_is_unavailable_not_rejected(issuer: Issuer, rsa_a: Key) -> None:
    issuer.failing = True
    with pytest.raises(JwksUnavailable, match="cannot fetch the issuer's keys"):
        verifier(issuer).verify(issuer.token(rsa_a))


def test_keys_already_fetched_survive_an_issuer_outage(issuer: Issuer, rsa_a: Key) -> None:
    v = verifier(issuer, oidc_jwks_cache_s=0)  # every call refetches
    v.verify(issuer.token(rsa_a))
    issuer.failing = True
    assert v.verify(issuer.token(rsa_a)).name == "alice@example.com"
    assert issuer.fetches == 2


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"oidc_algorithms": ["none"]}, "algorithm(s) none not allowed"),
        ({"oidc_algorithms": ["RS256", "HS256"]}, "algorithm(s) HS256 not allowed"),
        ({"oidc_issuer": ISSUER}, "oidc_audience and oidc_jwks_url must be set too"),
        ({"oidc_group_scopes": {"g": ["write"]}}, "group 'g': unknown scope 'write'"),
        ({"oidc_jwks_url": "http://idp.example.com/jwks"}, "https:// URL (http:// only on a loopback"),
        ({"oidc_jwks_url": "file:///etc/jwks.json"}, "must be an https:// URL"),
    ],
)
def test_settings_refuse_unsafe_or_incomplete_oidc(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AuthSettings(**values)  # type: ignore[arg-type]
