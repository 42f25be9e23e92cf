"""``dataQuality``: what billing rows were imported although they break a rule, counted by rule.

A thin view of :func:`service.billing.findings.data_quality` (the domain query): flat rows, one
per rule, column, provider and reason, each with a few example rows, paged by ``first``/``after``
like every aggregate answer. Account-wide (a bill names every project's resources): ``read``.
"""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.types import Info

from service.analytics.window import check_window
from service.api.context import ApiContext
from service.api.types import AFTER, CURSOR, FIRST, WINDOW, TimeWindow, aggregate_page
from service.billing import findings as domain


@strawberry.type(description="A row imported although it breaks the rule: where, and the value as written.")
class DataQualityExample:
    file: str = strawberry.field(description="Export file (path or URL).")
    line: int | None = strawberry.field(description="Line (CSV: the header is line 1) or record number.")
    value: str | None = strawberry.field(description="The value as the file wrote it (null: empty).")


@strawberry.type(
    description="Billing rows imported although they break a rule, summed over the files whose "
    "period overlaps the window."
)
class DataQualityRule:
    rule: str = strawberry.field(
        description="Stable rule id (snake_case): unknown_value, negative_usage, gpu_hours_over_capacity…"
    )
    column: str | None = strawberry.field(description="The column as the file spells it.")
    provider: str | None = strawberry.field(
        description="The rows' provider (null: a file of several providers whose rule named none)."
    )
    reason: str = strawberry.field(description="What is wrong, for a person.")
    rows: int = strawberry.field(description="Rows imported that break the rule.")
    files: int = strawberry.field(description="Files they are in.")
    examples: list[DataQualityExample] = strawberry.field(
        description="The first rows (up to 5), in file and line order."
    )
    cursor: str = strawberry.field(description=CURSOR)

    @classmethod
    def of(cls, r: domain.RuleCount, cursor: str) -> DataQualityRule:
        return cls(
            rule=r.rule,
            column=r.column,
            provider=r.provider,
            reason=r.reason,
            rows=r.rows,
            files=r.files,
            examples=[DataQualityExample(file=e.file, line=e.line, value=e.value) for e in r.examples],
            cursor=cursor,
        )


@strawberry.type
class DataQualityQuery:
    @strawberry.field(
        description="Data-quality findings of billing imports: rows imported (not refused) although "
        "they break a rule, counted by rule, column, provider and reason, most rows first, with "
        "examples. A file counts when its billing period (else the window of the run that read it) "
        "overlaps the window; a re-imported file's findings replace its earlier ones. Refused rows "
        "are not here (table rejection). Account-wide: needs the `read` scope, else FORBIDDEN."
    )
    async def data_quality(
        self,
        info: Info[ApiContext, None],
        window: Annotated[TimeWindow, strawberry.argument(description=WINDOW)],
        provider: Annotated[
            str | None,
            strawberry.argument(description="Only this provider's findings (aws, gcp, azure, …; any case)."),
        ] = None,
        first: FIRST = None,
        after: AFTER = None,
    ) -> list[DataQualityRule]:
        ctx = info.context
        w = check_window(window.start, window.end, max_days=ctx.settings.max_window_days)
        page = aggregate_page(ctx.settings, "dataQuality", first, after)
        access = ctx.access
        rows = await ctx.read(lambda conn: domain.data_quality(conn, w, provider, access=access, page=page))
        return [DataQualityRule.of(r, c) for r, c in zip(rows, page.cursors(len(rows)), strict=True)]
