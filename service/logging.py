"""Structured logging: structlog for our code, stdlib records (uvicorn, alembic, plugins) routed
through the same renderer. Console for people, JSON (one object per line) for log shippers.

Secrets never reach the output: ``SecretStr`` values render masked, and any field whose name says
it holds a secret (password, token, secret, key, credential) or a database URL is masked.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog
from pydantic import SecretBytes, SecretStr

from service.urls import mask_url

MASK = "**********"
_SECRET_NAME = re.compile(r"(password|passwd|secret|token|api_?key|access_?key|credential)", re.IGNORECASE)
_URL_WITH_PASSWORD = re.compile(r"(\w[\w+.-]*://[^:/@\s]+:)([^@\s]+)(@)")


def redact(value: Any, key: str = "") -> Any:
    """``value`` with secrets masked (recurses into dicts, lists and tuples)."""
    if isinstance(value, SecretStr | SecretBytes):
        return MASK
    if key and _SECRET_NAME.search(key):
        return MASK if value not in (None, "") else value
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        if key.endswith("url"):
            return mask_url(value) if "://" in value else value
        return _URL_WITH_PASSWORD.sub(r"\1***\3", value)
    return value


def _redact_processor(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    return {k: redact(v, k) for k, v in event_dict.items()}


def configure_logging(
    level: str = "INFO", fmt: Literal["console", "json"] = "console", stream: TextIO | None = None
) -> None:
    """Set up structlog and the stdlib root logger once per process (idempotent)."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.PositionalArgumentsFormatter(),
        _redact_processor,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if fmt == "json" else _identity,
            renderer,
        ],
    )
    handler = _LedgerHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _LedgerHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Alembic ≥ 1.16 logs every plugin it sets up at INFO on each migrate: noise, not news.
    logging.getLogger("alembic.runtime.plugins").setLevel(max(logging.WARNING, root.level))
    # …and which dialect and DDL mode it assumes each time a migration context opens: every
    # revision check (each CLI command, each /readyz). "Running upgrade …" lines stay.
    migration_log = logging.getLogger("alembic.runtime.migration")
    if not any(isinstance(f, _AlembicContextChatter) for f in migration_log.filters):
        migration_log.addFilter(_AlembicContextChatter())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


class _AlembicContextChatter(logging.Filter):
    """Drops alembic's "Context impl SQLiteImpl." and "Will assume transactional DDL." records."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Context impl ", "Will assume "))


class _LedgerHandler(logging.StreamHandler):
    """The root handler configure_logging installs: found and replaced when it runs again.

    Without a stream of its own it writes to whatever ``sys.stderr`` is when a record comes, as
    ``logging.lastResort`` does: a CLI run under a harness that swaps and closes stderr (click's
    ``CliRunner``, pytest's capture) must not leave the process logging into a closed file."""

    def __init__(self, stream: TextIO | None = None) -> None:
        logging.Handler.__init__(self)
        self._own_stream = stream

    @property
    def stream(self) -> TextIO:
        return self._own_stream if self._own_stream is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # setStream
        self._own_stream = value


def _identity(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    return event_dict


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
