from __future__ import annotations

import io
import json
import logging
import sys

import pytest
from pydantic import SecretStr

from service.logging import configure_logging, get_logger, redact


def test_redact() -> None:
    assert redact(SecretStr("x")) == "**********"
    assert redact("hunter2", "password") == "**********"
    assert redact({"token": "abc", "n": 1}) == {"token": "**********", "n": 1}
    assert redact("postgresql://u:pw@h/db", "database_url") == "postgresql://u:***@h/db"
    assert redact("connect to postgresql://u:pw@h/db failed") == "connect to postgresql://u:***@h/db failed"


def test_json_logs_mask_secrets() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    try:
        get_logger("t").info("hello", token=SecretStr("s3cret"), database_url="postgresql://u:pw@h/d", n=3)
        logging.getLogger("stdlib").warning("plain %s", "record")
    finally:
        configure_logging("WARNING", "console")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "hello" and lines[0]["n"] == 3 and lines[0]["level"] == "info"
    assert "s3cret" not in stream.getvalue() and ":pw@" not in stream.getvalue()
    assert lines[1]["event"] == "plain record" and lines[1]["logger"] == "stdlib"


def test_console_format() -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", "console", stream=stream)
    try:
        get_logger("t").debug("visible", password="pw")
    finally:
        configure_logging("WARNING", "console")
    assert "visible" in stream.getvalue() and "pw" not in stream.getvalue().replace("password", "")


def test_logs_follow_stderr_when_it_is_swapped_and_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure_logging ran while stderr was a harness's buffer (CliRunner) that is closed since:
    later records go to the stderr of their time, with no "I/O operation on closed file"."""
    errors: list[str] = []
    monkeypatch.setattr(logging, "raiseExceptions", True)
    monkeypatch.setattr(logging.Handler, "handleError", lambda _self, _record: errors.append("error"))
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("INFO", "console")
    try:
        first.close()
        second = io.StringIO()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("alembic.runtime.migration").info("Running upgrade 0018 -> 0019")
    finally:
        configure_logging("WARNING", "console")
    assert errors == [] and "Running upgrade 0018 -> 0019" in second.getvalue()
