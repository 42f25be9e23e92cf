"""The vocabulary of ledger queries: dimensions, periods, idle policies, metrics and filters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from connectors.sdk.shapes import DIMENSIONS, dimension
from service.analytics.errors import InvalidArgument
from service.metrics_catalog import UTIL_METRICS


class Dimension(Enum):
    """A ledger column answers may be grouped and filtered by (value = the column name).

    The columns come from ``connectors.sdk.shapes.DIMENSIONS``; the members are written out so
    code and type checkers can name them (tests/test_shapes_agree.py checks the two lists agree).
    """

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[Any]) -> str:
        return dimension(name).column

    ENVIRONMENT = auto()
    PROVIDER = auto()
    ACCOUNT = auto()
    REGION = auto()
    CLUSTER = auto()
    NODE = auto()
    DEVICE = auto()
    GPU_MODEL = auto()
    VENDOR = auto()
    INSTANCE_TYPE = auto()
    PROJECT = auto()
    TEAM = auto()
    USER = auto()
    NAMESPACE = auto()
    WORKLOAD = auto()
    OWNER_RULE = auto()

    @property
    def column(self) -> str:
        return self.value

    @property
    def is_workload(self) -> bool:
        """Workload dimensions describe who held the device; they are null on unallocated rows."""
        return self in WORKLOAD_DIMENSIONS


WORKLOAD_DIMENSIONS = frozenset(Dimension[d.name] for d in DIMENSIONS if d.workload)


class Granularity(Enum):
    """Period buckets: UTC hours, days, ISO weeks (Monday), calendar months, or one total."""

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TOTAL = "total"


class IdlePolicy(Enum):
    """What happens to the cost of unallocated device time (docs/design.md §4 Attribution)."""

    SEPARATE = "separate"
    SHARE_BY_USAGE = "share_by_usage"
    SHARE_EVENLY = "share_evenly"


UTIL_METRIC_KEYS: tuple[str, ...] = tuple(m.value for m in UTIL_METRICS)
MIXED_DEFAULT_METRIC = "sm_active_else_gpu_util"


def metric_label(metric: str | None, min_default: str | None, max_default: str | None) -> str:
    """Which metric an answer used: the explicit one, the one default of its rows, or the mix."""
    if metric is not None:
        return metric
    if min_default is not None and min_default == max_default:
        return min_default
    return MIXED_DEFAULT_METRIC


@dataclass(frozen=True)
class LedgerFilter:
    """Rows whose dimension values are among the given ones (no entry or [] = no constraint).

    ``unallocated``: True keeps only time nobody held (workload_key ''), False only allocated time.
    """

    values: Mapping[Dimension, Sequence[str]] = field(default_factory=dict)
    unallocated: bool | None = None

    def __post_init__(self) -> None:
        # PostgreSQL text cannot hold NUL: a value with one would fail inside the driver (a 500),
        # and no ledger value can contain it, so it is the caller's error, named here for every path.
        for dim, values in self.values.items():
            if any("\x00" in value for value in values):
                raise InvalidArgument(f"filter {dim.name.lower()}: values may not contain NUL characters")


NO_FILTER = LedgerFilter()
