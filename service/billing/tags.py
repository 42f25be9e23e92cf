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
* A GCP project's labels (the export's ``project.labels``, kept by the connector as
  ``gcp:project_label:<key>``) are facts of every resource the project bills, under their own key
  ``cloud.project_label:<key>``: a label of the project is not one of the machine, and a rule says
  which wins (docs/cloud-tags.md, "Project labels").
* Bounded as every source's facts are (:func:`connectors.cloud_tags.facts`).

Per resource, a key's value is the one of the latest line (by charge start) that carries it: a
tag changed during the month names the owner it has now, as an instance's own tags do.

Where the facts go: the unmonitored spend of a billed instance (:func:`resource_owners`, from
:mod:`service.billing.rates`), and every metered device whose ``instance_id`` the bill names —
merged under the device's own tags when the rules are put at ingest (:func:`with_bill_tags`) and
on ``gpu-ledger reattribute`` (:func:`with_bill_tags_frame`); re-pricing from a bill that arrives
after the metrics re-applies the rules to its window, so those rows get them then.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

import polars as pl
from sqlalchemy import Connection, func, select

from connectors.cloud_tags import CLOUD_TAG, MAX_FACTS, PROJECT_LABEL, facts
from connectors.gcp_flat import PROJECT_LABEL_TAG
from connectors.sdk import DeviceInfo
from service.attribution import FACTS_DTYPE, OWNER_COLUMNS, AttributionRule, attribute, facts_series
from service.dbtypes import UTCDateTime, table_of
from service.models import BillingLine, Device

_LINE = table_of(BillingLine)
#: What connectors keep in ``tags`` that is not a tag.
NOT_TAGS = ("gcp:credit:", "azure:unparsed_tags")
#: Resources per ``IN (…)``: under both databases' parameter limits.
_CHUNK = 5000


def tag_key(provider: str | None, key: str) -> str | None:
    """The key a bill's tag has after ``cloud.tag:`` (module docstring); None for what is no tag
    of the machine (the connectors' own entries, a GCP project's labels)."""
    if key.startswith(NOT_TAGS) or key.startswith(PROJECT_LABEL_TAG):
        return None
    if provider == "aws":
        for marker in ("user:", "user_"):
            if key.startswith(marker) and len(key) > len(marker):
                return key[len(marker) :]
    return key


def fact_key(provider: str | None, key: str) -> str | None:
    """The whole fact key of a bill's tag: ``cloud.tag:<key>``, or ``cloud.project_label:<key>``
    for a GCP project's label; None for what is no tag."""
    if provider == "gcp" and key.startswith(PROJECT_LABEL_TAG) and len(key) > len(PROJECT_LABEL_TAG):
        return PROJECT_LABEL + key[len(PROJECT_LABEL_TAG) :]
    tag = tag_key(provider, key)
    return None if tag is None else CLOUD_TAG + tag


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
    pairs = ((fact_key(provider, str(k)), v) for k, v in tags.items() if isinstance(v, str | int | float))
    return facts(((k, v) for k, v in pairs if k is not None), prefix="")


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


def _merged(bill: Sequence[dict[str, str]] | None, own: Mapping[str, str] | None) -> dict[str, str]:
    return {**{f["key"]: f["value"] for f in bill or ()}, **(own or {})}


def with_bill_tags(
    conn: Connection, devices: Mapping[str, DeviceInfo], start: dt.datetime, end: dt.datetime
) -> dict[str, DeviceInfo]:
    """``devices`` (ingest's) with the bills' facts about their instances merged into their
    ``tags``, the instance's own tags winning a key — the question the rules are put at ingest;
    what is stored as ``device.tags`` stays what the source said."""
    ids = sorted({d.instance_id for d in devices.values() if d.instance_id})
    if not ids:
        return dict(devices)
    bill = {r: f for r, f in resource_facts(conn, ids, start, end).iter_rows()}
    return {
        k: replace(d, tags=_merged(bill[d.instance_id], d.tags)) if d.instance_id in bill else d
        for k, d in devices.items()
    }


def with_bill_tags_frame(
    conn: Connection, question: pl.DataFrame, start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """``question`` (``reattribute``'s, with ``device_id`` and a ``device_tags`` facts column) with
    the bills' facts about each device's instance merged into ``device_tags``, the device's own
    tags winning a key."""
    if question.is_empty():
        return question
    t = table_of(Device)
    ids = question["device_id"].unique().to_list()
    instance: dict[str, str] = {}
    for first in range(0, len(ids), _CHUNK):
        stmt = select(t.c.device_id, t.c.instance_id).where(
            t.c.device_id.in_(ids[first : first + _CHUNK]), t.c.instance_id.is_not(None)
        )
        instance |= {r[0]: r[1] for r in conn.execute(stmt)}
    if not instance:
        return question
    bill = {r: f for r, f in resource_facts(conn, sorted(set(instance.values())), start, end).iter_rows()}
    if not bill:
        return question
    merged = [
        _merged(bill.get(instance.get(device, "")), {f["key"]: f["value"] for f in own or ()})
        for device, own in question.select("device_id", "device_tags").iter_rows()
    ]
    return question.with_columns(facts_series(merged, "device_tags"))
