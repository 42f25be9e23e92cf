"""API tokens: created by the CLI, shown once, stored only as the SHA-256 of the secret.

A secret is ``gpl_`` + 32 random bytes (URL-safe base64): the prefix lets secret scanners and
people recognise it, and tells the authenticator it is a store token, not a JWT. The secret has
256 bits of entropy, so a plain (unsalted) SHA-256 is enough to make the stored hash useless to a
reader of the database; lookup is by that hash, so no stored secret is ever compared byte by byte
with the one offered.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, overload

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from service.auth.principal import Principal, check_scope
from service.db import SQLITE_BUSY_TIMEOUT_MS
from service.dbtypes import table_of
from service.logging import get_logger
from service.models import ApiToken

log = get_logger(__name__)

PREFIX = "gpl_"
SECRET_BYTES = 32
#: ``last_used_at`` is written at most this often per token, so reads don't write on every request.
LAST_USED_EVERY = dt.timedelta(minutes=1)
LAST_USED_WAIT_MS = 200
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
MAX_EXPIRES_DAYS = 3650

Clock = Callable[[], dt.datetime]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class TokenError(ValueError):
    """A token cannot be created or revoked; the message says why."""


@dataclass(frozen=True)
class TokenInfo:
    """A stored token as ``tokens list`` shows it: everything but the secret."""

    name: str
    scopes: tuple[str, ...]
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None

    def active(self, now: dt.datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


@dataclass(frozen=True)
class Refused:
    """Why a well-formed secret was refused (the token's name is known, so the audit log names it)."""

    name: str
    reason: str


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_token(credential: str) -> bool:
    return credential.startswith(PREFIX)


@overload
def _aware(value: dt.datetime) -> dt.datetime: ...
@overload
def _aware(value: dt.datetime | None) -> dt.datetime | None: ...
def _aware(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands back naive datetimes for UTC-stored values.
    return value.replace(tzinfo=dt.UTC) if value is not None and value.tzinfo is None else value


def _info(row: Any) -> TokenInfo:
    return TokenInfo(
        name=row.name,
        scopes=tuple(row.scopes.split()),
        created_at=_aware(row.created_at),
        expires_at=_aware(row.expires_at),
        revoked_at=_aware(row.revoked_at),
        last_used_at=_aware(row.last_used_at),
    )


class TokenStore:
    """Create, list, revoke and check API tokens in the ``api_token`` table of ``engine``."""

    def __init__(self, engine: Engine, clock: Clock = _utc_now):
        self.engine, self.clock = engine, clock
        self._table = table_of(ApiToken)

    def create(
        self, name: str, scopes: Iterable[str], expires_days: int | None = None
    ) -> tuple[str, TokenInfo]:
        """A new token ``name``: returns ``(secret, info)``; the secret is not kept anywhere."""
        if not NAME_PATTERN.match(name):
            raise TokenError(
                f"token name {name!r}: use 1-100 letters, digits, '.', '_', '@' or '-', starting with a "
                "letter or digit"
            )
        scope_list = sorted({check_scope(s) for s in scopes})
        if not scope_list:
            raise TokenError("a token needs at least one --scope")
        if expires_days is not None and not 1 <= expires_days <= MAX_EXPIRES_DAYS:
            raise TokenError(f"--expires-days {expires_days}: must be between 1 and {MAX_EXPIRES_DAYS}")
        now = self.clock()
        secret = PREFIX + secrets.token_urlsafe(SECRET_BYTES)
        expires_at = now + dt.timedelta(days=expires_days) if expires_days else None
        row = {
            "name": name,
            "secret_sha256": hash_secret(secret),
            "scopes": " ".join(scope_list),
            "created_at": now,
            "expires_at": expires_at,
        }
        with self.engine.begin() as conn:
            if conn.execute(select(self._table.c.id).where(self._table.c.name == name)).first():
                raise TokenError(f'a token named "{name}" exists already (revoked names stay taken)')
            try:
                conn.execute(self._table.insert().values(**row))
            except IntegrityError:  # created concurrently under the same name
                raise TokenError(f'a token named "{name}" exists already') from None
        return secret, TokenInfo(name, tuple(scope_list), now, expires_at, None, None)

    def list_all(self) -> list[TokenInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(self._table).order_by(self._table.c.name)).all()
        return [_info(r) for r in rows]

    def revoke(self, name: str) -> TokenInfo:
        """Revoke ``name`` (idempotent: a revoked token keeps its first revocation time)."""
        now = self.clock()
        with self.engine.begin() as conn:
            t = self._table
            found = conn.execute(select(t.c.id, t.c.revoked_at).where(t.c.name == name)).first()
            if found is None:
                raise TokenError(f'no token named "{name}" (see gpu-ledger tokens list)')
            if found.revoked_at is None:
                conn.execute(update(t).where(t.c.id == found.id).values(revoked_at=now))
            row = conn.execute(select(t).where(t.c.id == found.id)).one()
        return _info(row)

    def count_active(self) -> int:
        now = self.clock()
        return sum(1 for t in self.list_all() if t.active(now))

    def authenticate(self, secret: str) -> Principal | Refused | None:
        """The caller holding ``secret``; :class:`Refused` for a revoked or expired token; ``None``
        for an unknown secret."""
        if not looks_like_token(secret):
            return None
        digest = hash_secret(secret)
        t = self._table
        with self.engine.connect() as conn:
            row = conn.execute(
                select(
                    t.c.id,
                    t.c.name,
                    t.c.secret_sha256,
                    t.c.scopes,
                    t.c.expires_at,
                    t.c.revoked_at,
                    t.c.last_used_at,
                ).where(t.c.secret_sha256 == digest)
            ).first()
        # The index lookup found it by hash; compare again in constant time anyway.
        if row is None or not hmac.compare_digest(row.secret_sha256, digest):
            return None
        now = self.clock()
        if row.revoked_at is not None:
            return Refused(row.name, "token revoked")
        expires_at = _aware(row.expires_at)
        if expires_at is not None and expires_at <= now:
            return Refused(row.name, "token expired")
        last_used = _aware(row.last_used_at)
        if last_used is None or now - last_used >= LAST_USED_EVERY:
            self._note_use(row.id, row.name, now)
        return Principal.of(row.name, "token", row.scopes.split())

    def _note_use(self, token_id: int, name: str, now: dt.datetime) -> None:
        """Best effort: an ingest holding SQLite's write lock for a minute must neither refuse nor
        stall a valid caller, so the update waits at most ``LAST_USED_WAIT_MS`` and is retried on
        the caller's next request."""
        t = self._table
        try:
            with self.engine.begin() as conn:
                sqlite = conn.dialect.name == "sqlite"
                if sqlite:
                    conn.exec_driver_sql(f"PRAGMA busy_timeout = {LAST_USED_WAIT_MS}")
                try:
                    conn.execute(update(t).where(t.c.id == token_id).values(last_used_at=now))
                finally:
                    if sqlite:
                        conn.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        except OperationalError as exc:
            log.warning("token last_used_at not updated", name=name, error=type(exc).__name__)
