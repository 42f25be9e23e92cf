"""Data-quality findings of billing imports: kept per file, replaced with the file, asked by window.

A finding (``connectors.billing.Finding``) counts rows that were *imported* although they break a
rule (an unknown enum value, a negative usage quantity, GPU-hours beyond capacity…), per file,
rule, column, reason and provider, with the first few rows as examples. The ingestor writes a
file's findings in the transaction that writes its lines and ``billing_file`` row, and deletes
them where it deletes the file's lines: re-importing a file replaces its findings exactly, and a
re-import of unchanged files is a no-op. :func:`data_quality` answers "what broke which rule,
where" for a window (the ``dataQuality`` query); it is account-wide, like the bill.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl
from sqlalchemy import Connection, delete, func, insert, select

from connectors.sdk.billing import FINDING_EXAMPLES, Finding
from service.analytics.access import Access
from service.analytics.paging import Page
from service.analytics.window import Window
from service.dbtypes import table_of
from service.models import BillingFile, DataQualityFinding

_FINDINGS = table_of(DataQualityFinding)
_FILES = table_of(BillingFile)
#: File names per ``IN (…)``: under SQLite's and PostgreSQL's bound-parameter limits.
_NAMES_CHUNK = 500

Period = tuple[dt.datetime, dt.datetime]


# --- writing (inside the ingestor's transaction) ----------------------------------------------------


def delete_files(conn: Connection, source: str, files: Sequence[str]) -> None:
    """Forget ``source``'s findings of ``files`` (being imported again)."""
    names = list(dict.fromkeys(files))
    for i in range(0, len(names), _NAMES_CHUNK):
        conn.execute(
            delete(_FINDINGS).where(
                _FINDINGS.c.connector == source, _FINDINGS.c.source_file.in_(names[i : i + _NAMES_CHUNK])
            )
        )


def delete_period_files(conn: Connection, source: str, period_start: dt.datetime) -> None:
    """Forget the findings of the files of a superseded import of the period (the ``billing_file``
    rows :func:`service.billing.store.delete_period_files` is about to delete: an older assembly
    whose files had other names). Call it first."""
    files = select(_FILES.c.source_file).where(
        _FILES.c.source == source, _FILES.c.billing_period_start == period_start
    )
    conn.execute(delete(_FINDINGS).where(_FINDINGS.c.connector == source, _FINDINGS.c.source_file.in_(files)))


def write(
    conn: Connection,
    source: str,
    run_id: int,
    findings: Iterable[Finding],
    period: Period,
    now: dt.datetime,
) -> int:
    """Store ``findings`` (of one file, whose billing period — or the run's window — is ``period``);
    the number of rows they count."""
    kept = [f for f in findings if f.count > 0]
    rows = [
        {
            "connector": source,
            "run_id": run_id,
            "source_file": f.file,
            "provider": f.provider,
            "rule": f.rule,
            "column_name": f.column,
            "reason": f.reason,
            "count": f.count,
            "examples": json.dumps(
                [{"line": line, "value": value} for line, value in f.examples[:FINDING_EXAMPLES]],
                ensure_ascii=False,
            ),
            "period_start": period[0],
            "period_end": period[1],
            "recorded_at": now,
        }
        for f in kept
    ]
    if rows:
        conn.execute(insert(_FINDINGS), rows)
    return sum(f.count for f in kept)


#: A long value in an example is cut to this many characters (the finding says how long it was).
EXAMPLE_CHARS = 120


def cut_long_text(
    lines: pl.DataFrame, lengths: dict[str, int], file: str
) -> tuple[pl.DataFrame, list[Finding]]:
    """``lines`` with text longer than its column holds (``lengths``) cut to fit, and a
    ``value_too_long`` finding per column cut: a long resource name or SKU description is no
    reason to lose a cost line (the value is kept up to the column's length)."""
    found: list[Finding] = []
    cuts = []
    present = {c: n for c, n in lengths.items() if c in lines.columns}
    if not present or lines.is_empty():
        return lines, found
    # one pass over every text column says which hold a long value; only those are filtered (a
    # filter per column of the whole batch was 8 % of an import's CPU, though nothing was long)
    over = lines.select((pl.col(c).str.len_chars() > n).any().alias(c) for c, n in present.items()).row(0)
    for (column, limit), any_long in zip(present.items(), over, strict=True):
        if not any_long:
            continue
        long = lines.filter(pl.col(column).str.len_chars() > limit)
        examples = tuple(
            (line, value if len(value) <= EXAMPLE_CHARS else value[:EXAMPLE_CHARS] + "…")
            for line, value in long.select("line_no", column).head(FINDING_EXAMPLES).iter_rows()
        )
        reason = f"longer than the {limit} characters stored: cut to {limit}"
        found.append(Finding(file, "value_too_long", column, reason, long.height, examples))
        cuts.append(pl.col(column).str.slice(0, limit))
    return (lines.with_columns(cuts) if cuts else lines), found


