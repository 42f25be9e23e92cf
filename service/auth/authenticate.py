"""From an ``Authorization`` header to a :class:`Principal`, or the reason there is none.

Credentials: ``Bearer gpl_…`` (an API token of :class:`TokenStore`) or ``Bearer <JWT>`` (checked by
:class:`OidcVerifier` when OIDC is configured). Without a header the caller is
:data:`ANONYMOUS_READER` when anonymous read is on, else refused. A header that is present but
wrong is always refused, anonymous read or not: a client with a bad token should hear about it.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from service.auth.config import AuthSettings
from service.auth.oidc import JwksUnavailable, JwtNoScopes, JwtRejected, OidcVerifier
from service.auth.principal import METRICS, READ, Principal
from service.auth.tokens import Refused, TokenStore, looks_like_token
from service.logging import get_logger

log = get_logger(__name__)

#: Anonymous callers under ``anonymous_read`` (and ``serve --demo`` on loopback): every analytic
#: answer and the service's own ``/metrics``; never push, never admin.
ANONYMOUS_READER = Principal.of("anonymous", "anonymous", {READ, METRICS})

#: Longest ``Authorization`` header looked at; a JWT with many groups stays well under it.
MAX_AUTHORIZATION_B = 8192

UNAUTHENTICATED, FORBIDDEN, AUTH_UNAVAILABLE = "UNAUTHENTICATED", "FORBIDDEN", "AUTH_UNAVAILABLE"


class AuthFailure(Exception):
    """No caller: HTTP ``status`` with ``code`` and a ``message`` safe to show the client.
    ``caller`` names the token or subject when the credential was recognised (for the audit log)."""

    def __init__(self, status: int, code: str, message: str, caller: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.caller = status, code, message, caller


def unauthenticated(message: str, caller: str | None = None) -> AuthFailure:
    return AuthFailure(401, UNAUTHENTICATED, message, caller)


class Authenticator:
    """Checks credentials against ``tokens`` and ``oidc`` (either may be absent)."""

    def __init__(
        self,
        tokens: TokenStore | None,
        oidc: OidcVerifier | None = None,
        *,
        anonymous: Principal | None = None,
    ):
        self.tokens, self.oidc, self.anonymous = tokens, oidc, anonymous

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller; :class:`AuthFailure` when there is none. May do I/O (database, JWKS):
        call it off the event loop unless ``authorization`` is empty."""
        if not authorization:
            if self.anonymous is not None:
                return self.anonymous
            raise unauthenticated("missing bearer token: send Authorization: Bearer <token>")
        if len(authorization) > MAX_AUTHORIZATION_B:
            raise unauthenticated(f"Authorization header longer than {MAX_AUTHORIZATION_B} bytes")
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() != "bearer":
            raise unauthenticated(f"unsupported authorization scheme {scheme[:20]!r}: use Bearer <token>")
        credential = credential.strip()
        if not credential:
            raise unauthenticated("empty bearer token")
        if looks_like_token(credential) and self.tokens is not None:
            return self._token(self.tokens, credential)
        if credential.count(".") == 2:
            if self.oidc is None:
                raise unauthenticated("JWT not accepted: no OIDC issuer is configured")
            return self._jwt(self.oidc, credential)
        raise unauthenticated("invalid bearer token")

    def _token(self, tokens: TokenStore, secret: str) -> Principal:
        try:
            found = tokens.authenticate(secret)
        except SQLAlchemyError as exc:
            log.error("token check failed", error=f"{type(exc).__name__}")
            message = "cannot check tokens now: database unavailable"
            raise AuthFailure(503, AUTH_UNAVAILABLE, message) from None
        if found is None:
            raise unauthenticated("unknown token")
        if isinstance(found, Refused):
            raise unauthenticated(found.reason, found.name)
        return found

    def _jwt(self, oidc: OidcVerifier, token: str) -> Principal:
        try:
            return oidc.verify(token)
        except JwtRejected as exc:
            raise unauthenticated(str(exc)) from None
        except JwtNoScopes as exc:
            raise AuthFailure(403, FORBIDDEN, str(exc), exc.subject) from None
        except JwksUnavailable as exc:
            raise AuthFailure(503, AUTH_UNAVAILABLE, f"cannot check JWTs now: {exc}") from None


def build_authenticator(settings: AuthSettings, engine: Engine) -> Authenticator:
    """The service's authenticator: the token table of ``engine``, OIDC when configured, and
    :data:`ANONYMOUS_READER` for callers without a header when ``anonymous_read`` is on."""
    return Authenticator(
        TokenStore(engine),
        OidcVerifier(settings) if settings.oidc_enabled else None,
        anonymous=ANONYMOUS_READER if settings.anonymous_read else None,
    )
