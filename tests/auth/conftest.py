"""Fixtures of the auth tests: keys made here, a real JWKS endpoint, and the audit log as JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from oidc_fake import Issuer, Key, ec_key, rsa_key, serve_issuer

from service.logging import configure_logging


@pytest.fixture(scope="session")
def rsa_a() -> Key:
    return rsa_key("rsa-a")


@pytest.fixture(scope="session")
def rsa_b() -> Key:
    return rsa_key("rsa-b")


@pytest.fixture(scope="session")
def ec_a() -> Key:
    return ec_key("ec-a")


@pytest.fixture
def issuer(rsa_a: Key, ec_a: Key) -> Iterator[Issuer]:
    """An issuer publishing ``rsa-a`` and ``ec-a`` at a real ``http://127.0.0.1:PORT/jwks``."""
    with serve_issuer(rsa_a, ec_a) as running:
        yield running


@pytest.fixture
def audit_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The log as JSON objects (rendered, so masking applies): ``audit_lines()`` → the ``audit``
    events so far. The raw text is at ``audit_lines.text()``."""
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)

    def audits() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
        return [e for e in lines if e.get("event") == "audit"]

    audits.text = stream.getvalue  # type: ignore[attr-defined]
    try:
        yield audits
    finally:
        configure_logging()
