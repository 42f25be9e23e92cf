"""An export's arguments, from text: the names and meanings of the GraphQL arguments.

Both front ends hand over ``{name: [values as given]}`` (a query string's parameters; the CLI's
options mapped to the same names), so both refuse the same things with the same messages. Every
refusal is a :class:`ParameterError` naming its parameter. The names (GraphQL's):

* ``start``, ``end`` (required): ISO 8601 with an offset, whole UTC hours, at most
  ``max_window_days`` apart (the window checks of the API: ``check_window``).
* ``granularity``: HOUR, DAY, WEEK, MONTH, TOTAL (default TOTAL; not for ``effective-cost``).
* ``groupBy``: Dimension names, comma-separated and/or repeated; absent = the field's default,
  present but empty = no grouping.
* one parameter per ``LedgerFilter`` field (``environment``, ``gpuModel``, ``instanceType``, …),
  **repeated** for several values (``project=a&project=b``): a value is taken whole, commas
  included; ``unallocated`` is ``true`` or ``false``.
* the question's own: ``metric`` (GPU_UTIL, SM_ACTIVE, TENSOR_ACTIVE, MEM_BW), ``idlePolicy``
  (SEPARATE, SHARE_BY_USAGE, SHARE_EVENLY), ``currency`` (ISO 4217), ``thresholdPct`` (a number),
  ``allocationPct`` and ``utilizationPct`` (break-even's what-if, numbers).
* ``fields``: the columns to write, comma-separated, in that order (default: all). Asking for
  fewer can make an answer cheaper (``idle-waste`` computes its streaks only for
  ``longest_idle_streak_hours``).

Enum values are matched case-insensitively. Anything else (an unknown name, a repeated single
value, a NUL character) is refused.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, TypeVar, overload

from service.analytics.access import Access
from service.analytics.dims import UTIL_METRIC_KEYS, Dimension, Granularity, IdlePolicy, LedgerFilter
from service.analytics.errors import InvalidWindow, QueryError, WindowNotAligned
from service.analytics.query import LedgerQuery
from service.analytics.window import Window, check_window
from service.export.formats import ARROW_COMPRESSIONS, Format, IpcCompression
from service.metrics_catalog import DEFAULT_IDLE_THRESHOLD_PCT
from service.timeutil import is_hour_aligned

if TYPE_CHECKING:
    from service.export.questions import Question

#: What the front ends hand over: each parameter's values, as given.
Params = Mapping[str, Sequence[str]]
E = TypeVar("E", bound=Enum)

#: Filter values of one request, all parameters together: a bound on the SQL a request can build
#: (each value is a bound parameter, in every part of the ledger source).
MAX_FILTER_VALUES = 1000
#: Longest parameter value accepted (a device id or project name is far shorter).
MAX_VALUE_CHARS = 1000


class ParameterError(QueryError):
    """An argument the caller must change. ``parameter`` names it (None: the request as a whole)."""

    code = "INVALID_ARGUMENT"

    def __init__(self, parameter: str | None, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.parameter = parameter


#: The parameter of an Arrow stream's buffer compression (one of ``formats.ARROW_COMPRESSIONS``):
#: the format's own, not the question's (``compression=lz4`` on the endpoint, ``--compression`` in
#: the CLI).
COMPRESSION = "compression"


def arrow_compression(values: Sequence[str], fmt: Format) -> IpcCompression:
    """The ``compression`` parameter's values → an Arrow stream's buffer compression (default none)."""
    if not values:
        return "uncompressed"
    known = ", ".join(ARROW_COMPRESSIONS)
    if fmt is not Format.ARROW:
        raise ParameterError(COMPRESSION, f"compression is a parameter of the arrow format ({known})")
    if len(values) > 1:
        raise ParameterError(COMPRESSION, "give compression once")
    for name in ARROW_COMPRESSIONS:
        if values[0].lower() == name:
            return name
    shown = values[0] if len(values[0]) <= 40 else values[0][:39] + "…"
    raise ParameterError(COMPRESSION, f"compression {shown!r} is not one of {known}")


def _camel(name: str) -> str:
    head, *rest = name.lower().split("_")
    return head + "".join(part.title() for part in rest)


#: LedgerFilter's fields by their GraphQL names (``gpuModel`` …).
FILTER_PARAMETERS: dict[str, Dimension] = {_camel(d.name): d for d in Dimension}
COMMON_PARAMETERS = frozenset({"start", "end", "groupBy", "fields", "unallocated", *FILTER_PARAMETERS})
#: The parameters a question may add to the common ones.
QUESTION_PARAMETERS = frozenset(
    {
        "granularity",
        "metric",
        "idlePolicy",
        "currency",
        "thresholdPct",
        "focusVersion",
        "allocationPct",
        "utilizationPct",
        "timeZone",
    }
)


@dataclass(frozen=True)
class ExportArgs:
    """A checked export request: the ledger query (window, buckets, groups, filter, access) and the
    question's own arguments; ``fields`` None = every column."""

    query: LedgerQuery
    metric: str | None = None
    idle_policy: IdlePolicy = IdlePolicy.SEPARATE
    currency: str | None = None
    threshold_pct: float = DEFAULT_IDLE_THRESHOLD_PCT
    fields: tuple[str, ...] | None = None
    #: focus: the FOCUS version, as given (checked by the question).
    focus_version: str | None = None
    #: break-even: the what-if allocation and utilization, percent (checked by the question).
    allocation_pct: float | None = None
    utilization_pct: float | None = None
    #: heatmap: the IANA time zone, as given (checked by the question).
    time_zone: str | None = None


