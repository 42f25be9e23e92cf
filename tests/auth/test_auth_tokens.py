"""The API token store on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
import time

import pytest
from sqlalchemy import Engine, text

from service.auth.principal import Principal, ScopeError
from service.auth.tokens import Refused, TokenError, TokenStore
from service.db import make_engine

T0 = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def test_create_stores_only_the_hash(engine: Engine) -> None:
    store = TokenStore(engine, clock=Clock())
    secret, info = store.create("bi-tool", ["read:project:atlas", "read:team:ml", "read:project:atlas"])
    assert secret.startswith("gpl_") and len(secret) == 4 + 43
    assert info.scopes == ("read:project:atlas", "read:team:ml")
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT name, secret_sha256, scopes FROM api_token")).one()
    assert tuple(stored) == (
        "bi-tool",
        hashlib.sha256(secret.encode()).hexdigest(),
        "read:project:atlas read:team:ml",
    )
    assert secret not in "".join(map(str, stored))


def test_authenticate(engine: Engine) -> None:
    store = TokenStore(engine, clock=Clock())
    secret, _ = store.create("bi", ["read:project:atlas"])
    assert store.authenticate(secret) == Principal.of("bi", "token", {"read:project:atlas"})
    assert store.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert store.authenticate("gpl_") is None
    assert store.authenticate("eyJhbGciOi.x.y") is None  # not a store token: the caller tries OIDC


def test_revoked_and_expired_tokens_are_refused(engine: Engine) -> None:
    clock = Clock()
    store = TokenStore(engine, clock=clock)
    revoked, _ = store.create("old", ["read"])
    expiring, info = store.create("temp", ["metrics"], expires_days=2)
    assert info.expires_at == T0 + dt.timedelta(days=2)
    first = store.revoke("old").revoked_at
    clock.now += dt.timedelta(hours=1)
    assert store.revoke("old").revoked_at == first  # idempotent: the first revocation stands
    assert store.authenticate(revoked) == Refused("old", "token revoked")
    assert store.authenticate(expiring) == Principal.of("temp", "token", {"metrics"})
    clock.now = T0 + dt.timedelta(days=2)
    assert store.authenticate(expiring) == Refused("temp", "token expired")
    assert store.count_active() == 0


def test_last_used_is_written_at_most_once_a_minute(engine: Engine) -> None:
    clock = Clock()
    store = TokenStore(engine, clock=clock)
    secret, _ = store.create("bi", ["read"])
    assert store.list_all()[0].last_used_at is None
    store.authenticate(secret)
    clock.now += dt.timedelta(seconds=59)
    store.authenticate(secret)
    assert store.list_all()[0].last_used_at == T0
    clock.now += dt.timedelta(seconds=1)
    store.authenticate(secret)
    assert store.list_all()[0].last_used_at == T0 + dt.timedelta(seconds=60)


@pytest.mark.parametrize(
    ("name", "scopes", "days", "error", "message"),
    [
        ("x", ["write"], None, ScopeError, "unknown scope 'write'"),
        ("x", ["read:project:"], None, ScopeError, "unknown scope 'read:project:'"),
        ("x", [], None, TokenError, "a token needs at least one --scope"),
        ("two words", ["read"], None, TokenError, "token name 'two words'"),
        ("x", ["read"], 0, TokenError, "--expires-days 0: must be between 1 and 3650"),
    ],
)
def test_create_refuses(
    sqlite_url: str, name: str, scopes: list[str], days: int | None, error: type[Exception], message: str
) -> None:
    engine = make_engine(sqlite_url)
    with pytest.raises(error, match=message):
        TokenStore(engine).create(name, scopes, days)
    assert TokenStore(engine).list_all() == []
    engine.dispose()


def test_names_are_unique_even_after_revocation(engine: Engine) -> None:
    store = TokenStore(engine)
    store.create("bi", ["read"])
    store.revoke("bi")
    with pytest.raises(TokenError, match='a token named "bi" exists already'):
        store.create("bi", ["read"])
    with pytest.raises(TokenError, match='no token named "nope"'):
        store.revoke("nope")


def test_a_busy_sqlite_writer_neither_refuses_nor_stalls_a_caller(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    store = TokenStore(engine, clock=Clock())
    secret, _ = store.create("bi", ["read"])
    writer = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # an ingest holding the write lock
    try:
        started = time.perf_counter()
        assert store.authenticate(secret) == Principal.of("bi", "token", {"read"})
        waited_s = time.perf_counter() - started
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert waited_s < 2  # not the 30 s busy timeout
    assert store.list_all()[0].last_used_at is None  # noted on a later request instead
    store.authenticate(secret)
    assert store.list_all()[0].last_used_at == T0
    engine.dispose()
