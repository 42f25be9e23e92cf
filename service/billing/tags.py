"""The bills' tags as attribution facts of the instances they bill (docs/attribution.md, "Cloud tags").

Every billing connector stores a line's tags in ``billing_line.tags`` as a JSON object (CUR 2.0
``resource_tags`` and legacy ``resourceTags/user:…`` columns, GCP ``labels``, Azure ``Tags``,
FOCUS ``Tags``). Here they become ``cloud.tag:<key>`` facts of the line's ``resource_id`` — the id
a metered device's ``instance_id`` carries (:mod:`connectors.cloud`), so the facts join the ledger
rows of that instance as the bill's rates do (:mod:`service.billing.rates`).

Keys, so one rule reads the same tag from the instance and from its bill:

* AWS marks user-defined cost allocation tags in the bill: legacy CUR (and FOCUS from AWS) as
  ``user:<key>``, CUR 2.0 as ``user_<key>``. The marker is dropped (``user:team`` and ``user_team``
  are ``cloud.tag:team``, as EC2 ``DescribeInstances`` names it). CUR 2.0 also rewrites characters
  other than letters, digits and ``_`` in the key to ``_`` (``cost-center`` → ``cost_center``):
  that cannot be undone, so a rule for such a tag names the CUR 2.0 spelling. AWS-generated tags
  (``aws:createdBy``) keep their key.
* What a connector put into ``tags`` that is no tag — GCP's credit sums (``gcp:credit:<TYPE>``),
  Azure's ``azure:unparsed_tags`` (text that was no JSON object) — is no fact.
* Bounded as every source's facts are (:func:`connectors.cloud_tags.facts`).

Per resource, a key's value is the one of the latest line (by charge start) that carries it: a
tag changed during the month names the owner it has now, as an instance's own tags do.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

import polars as pl
from sqlalchemy import Connection, func, select

from connectors.cloud_tags import MAX_FACTS, facts
from service.attribution import FACTS_DTYPE, OWNER_COLUMNS, AttributionRule, attribute
from service.dbtypes import UTCDateTime, table_of
from service.models import BillingLine

_LINE = table_of(BillingLine)
#: What connectors keep in ``tags`` that is not a tag.
NOT_TAGS = ("gcp:credit:", "azure:unparsed_tags")
#: Resources per ``IN (…)``: under both databases' parameter limits.
_CHUNK = 5000


def tag_key(provider: str | None, key: str) -> str | None:
    """The key a bill's tag has as a fact (module docstring); None for what is no tag."""
    if key.startswith(NOT_TAGS):
        return None
    if provider == "aws":
        for marker in ("user:", "user_"):
            if key.startswith(marker) and len(key) > len(marker):
                return key[len(marker) :]
    return key


def tag_facts(provider: str | None, text: str | None) -> dict[str, str]:
    """One line's ``tags`` JSON text → its ``cloud.tag:<key>`` facts (nothing for text that is no
    JSON object: the connectors already flagged it)."""
    if not text:
        return {}
    try:
        tags = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(tags, dict):
        return {}
    pairs = ((tag_key(provider, str(k)), v) for k, v in tags.items() if isinstance(v, str | int | float))
    return facts((k, v) for k, v in pairs if k is not None)


def resource_facts(
    conn: Connection, resources: Sequence[str], start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """``resource`` → ``facts`` (:data:`service.attribution.FACTS_DTYPE`) from the tags of the
    resources' billing lines overlapping ``[start, end)``; resources without tags are left out.

    SQL reduces the lines to their distinct tag texts per resource (with the latest charge start
    of each); one JSON decode per distinct text, the rest in Polars."""
    c = _LINE.c
    found: list[tuple[str, str, str, dt.datetime]] = []
    wanted = sorted(set(resources))
    for first in range(0, len(wanted), _CHUNK):
        stmt = (
            select(c.resource_id, c.provider, c.tags, func.max(c.charge_start, type_=UTCDateTime()))
            .where(
                c.resource_id.in_(wanted[first : first + _CHUNK]),
                c.charge_start < end,
                c.charge_end > start,
                c.tags.is_not(None),
                c.tags != "{}",
            )
            .group_by(c.resource_id, c.provider, c.tags)
        )
        found += [(r[0], r[1], r[2], r[3]) for r in conn.execute(stmt)]
    empty = pl.DataFrame(schema={"resource": pl.String, "facts": FACTS_DTYPE})
    if not found:
        return empty
    lines = pl.DataFrame(
        found,
        schema={
            "resource": pl.String,
            "provider": pl.String,
            "tags": pl.String,
            "latest": pl.Datetime("us", "UTC"),
        },
        orient="row",
    )
    distinct = lines.select("provider", "tags").unique()
    decoded = distinct.with_columns(
        pl.Series(
            "pairs",
            [
                [{"key": k, "value": v} for k, v in tag_facts(p, t).items()]
                for p, t in distinct.iter_rows()  # one step per distinct tag map, not per line
            ],
            dtype=FACTS_DTYPE,
        )
    )
    long = (
        lines.join(decoded, on=["provider", "tags"], how="left")
        .select("resource", "latest", "pairs")
        .explode("pairs")
        .drop_nulls("pairs")
        .unnest("pairs")
    )
    if long.is_empty():
        return empty
    latest = (
        long.sort("resource", "key", "latest", "value", descending=[False, False, True, False])
        .unique(["resource", "key"], keep="first", maintain_order=True)
        .filter(pl.int_range(pl.len()).over("resource") < MAX_FACTS)  # in key order, as facts() keeps
    )
    return (
        latest.group_by("resource", maintain_order=True)
        .agg(pl.struct("key", "value").alias("facts"))
        .with_columns(pl.col("facts").cast(FACTS_DTYPE))
    )


def resource_owners(
    conn: Connection,
    resources: Sequence[str],
    start: dt.datetime,
    end: dt.datetime,
    rules: Sequence[AttributionRule],
) -> pl.DataFrame:
    """Per resource of ``resources``: its bill ``facts`` and the owner ``rules`` give it from them
    (``project``, ``team``, ``user_name``, ``owner_rule``; null where no rule applies) — what the
    unmonitored spend of a billed instance no metric saw carries. Every resource has a row."""
    frame = pl.DataFrame({"resource": sorted(set(resources))}, schema={"resource": pl.String})
    found = resource_facts(conn, frame["resource"].to_list(), start, end)
    # the bill's tags are facts about the machine: the engine's device tags (no workload facts)
    frame = frame.join(found.rename({"facts": "device_tags"}), on="resource", how="left").with_columns(
        pl.col("device_tags").fill_null(pl.lit([], FACTS_DTYPE)),
        *(pl.lit(None, pl.String).alias(c) for c in OWNER_COLUMNS),
    )
    return attribute(frame, rules).rename({"device_tags": "facts"})
