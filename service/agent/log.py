"""The agent's logging: ``log.info("event", key=value)`` without structlog in the agent process.

structlog imports asyncio and (for its console renderer) rich and pygments: ~7 MB of the agent's
resident memory, which has a 60 MB budget (issue 13) and logs a handful of lines a day. So the
agent's own process writes through the standard library with :func:`configure_console`, in the
layout of structlog's console renderer (``<time> [<level>] <event> [<logger>] key=value …``),
secrets masked as ``service.logging`` masks them.

A process that already uses structlog (the service: the push tests ship batches in process, and
``structlog.testing.capture_logs`` reads the agent's events there) gets the agent's events through
structlog, unchanged: the choice is made per call, by whether structlog is loaded.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
from typing import Any, TextIO

MASK = "**********"
# The same names service.logging masks (it cannot be imported here: it imports structlog).
_SECRET_NAME = re.compile(r"(password|passwd|secret|token|api_?key|access_?key|credential)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(\w[\w+.-]*://[^:/@\s]+:)([^@\s]+)(@)")


def _masked(key: str, value: Any) -> Any:
    if type(value).__name__ in ("Secret", "SecretStr", "SecretBytes") or (
        _SECRET_NAME.search(key) and value not in (None, "")
    ):
        return MASK
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\1***\3", value)
    return value


def render_fields(fields: dict[str, Any]) -> str:
    """``key=value …`` (values repr'd when they hold spaces, as structlog's console does)."""
    parts = []
    for key, value in fields.items():
        value = _masked(key, value)
        text = str(value)
        parts.append(f"{key}={text if text and ' ' not in text and '=' not in text else repr(value)}")
    return " ".join(parts)


class AgentLogger:
    """A logger with structlog's call shape: ``log.warning("event", key=value, exc_info=True)``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _log(self, level: int, event: str, exc_info: Any = None, **fields: Any) -> None:
        structlog = sys.modules.get("structlog")
        if structlog is not None:  # a process that runs structlog: its processors, its tests
            method = logging.getLevelName(level).lower()
            extra = {} if exc_info is None else {"exc_info": exc_info}
            getattr(structlog.get_logger(self.name), method)(event, **extra, **fields)
            return
        logger = logging.getLogger(self.name)
        if logger.isEnabledFor(level):
            logger.log(level, "%s", event, exc_info=exc_info, extra={"agent_fields": render_fields(fields)})

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, **fields)


def get_logger(name: str) -> AgentLogger:
    return AgentLogger(name)


class _ConsoleFormatter(logging.Formatter):
    """``2026-12-01T22:00:00.123456Z [info     ] event   [logger] key=value`` (structlog's layout)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        fields = getattr(record, "agent_fields", "")
        line = f"{ts} [{record.levelname.lower():<9}] {record.getMessage():<30} [{record.name}]"
        line += f" {fields}" if fields else ""
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _AgentHandler(logging.StreamHandler):
    """The root handler configure_console installs: found and replaced when it runs again."""


def configure_console(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Every record of the agent process (its own and the connectors') to ``stream``, one line each."""
    handler = _AgentHandler(stream or sys.stderr)
    handler.setFormatter(_ConsoleFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _AgentHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
