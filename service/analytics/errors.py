"""Errors a caller of the analytics queries can fix, each with a stable machine-readable code.

The API layer turns these into GraphQL errors whose ``extensions.code`` is :attr:`QueryError.code`;
any other exception is a bug and is masked as ``INTERNAL``.
"""

from __future__ import annotations


class QueryError(Exception):
    """A query the caller must change; ``code`` is part of the public API (UPPER_SNAKE_CASE)."""

    code = "BAD_REQUEST"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidWindow(QueryError):
    code = "INVALID_WINDOW"


class WindowTooLarge(QueryError):
    code = "WINDOW_TOO_LARGE"


class WindowNotAligned(QueryError):
    code = "WINDOW_NOT_ALIGNED"


class MissingFxRate(QueryError):
    code = "MISSING_FX_RATE"


class UnknownCurrency(QueryError):
    code = "UNKNOWN_CURRENCY"


class UnsupportedThreshold(QueryError):
    code = "UNSUPPORTED_THRESHOLD"


class PageSizeTooLarge(QueryError):
    code = "PAGE_SIZE_TOO_LARGE"


class InvalidArgument(QueryError):
    code = "INVALID_ARGUMENT"


class HoursPruned(QueryError):
    """The answer needs device-level hours that ``gpu-ledger prune`` dropped (docs/rollups.md)."""

    code = "HOURS_PRUNED"
