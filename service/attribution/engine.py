"""Applying ``[[attribution]]`` rules to rows: one vectorized pass, no Python loop per row.

Call :func:`attribute` with one row per distinct owner question — at ingest one per (device,
workload_key), in ``reattribute`` one per stored (source, device, workload_key), in billing one per
billed resource — and join its answer back onto the many rows that share it::

    from service.attribution import attribute, facts_series

    rows = pl.DataFrame({
        "key": ["k8s:ml/train-0/main"],           # any columns: all are kept as they are
        "project": [None], "team": ["infra"], "user_name": [None],   # what the source named
        "facts": facts_series([{"k8s.namespace_label:team": "ml-research"}]),
        "device_tags": facts_series([{"cloud.tag:project": "atlas"}]),  # optional
    })
    out = attribute(rows, settings.attribution)
    # out: the same rows, project/team/user_name as the rules decide, plus owner_rule

Per dimension (project, team, user) the first non-empty value of, in order: the rules with
``override = true`` (file order), the source's own value, the other rules (file order).
``owner_rule`` records who named ``project`` (else ``team``, else ``user_name``): a rule's name,
:data:`~service.attribution.rules.SOURCE_RULE` when the connector itself did, null when nobody did.
Device tags and workload facts are merged first, the workload's fact winning on the same key.
A value longer than the ledger column (200 characters) is not given: the next candidate is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from service.attribution.rules import (
    DIMENSION_COLUMNS,
    MAX_VALUE_CHARS,
    SOURCE_RULE,
    AttributionRule,
    anchored,
)

#: A facts column: a list of (key, value) pairs, Polars' form of a string → string mapping.
FACTS_DTYPE = pl.List(pl.Struct({"key": pl.String, "value": pl.String}))
#: The owner columns, in the order ``owner_rule`` looks at them.
OWNER_COLUMNS: tuple[str, ...] = ("project", "team", "user_name")
_ROW = "__row"


def facts_series(mappings: Iterable[Mapping[str, str] | None], name: str = "facts") -> pl.Series:
    """A facts column from one mapping (or None) per row."""
    return pl.Series(
        name,
        [[{"key": k, "value": v} for k, v in m.items()] if m else [] for m in mappings],
        dtype=FACTS_DTYPE,
    )


def attribute(
    rows: pl.DataFrame,
    rules: Sequence[AttributionRule],
    *,
    facts: str = "facts",
    device_tags: str = "device_tags",
) -> pl.DataFrame:
    """``rows`` with ``project``, ``team``, ``user_name`` decided by ``rules`` and ``owner_rule``
    added (see the module docstring). ``rows`` needs the three owner columns (the source's values,
    null where it named none) and may have a ``facts`` and a ``device_tags`` column of
    :data:`FACTS_DTYPE`; every other column is passed through. Pure: reads nothing else."""
    rows = rows.with_columns(pl.col(c).cast(pl.String) for c in OWNER_COLUMNS)
    indexed = rows.with_row_index(_ROW)
    # one column per rule: the value it gives each row (null: none), aligned with the rows
    wide = indexed.select(_ROW, *OWNER_COLUMNS)
    if rules:
        long = _long_facts(indexed, facts, device_tags, {r.source for r in rules})
        for i, rule in enumerate(rules):
            wide = wide.join(_rule_values(long, rule, f"__rule{i}"), on=_ROW, how="left")
    decided: list[pl.Expr] = []
    named_by: list[pl.Expr] = []
    for dimension, column in DIMENSION_COLUMNS.items():
        mine = [(f"__rule{i}", r) for i, r in enumerate(rules) if r.dimension == dimension]
        ranked = [
            *[(name, r.name) for name, r in mine if r.override],
            (column, SOURCE_RULE),
            *[(name, r.name) for name, r in mine if not r.override],
        ]
        given = [_given(name) for name, _ in ranked]
        decided.append(pl.coalesce(given).alias(column))
        whose = [
            pl.when(g.is_not_null()).then(pl.lit(who)) for g, (_, who) in zip(given, ranked, strict=True)
        ]
        named_by.append(pl.coalesce(whose))
    answer = wide.sort(_ROW).select(*decided, pl.coalesce(named_by).alias("owner_rule"))
    out = indexed.drop(_ROW, *OWNER_COLUMNS, "owner_rule", strict=False).with_columns(answer)
    return out.select(*rows.columns, *(["owner_rule"] if "owner_rule" not in rows.columns else []))


def _given(name: str) -> pl.Expr:
    """Column ``name``'s value where it names someone: not empty, not longer than the ledger holds."""
    value = pl.col(name)
    return pl.when(value.str.len_chars().is_between(1, MAX_VALUE_CHARS)).then(value)


def _long_facts(indexed: pl.DataFrame, facts: str, device_tags: str, keys: set[str]) -> pl.DataFrame:
    """One row per (row, fact key) of the ``keys`` rules read (a pod may carry hundreds of labels):
    device tags and workload facts merged, the workload's winning."""
    parts = []
    for column, weight in ((facts, 0), (device_tags, 1)):
        if column not in indexed.columns:
            continue
        part = (
            indexed.select(_ROW, pl.col(column).cast(FACTS_DTYPE))
            .explode(column)
            .drop_nulls(column)
            .unnest(column)
            .filter(pl.col("key").is_in(list(keys)))
            .with_columns(pl.lit(weight, pl.Int8).alias("__weight"))
        )
        parts.append(part)
    if not parts:
        return pl.DataFrame(schema={_ROW: pl.UInt32, "key": pl.String, "value": pl.String})
    merged = pl.concat(parts, how="vertical").sort(_ROW, "key", "__weight")
    return merged.unique([_ROW, "key"], keep="first", maintain_order=True).drop("__weight")


def _rule_values(long: pl.DataFrame, rule: AttributionRule, name: str) -> pl.DataFrame:
    """(row, value ``rule`` gives it) for the rows that have its fact (null where ``match`` fails)."""
    value = pl.col("value")
    if rule.match is not None:
        matched = value.str.contains(anchored(rule.match))
        value = pl.when(matched).then(value).otherwise(None)
    if rule.value is not None:  # without a match regex, $0 is the whole value
        value = value.str.replace(anchored(rule.match or "(?s).*"), rule.value)
    if rule.values:
        value = value.replace(rule.values)
    return long.filter(pl.col("key") == rule.source).select(_ROW, value.cast(pl.String).alias(name))