def parse_args(question: Question, params: Params, *, access: Access, max_window_days: int) -> ExportArgs:
    """``params`` checked for ``question`` under ``access`` (see the module docstring)."""
    allowed = COMMON_PARAMETERS | question.parameters
    for name, values in params.items():
        if name not in allowed:
            raise ParameterError(
                name, f"{question.name} has no parameter {name!r}; it takes {', '.join(sorted(allowed))}"
            )
        for value in values:
            if "\x00" in value:
                raise ParameterError(name, f"{name}: NUL characters are not allowed")
            if len(value) > MAX_VALUE_CHARS:
                raise ParameterError(name, f"{name}: a value is longer than {MAX_VALUE_CHARS} characters")
    start = _instant(params, "start")
    end = _instant(params, "end")
    window = _window(start, end, max_window_days)
    granularity = _enum(params, "granularity", Granularity, Granularity.TOTAL)
    group_by = _group_by(params, question.default_group_by)
    query = LedgerQuery(window, granularity, group_by, _filter(params), access=access)
    fields = _fields(params, question.columns(group_by))
    return ExportArgs(
        query=query,
        metric=_metric(params),
        idle_policy=_enum(params, "idlePolicy", IdlePolicy, IdlePolicy.SEPARATE),
        currency=_one(params, "currency"),
        threshold_pct=_number(params, "thresholdPct", DEFAULT_IDLE_THRESHOLD_PCT),
        fields=fields,
        focus_version=_one(params, "focusVersion"),
        allocation_pct=_number(params, "allocationPct", None),
        utilization_pct=_number(params, "utilizationPct", None),
        time_zone=_one(params, "timeZone"),
    )


def _one(params: Params, name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise ParameterError(name, f"{name} was given {len(values)} times; give it once")
    return values[0]


def _instant(params: Params, name: str) -> dt.datetime:
    text = _one(params, name)
    if text is None:
        raise ParameterError(name, f"{name} is required: an ISO 8601 instant such as 2025-09-01T00:00:00Z")
    # A '+' left unescaped in a query string arrives as a space: "…T00:00:00 00:00".
    candidate = text.strip().replace(" ", "+") if "T" in text else text.strip()
    try:
        value = dt.datetime.fromisoformat(candidate)
    except ValueError:
        raise ParameterError(
            name, f"{name} {text!r} is not an ISO 8601 instant (example: 2025-09-01T00:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise ParameterError(name, f"{name} {text!r} has no timezone; give UTC (…Z)", code=InvalidWindow.code)
    return value


def _window(start: dt.datetime, end: dt.datetime, max_window_days: int) -> Window:
    """``check_window``'s window; its refusal names the parameter to change."""
    try:
        return check_window(start, end, max_days=max_window_days)
    except WindowNotAligned as exc:
        raise ParameterError(
            "end" if is_hour_aligned(start) else "start", exc.message, code=exc.code
        ) from None
    except QueryError as exc:  # end before start, or too long a window: change the end
        raise ParameterError("end", exc.message, code=exc.code) from None


def _enum(params: Params, name: str, enum: type[E], default: E) -> E:
    text = _one(params, name)
    if text is None:
        return default
    by_name = {m.name: m for m in enum}
    found = by_name.get(text.strip().upper())
    if found is None:
        raise ParameterError(name, f"{name} {text!r} is not one of {', '.join(by_name)}")
    return found


def _group_by(params: Params, default: tuple[Dimension, ...]) -> tuple[Dimension, ...]:
    if "groupBy" not in params:
        return default
    out: list[Dimension] = []
    for value in params["groupBy"]:
        for item in value.split(","):
            name = item.strip().upper()
            if not name:
                continue
            if name not in Dimension.__members__:
                raise ParameterError(
                    "groupBy",
                    f"groupBy {item.strip()!r} is not a dimension; use {', '.join(Dimension.__members__)}",
                )
            out.append(Dimension[name])
    return tuple(out)


def _filter(params: Params) -> LedgerFilter:
    values = {dim: list(params[name]) for name, dim in FILTER_PARAMETERS.items() if params.get(name)}
    count = sum(len(v) for v in values.values())
    if count > MAX_FILTER_VALUES:
        raise ParameterError(None, f"{count} filter values; at most {MAX_FILTER_VALUES} are accepted")
    unallocated_text = _one(params, "unallocated")
    unallocated: bool | None = None
    if unallocated_text is not None:
        flag = unallocated_text.strip().lower()
        if flag not in ("true", "false"):
            raise ParameterError("unallocated", f"unallocated {unallocated_text!r} must be true or false")
        unallocated = flag == "true"
    return LedgerFilter(values, unallocated)


def _metric(params: Params) -> str | None:
    text = _one(params, "metric")
    if text is None:
        return None
    key = text.strip().lower()
    if key not in UTIL_METRIC_KEYS:
        names = ", ".join(k.upper() for k in UTIL_METRIC_KEYS)
        raise ParameterError("metric", f"metric {text!r} is not one of {names}")
    return key


@overload
def _number(params: Params, name: str, default: float) -> float: ...
@overload
def _number(params: Params, name: str, default: None) -> float | None: ...
def _number(params: Params, name: str, default: float | None) -> float | None:
    text = _one(params, name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ParameterError(name, f"{name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ParameterError(name, f"{name} must be a finite number")
    return value


def _fields(params: Params, columns: Sequence[str]) -> tuple[str, ...] | None:
    if "fields" not in params:
        return None
    wanted: list[str] = []
    for value in params["fields"]:
        wanted += [f.strip() for f in value.split(",") if f.strip()]
    if not wanted:
        raise ParameterError("fields", "fields is empty; name at least one column, or leave it out for all")
    unknown = [f for f in wanted if f not in columns]
    if unknown:
        raise ParameterError(
            "fields",
            f"unknown column(s) {', '.join(map(repr, unknown))}; this export has {', '.join(columns)}",
        )
    return tuple(dict.fromkeys(wanted))
