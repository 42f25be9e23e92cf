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
# Candidates of one dimension are ranked: override rules first, then the source, then the rest.
_SOURCE_RANK = 1_000_000


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
    candidates = [_source_candidates(indexed)]
    if rules:
        long = _long_facts(indexed, facts, device_tags)
        candidates += [_rule_candidates(long, rule, i) for i, rule in enumerate(rules)]
    ranked = pl.concat(candidates, how="vertical")
    winners = (
        ranked.filter(pl.col("value").is_not_null() & (pl.col("value") != ""))
        .filter(pl.col("value").str.len_chars() <= MAX_VALUE_CHARS)
        .sort(_ROW, "column", "rank")
        .unique([_ROW, "column"], keep="first", maintain_order=True)
    )
    decided = indexed.select(_ROW)
    for column in OWNER_COLUMNS:
        mine = winners.filter(pl.col("column") == column).select(
            _ROW, pl.col("value").alias(column), pl.col("by").alias(f"__by_{column}")
        )
        decided = decided.join(mine, on=_ROW, how="left")
    owner = pl.coalesce(*[pl.col(f"__by_{c}") for c in OWNER_COLUMNS]).alias("owner_rule")
    decided = decided.select(_ROW, *OWNER_COLUMNS, owner)
    out = indexed.drop(*OWNER_COLUMNS, "owner_rule", strict=False).join(decided, on=_ROW, how="left")
    return out.sort(_ROW).select(*rows.columns, *(["owner_rule"] if "owner_rule" not in rows.columns else []))


def _source_candidates(indexed: pl.DataFrame) -> pl.DataFrame:
    """What the source named, per owner column, ranked between the override rules and the rest."""
    return pl.concat(
        [
            indexed.select(
                _ROW,
                pl.lit(column).alias("column"),
                pl.col(column).alias("value"),
                pl.lit(_SOURCE_RANK, pl.Int64).alias("rank"),
                pl.lit(SOURCE_RULE).alias("by"),
            )
            for column in OWNER_COLUMNS
        ],
        how="vertical",
    )


def _long_facts(indexed: pl.DataFrame, facts: str, device_tags: str) -> pl.DataFrame:
    """One row per (row, fact key): device tags and workload facts merged, the workload's winning."""
    parts = []
    for column, weight in ((facts, 0), (device_tags, 1)):
        if column not in indexed.columns:
            continue
        part = (
            indexed.select(_ROW, pl.col(column).cast(FACTS_DTYPE))
            .explode(column)
            .drop_nulls(column)
            .unnest(column)
            .with_columns(pl.lit(weight, pl.Int8).alias("__weight"))
        )
        parts.append(part)
    if not parts:
        return pl.DataFrame(schema={_ROW: pl.UInt32, "key": pl.String, "value": pl.String})
    merged = pl.concat(parts, how="vertical").sort(_ROW, "key", "__weight")
    return merged.unique([_ROW, "key"], keep="first", maintain_order=True).drop("__weight")


def _rule_candidates(long: pl.DataFrame, rule: AttributionRule, position: int) -> pl.DataFrame:
    """The value ``rule`` gives each row that has its fact (null where its regex does not match)."""
    value = pl.col("value")
    if rule.match is not None:
        matched = value.str.contains(anchored(rule.match))
        value = pl.when(matched).then(value).otherwise(None)
    if rule.value is not None:  # without a match regex, $0 is the whole value
        value = value.str.replace(anchored(rule.match or "(?s).*"), rule.value)
    if rule.values:
        value = value.replace(rule.values)
    rank = position if rule.override else _SOURCE_RANK + 1 + position
    return long.filter(pl.col("key") == rule.source).select(
        _ROW,
        pl.lit(rule.column).alias("column"),
        value.cast(pl.String).alias("value"),
        pl.lit(rank, pl.Int64).alias("rank"),
        pl.lit(rule.name).alias("by"),
    )
