"""Who may call a ``gpu-ledger serve`` before it starts listening.

* ``serve --demo`` on a loopback address (127.0.0.0/8, ::1, ``localhost``) turns on anonymous read
  (:data:`service.auth.authenticate.ANONYMOUS_READER`) and logs that it did: the two-command demo
  needs no token, and nobody else can reach the port.
* ``serve`` (demo or not) on any other address with no way to authenticate (no active token in the
  store, no OIDC issuer, no ``anonymous_read``) refuses to start: it would answer nobody, or, before
  this rule, everybody. ``--demo`` never turns on anonymous read off loopback.
* ``anonymous_read = true`` set by the operator is honoured anywhere, with a warning off loopback.
"""

from __future__ import annotations

from service.auth.config import AuthSettings, is_loopback
from service.logging import get_logger

log = get_logger(__name__)

HOW_TO_CONFIGURE = (
    "create a token (gpu-ledger tokens create --name NAME --scope read), configure OIDC "
    "([auth] oidc_issuer, oidc_audience, oidc_jwks_url), or allow anonymous reads "
    "([auth] anonymous_read = true)"
)


class ServeRefused(Exception):
    """``serve`` must not start; the message says how to configure authentication."""


def serve_auth(auth: AuthSettings, host: str, *, demo: bool, active_tokens: int) -> AuthSettings:
    """The ``[auth]`` settings ``serve`` runs with on ``host``; :class:`ServeRefused` when it must
    not start (see the module docstring)."""
    loopback = is_loopback(host)
    if demo and loopback and not auth.anonymous_read:
        auth = auth.with_anonymous_read()
        log.warning(
            "anonymous read enabled",
            reason="serve --demo on a loopback address",
            host=host,
            scopes="read metrics",
        )
    elif demo and not loopback:
        log.info("serve --demo on a non-loopback address: anonymous read stays off", host=host)
    if loopback:
        if not (auth.anonymous_read or auth.oidc_enabled or active_tokens):
            log.warning("no authentication configured: every call will get 401", hint=HOW_TO_CONFIGURE)
        return auth
    if not (auth.anonymous_read or auth.oidc_enabled or active_tokens):
        raise ServeRefused(
            f"refusing to serve on {host}, a non-loopback address, with no authentication configured: "
            + HOW_TO_CONFIGURE
        )
    if auth.anonymous_read:
        log.warning(
            "anonymous read is on for a non-loopback address: anyone reaching it reads every cost", host=host
        )
    return auth
