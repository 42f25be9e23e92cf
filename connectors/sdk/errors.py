"""Connector health and the errors a connector raises, grouped by what the runner does next."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class ConnectorStatus(StrEnum):
    """Connector health, as the `connectors` query reports it, and what the operator should do."""

    NEVER_RUN = "NEVER_RUN"  # configured, not run yet: wait for the scheduler or run `gpu-ledger ingest`
    RUNNING = "RUNNING"  # a window is being ingested now
    OK = "OK"  # last run succeeded; the watermark says how far data is in
    MISSING_DATA = (
        "MISSING_DATA"  # the source answered but had nothing for the window (new exports lag ~48 h)
    )
    INVALID_CONFIGURATION = (
        "INVALID_CONFIGURATION"  # fix the [[connectors]] entry; it will not run until then
    )
    FAILED_CONNECTION = "FAILED_CONNECTION"  # network/auth/5xx: check reachability and credentials; retried
    PARSE_ERROR = "PARSE_ERROR"  # the source sent data we could not read; see last_error and rejections
    # the run imported, but refused more rows or cost than the connector's thresholds allow
    # (``max_refused_rows_pct``, ``max_refused_cost_pct``), or a file with rows had none accepted:
    # last_error says which; the watermark moved (what landed is in) — look at the rejections
    # (``rejection`` table, run id in the ingest summary), fix the export or the parser, re-run
    DEGRADED = "DEGRADED"
    # a bug in GPU Ledger or the connector (an unexpected exception): not the source's fault and not
    # retried as a connection failure; report it with the traceback from the log (the next
    # regular run tries again)
    INTERNAL_ERROR = "INTERNAL_ERROR"
    DISABLED = "DISABLED"  # `enabled = false` in the config
    # the process running the last run died mid-run (killed, crashed); what it committed stays and
    # the watermark did not move: the next run reads the window again (nothing to do)
    ABORTED = "ABORTED"


class ConnectorError(Exception):
    """Base of the errors a connector raises; the subclass tells the runner what to do next."""

    status: ClassVar[ConnectorStatus] = ConnectorStatus.PARSE_ERROR


class ConfigurationError(ConnectorError):
    """Bad configuration: fail at start, never retry."""

    status = ConnectorStatus.INVALID_CONFIGURATION


class RetriableError(ConnectorError):
    """Throttling, 5xx, timeouts: back off and try again."""

    status = ConnectorStatus.FAILED_CONNECTION


class FatalSourceError(ConnectorError):
    """Authentication or another 4xx: stop this source until someone looks."""

    status = ConnectorStatus.FAILED_CONNECTION


def close_connector(connector: object) -> None:
    """Release what a connector holds (an HTTP client, a socket), for connectors that hold any.

    The Protocols don't require ``close()``: a connector that owns a client offers it, and the
    runner (CLI, scheduler) calls this when it is done with the instance.
    """
    close = getattr(connector, "close", None)
    if callable(close):
        close()
