"""What a failed run was, decided once for every runner (ingestors, scheduler, CLI).

A run fails in one of four ways, and each has one status and one next step:

=====================  =====================  ===============================================
kind                   status                 next step (scheduler)
=====================  =====================  ===============================================
configuration          INVALID_CONFIGURATION  stop until the config is fixed
source unreachable     FAILED_CONNECTION      back off and retry (``FatalSourceError``:
                                              authentication, other 4xx — stop until someone looks)
bad data               PARSE_ERROR            no quick retry: the next regular run reads again
a bug                  INTERNAL_ERROR         no quick retry; logged with its traceback
=====================  =====================  ===============================================

A connector says which by the ``ConnectorError`` subclass it raises (``status`` class attribute).
Errors it lets through unwrapped are classified by type: network and database-connection errors
are a source unreachable, undecodable payloads are bad data, and anything else is a bug — never
a connection failure to be retried, which would hide it behind a back-off loop.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import urllib.error
from dataclasses import dataclass
from typing import Literal

import httpx
import pydantic
import sqlalchemy.exc

from connectors.sdk import BillingFileError, ConnectorError, ConnectorStatus, FatalSourceError

log = logging.getLogger(__name__)
_LOGGED = "_gpu_ledger_traceback_logged"

#: What the scheduler does after the failure: ``stop`` the connector until the operator acts,
#: ``retry`` with exponential back-off, or ``wait`` for its next regular interval.
NextStep = Literal["stop", "retry", "wait"]

# The source (or the database) could not be reached or answered too late. OSError as a whole is
# not here: FileNotFoundError or PermissionError from a local path is not a connection problem.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    ssl.SSLError,
    urllib.error.URLError,
    httpx.TransportError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.DisconnectionError,
    sqlalchemy.exc.TimeoutError,
)
# The source answered with something that cannot be read as what it claims to be.
_BAD_DATA: tuple[type[BaseException], ...] = (
    BillingFileError,
    pydantic.ValidationError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed run, classified: its ``status``, the scheduler's ``next_step``, whether it is a
    ``bug`` (logged with its traceback), and the one-line ``message`` every runner records."""

    status: ConnectorStatus
    next_step: NextStep
    bug: bool
    message: str


def classify(error: BaseException) -> Failure:
    """The one classification of a run's exception (the table in this module's docstring)."""
    message = one_line(error)
    if isinstance(error, ConnectorError):
        status = error.status
        if status == ConnectorStatus.INVALID_CONFIGURATION or isinstance(error, FatalSourceError):
            return Failure(status, "stop", False, message)
        if status == ConnectorStatus.FAILED_CONNECTION:
            return Failure(status, "retry", False, message)
        return Failure(status, "wait", status == ConnectorStatus.INTERNAL_ERROR, message)
    if isinstance(error, _UNREACHABLE):
        return Failure(ConnectorStatus.FAILED_CONNECTION, "retry", False, message)
    if isinstance(error, _BAD_DATA):
        return Failure(ConnectorStatus.PARSE_ERROR, "wait", False, message)
    if isinstance(error, ModuleNotFoundError) and (hint := missing_extra_hint(error.name or "")):
        # A cloud SDK imported when first used (the Azure connectors): an install to do, not a bug.
        return Failure(ConnectorStatus.INVALID_CONFIGURATION, "stop", False, f"{message}: {hint}")
    return Failure(ConnectorStatus.INTERNAL_ERROR, "wait", True, message)


def missing_extra_hint(module: str) -> str | None:
    """``pip install 'gpu-ledger[EXTRA]'`` when one of gpu-ledger's extras brings ``module``."""
    from importlib.metadata import PackageNotFoundError, distribution

    from connectors.registry import extras_providing

    try:
        requires = distribution("gpu-ledger").requires or []
    except PackageNotFoundError:  # a checkout that was never installed: nothing to name
        return None
    extras = extras_providing(module, requires) if module else []
    return " or ".join(f"pip install 'gpu-ledger[{extra}]'" for extra in extras) or None


def one_line(error: BaseException) -> str:
    """``Type: message`` on one line (a multi-line message, e.g. pydantic's, joined by ``; ``)."""
    text = "; ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def log_traceback_once(error: BaseException, where: str) -> None:
    """Log a bug's traceback (``where``: which run), once per exception: the run recorder logs
    it where it happened, and the runner that catches it next (scheduler, CLI) does not repeat it."""
    if error.__dict__.get(_LOGGED):
        return
    log.error("%s failed with a bug (INTERNAL_ERROR): %s", where, one_line(error), exc_info=error)
    error.__dict__[_LOGGED] = True  # marks this exception object, not its type