def with_file_provider(findings: list[Finding], providers: set[str]) -> list[Finding]:
    """``findings`` with the file's provider where they name none and its lines have one only
    (a CUR's findings are AWS's), so asking by provider finds them."""
    if len(providers) != 1:
        return findings
    (provider,) = providers
    return [f if f.provider is not None else replace(f, provider=provider) for f in findings]


# --- asking -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Example:
    """One row that broke a rule: where it is and the value as the file wrote it."""

    file: str
    line: int | None
    value: str | None


@dataclass(slots=True)
class RuleCount:
    """Rows imported although they break ``rule`` (on ``column``, for ``reason``), over ``files``
    files of ``provider`` (null: a file of several providers whose finding named none)."""

    rule: str
    column: str | None
    provider: str | None
    reason: str
    rows: int
    files: int
    examples: list[Example] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str | None, str | None, str]:
        return (self.rule, self.column, self.provider, self.reason)


def data_quality(
    conn: Connection,
    window: Window,
    provider: str | None,
    *,
    access: Access,
    page: Page | None = None,
) -> list[RuleCount]:
    """Findings of the files whose period (billing period, else the importing run's window)
    overlaps ``window``, of ``provider`` if given (case-insensitive), summed per rule, column,
    provider and reason — most rows first — each with up to ``FINDING_EXAMPLES`` examples
    (in file and line order). Account-wide: ``access`` must be everything, else FORBIDDEN."""
    access.require_everything("dataQuality")
    page = page or Page()
    t = _FINDINGS
    terms: list[Any] = [t.c.period_start < window.end, t.c.period_end > window.start]
    if provider is not None:
        terms.append(func.lower(t.c.provider) == provider.lower())
    keys = [t.c.rule, t.c.column_name, t.c.provider, t.c.reason]
    rows = func.sum(t.c.count)
    stmt = (
        select(*keys, rows, func.count(func.distinct(t.c.connector + "/" + t.c.source_file)))
        .where(*terms)
        .group_by(*keys)
        # NULLs sort differently on SQLite and PostgreSQL: coalesced, so pages agree on both.
        .order_by(
            rows.desc(),
            t.c.rule,
            func.coalesce(t.c.column_name, ""),
            func.coalesce(t.c.provider, ""),
            t.c.reason,
        )  # fmt: skip
    )
    counts = [
        RuleCount(rule, column, prov, reason, int(n), int(files))
        for rule, column, prov, reason, n, files in conn.execute(page.apply(stmt))
    ]
    page.check(counts)
    _add_examples(conn, counts, terms)
    return counts


def _add_examples(conn: Connection, counts: list[RuleCount], terms: list[Any]) -> None:
    """The first examples of each of ``counts``, reading findings in file order until each has
    ``FINDING_EXAMPLES`` (or the findings end)."""
    wanted = {c.key: c for c in counts}
    if not wanted:
        return
    t = _FINDINGS
    stmt = (
        select(t.c.rule, t.c.column_name, t.c.provider, t.c.reason, t.c.source_file, t.c.examples)
        .where(*terms, t.c.rule.in_(sorted({c.rule for c in counts})))
        .order_by(t.c.source_file, t.c.id)
    )
    for rule, column, prov, reason, source_file, examples in conn.execute(stmt):
        count = wanted.get((rule, column, prov, reason))
        if count is None:
            continue
        for example in json.loads(examples):
            count.examples.append(Example(source_file, example.get("line"), example.get("value")))
            if len(count.examples) >= FINDING_EXAMPLES:
                del wanted[count.key]
                break
        if not wanted:
            return
