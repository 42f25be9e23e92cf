"""``alerts`` and ``alertHistory``: thin views of :mod:`service.alerts.history`.

Scoped as every answer: project- or team-scoped tokens see their alerts only; account-wide
alerts (a silent connector, unmonitored spend) need the ``read`` scope.
"""

from __future__ import annotations

import datetime as dt
from enum import Enum
from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from service.alerts import history as domain
from service.alerts.delivery import decimal_text as _decimal
from service.analytics.paging import Page, binding_of
from service.analytics.window import check_window
from service.api.context import ApiContext
from service.api.types import AFTER, CURSOR, FIRST, WINDOW, TimeWindow


@strawberry.enum(description="Where an alert stands.")
class AlertStateName(Enum):
    FIRING = "FIRING"
    RESOLVED = "RESOLVED"


_VALUE = "The measured value as a decimal string (hours, or money in `unit`); null: none."
_THRESHOLD = "The rule's threshold in `unit`, as a decimal string."
_UNIT = "Unit of value and threshold: h (hours) or an ISO 4217 currency."


@strawberry.type(description="An alert as it stands: one per rule and subject.")
class Alert:
    rule: str = strawberry.field(description="The [[alerts]] rule's name.")
    kind: str = strawberry.field(
        description="idle_workload, project_idle_cost, budget_forecast, unmonitored_spend, connector_silent."
    )
    state: AlertStateName = strawberry.field(description="FIRING or RESOLVED.")
    subject_key: str = strawberry.field(description="What it is about, stably: source/workload, project:…")
    subject: str = strawberry.field(description="What it is about, for a person.")
    project: str | None = strawberry.field(description="The project it belongs to (null: none).")
    team: str | None = strawberry.field(description="The team it belongs to (null: none).")
    value: str | None = strawberry.field(description=_VALUE)
    unit: str = strawberry.field(description=_UNIT)
    threshold: str | None = strawberry.field(description=_THRESHOLD)
    message: str = strawberry.field(description="What holds (or held), in a sentence.")
    since: dt.datetime = strawberry.field(description="When the current state began.")
    first_fired_at: dt.datetime = strawberry.field(description="When it first fired.")
    last_true_at: dt.datetime = strawberry.field(
        description="The last evaluation at which its condition held."
    )
    notified: bool = strawberry.field(
        description="The current firing was sent to the rule's channels (false: held back by min_interval_h)."
    )
    cursor: str = strawberry.field(description=CURSOR)


@strawberry.type(description="A change of an alert: it fired, resolved, or a held-back firing was announced.")
class AlertEvent:
    rule: str = strawberry.field(description="The rule's name.")
    kind: str = strawberry.field(description="The rule's kind.")
    state: AlertStateName = strawberry.field(description="The state it moved to (or was announced in).")
    at: dt.datetime = strawberry.field(description="When (the evaluation's time).")
    subject_key: str = strawberry.field(description="What it is about, stably.")
    subject: str = strawberry.field(description="What it is about, for a person.")
    project: str | None = strawberry.field(description="The project it belongs to (null: none).")
    team: str | None = strawberry.field(description="The team it belongs to (null: none).")
    value: str | None = strawberry.field(description=_VALUE)
    unit: str = strawberry.field(description=_UNIT)
    threshold: str | None = strawberry.field(description=_THRESHOLD)
    message: str = strawberry.field(description="What held, in a sentence.")
    notified: bool = strawberry.field(description="Sent to the rule's channels.")
    deliveries: str = strawberry.field(
        description=(
            "Per channel, in the rule's order, comma-separated: SENT, PENDING, RETRYING after TIME (why; "
            "attempts), FAILED (why; gave up) or DROPPED (why); empty when not announced."
        )
    )
    cursor: str = strawberry.field(description=CURSOR)


STATE_ARG = Annotated[
    AlertStateName | None, strawberry.argument(description="Only alerts in (or changes to) this state.")
]
RULE_ARG = Annotated[str | None, strawberry.argument(description="Only this rule's alerts.")]


def _shared_fields(r: domain.AlertRow | domain.EventRow) -> dict[str, Any]:
    """The fields an alert and an event of its history have alike (money as decimal strings)."""
    return {
        "rule": r.rule,
        "kind": r.kind,
        "state": AlertStateName(r.state),
        "subject_key": r.subject_key,
        "subject": r.subject,
        "project": r.project,
        "team": r.team,
        "value": _decimal(r.value),
        "unit": r.unit,
        "threshold": _decimal(r.threshold),
        "message": r.message,
        "notified": r.notified,
    }


def _page(ctx: ApiContext, field: str, first: int | None, after: str | None, *args: object) -> Page:
    s = ctx.settings
    return Page.of(
        field,
        first,
        after,
        page_size_max=s.page_size_max,
        max_rows=s.max_result_rows,
        binding=binding_of(field, *args),
    )


@strawberry.type
class AlertQuery:
    @strawberry.field(
        description="Alerts as they stand (FIRING or RESOLVED), one per rule and subject, by rule and "
        "subject. Project- or team-scoped callers see their projects' and teams' alerts; account-wide "
        "ones (connector_silent, unmonitored_spend) need the `read` scope."
    )
    async def alerts(
        self,
        info: Info[ApiContext, None],
        state: STATE_ARG = None,
        rule: RULE_ARG = None,
        first: FIRST = None,
        after: AFTER = None,
    ) -> list[Alert]:
        ctx = info.context
        state_name = state.value if state else None
        page = _page(ctx, "alerts", first, after, state_name, rule)
        access = ctx.access
        rows = await ctx.read(
            lambda c: domain.current(c, access=access, state=state_name, rule=rule, page=page)
        )
        cursors = page.key_cursors((r.rule, r.subject_key) for r in rows)
        return [
            Alert(
                **_shared_fields(r),
                since=r.since,
                first_fired_at=r.first_fired_at,
                last_true_at=r.last_true_at,
                cursor=c,
            )
            for r, c in zip(rows, cursors, strict=True)
        ]

    @strawberry.field(
        description="History of alerts: every time one fired or resolved (and a held-back firing was "
        "announced) within the window, newest first, with where it was sent. Scoped as `alerts`."
    )
    async def alert_history(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        state: STATE_ARG = None,
        rule: RULE_ARG = None,
        first: FIRST = None,
        after: AFTER = None,
    ) -> list[AlertEvent]:
        ctx = info.context
        w = check_window(window.start, window.end, max_days=ctx.settings.max_window_days)
        state_name = state.value if state else None
        page = _page(ctx, "alertHistory", first, after, w, state_name, rule)
        access = ctx.access
        rows = await ctx.read(
            lambda c: domain.history(c, w, access=access, state=state_name, rule=rule, page=page)
        )
        cursors = page.key_cursors((r.id,) for r in rows)
        return [
            AlertEvent(**_shared_fields(r), at=r.at, deliveries=r.deliveries, cursor=c)
            for r, c in zip(rows, cursors, strict=True)
        ]
