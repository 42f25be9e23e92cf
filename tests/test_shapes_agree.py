"""Every place that spells out a device, a workload or the dimensions agrees with
connectors.sdk.shapes, so an attribute or a dimension added in one place only fails here."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

import polars as pl
import pytest
import sqlalchemy as sa
from pydantic import ValidationError
from sqlmodel import AutoString

from connectors.sdk import DeviceInfo, WorkloadInfo
from connectors.sdk.shapes import (
    ATTRIBUTED,
    DEVICE,
    DEVICE_FACTS,
    DIMENSIONS,
    WORKLOAD,
    WORKLOAD_FACTS,
    Attribute,
    names,
)
from service.analytics import devices as analytics_devices
from service.analytics import dims
from service.api import devices as api_devices
from service.api import types as api_types
from service.billing import rates
from service.ledger import ingest, store
from service.models import Device, LedgerDay, LedgerHour, PushedDevice, PushedWorkload
from service.push_batch import DeviceIn, WorkloadIn

SHAPES = [("device", DEVICE), ("workload", WORKLOAD)]
POLARS = {str: pl.String, int: pl.Int64, float: pl.Float64}
LEDGER_ATTRIBUTES = {a.name for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED) if a.ledger}


def _python_type(a: Attribute) -> Any:
    kind: Any = Literal[a.choices] if a.choices else a.kind
    return kind | None if a.nullable else kind


# --- the declaration itself -----------------------------------------------------------------------


def test_declaration_is_consistent() -> None:
    every = [a.name for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED)]
    assert len(every) == len(set(every))
    for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED):
        assert a.kind in POLARS, a.name
        assert (a.max_length is not None) == (a.kind is str), a.name  # every text has a column length
        assert not (a.required and a.default is not None), a.name
    assert [d.name for d in DIMENSIONS] == list(dict.fromkeys(d.name for d in DIMENSIONS))
    assert {d.column for d in DIMENSIONS} <= LEDGER_ATTRIBUTES  # grouped without a join
    # the service's own columns (owner_rule) describe who held the device too
    assert {d.column for d in DIMENSIONS if d.workload} == {
        a.name for a in (*WORKLOAD, *ATTRIBUTED) if a.ledger
    } - {"workload_key"}


# --- the connector contract -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "attributes", "facts"),
    [(DeviceInfo, DEVICE, DEVICE_FACTS), (WorkloadInfo, WORKLOAD, WORKLOAD_FACTS)],
)
def test_sdk_dataclasses(cls: type, attributes: tuple[Attribute, ...], facts: str) -> None:
    *fields, last = dataclasses.fields(cls)
    assert [f.name for f in fields] == list(names(attributes))
    assert last.name == facts and not last.hash and last.default_factory is dict
    hints = typing.get_type_hints(cls)
    for f, a in zip(fields, attributes, strict=True):
        assert hints[f.name] == _python_type(a), f.name
        assert (f.default is dataclasses.MISSING) == a.required, f.name
        if not a.required:
            assert f.default == a.default, f.name


# --- push validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "attributes", "facts"),
    [(DeviceIn, DEVICE, DEVICE_FACTS), (WorkloadIn, WORKLOAD, WORKLOAD_FACTS)],
)
def test_push_models_follow_the_declaration(
    model: Any, attributes: tuple[Attribute, ...], facts: str
) -> None:
    # field order is what content_sha256 hashes: a reordering would turn every replay into a conflict
    assert list(model.model_fields) == [*names(attributes), facts]
    least = {
        a.name: a.choices[0] if a.choices else "x" * max(a.min_length, 1) for a in attributes if a.required
    }
    assert model.model_validate({**least, facts: {"k8s.pod_label:app": "x" * 300}})
    for hostile, why in (
        ({"k": "a\x00b"}, "control characters"),
        ({"": "v"}, "at least 1 character"),
        ({f"k{i}": "v" for i in range(201)}, "at most 200 items"),
        ({"k": "x" * 301}, "at most 300 characters"),
    ):
        with pytest.raises(ValidationError, match=why):
            model.model_validate({**least, facts: hostile})
    least = {
        a.name: a.choices[0] if a.choices else "x" * max(a.min_length, 1) for a in attributes if a.required
    }
    for a in attributes:
        assert model.model_fields[a.name].is_required() == a.required, a.name
        if a.kind is str and not a.choices:
            assert a.max_length is not None
            model.model_validate({**least, a.name: "x" * a.max_length})
            refusals: dict[Any, str] = {
                "x" * (a.max_length + 1): f"String should have at most {a.max_length} characters",
                "a\x00b": "Value error, control characters (U+0000–U+001F, U+007F) are not allowed",
            }
        else:
            refusals = {}
            if a.le is not None:
                refusals[a.le + 1] = f"Input should be less than or equal to {a.le}"
            if a.gt is not None:
                refusals[a.gt] = f"Input should be greater than {a.gt}"
            if a.ge is not None:
                refusals[a.ge - 1] = f"Input should be greater than or equal to {a.ge}"
        for bad, message in refusals.items():
            with pytest.raises(ValidationError) as exc:
                model.model_validate({**least, a.name: a.kind(bad)})
            assert [(e["loc"], e["msg"]) for e in exc.value.errors()] == [((a.name,), message)], a.name


# --- storage -------------------------------------------------------------------------------------------


def _columns(table: Any) -> dict[str, Any]:
    return {c.name: c for c in table.__table__.columns}


def _kind(column: Any) -> type:
    sql = {AutoString: str, sa.String: str, sa.Integer: int, sa.Float: float}
    return next(k for t, k in sql.items() if isinstance(column.type, t))


@pytest.mark.parametrize(
    ("table", "attributes", "others"),
    [
        (Device, DEVICE, {"source", "metrics", "first_seen", "last_seen", DEVICE_FACTS}),
        (PushedDevice, DEVICE, {"agent", "updated_at", DEVICE_FACTS}),
        (PushedWorkload, WORKLOAD, {"agent", "updated_at", WORKLOAD_FACTS}),
    ],
)
def test_description_tables(table: Any, attributes: tuple[Attribute, ...], others: set[str]) -> None:
    columns = _columns(table)
    assert set(columns) - others == set(names(attributes))
    for a in attributes:
        column = columns[a.name]
        assert _kind(column) is a.kind, a.name
        assert getattr(column.type, "length", None) == a.max_length, a.name
        assert column.nullable == (a.nullable and not column.primary_key), a.name


@pytest.mark.parametrize("table", [LedgerHour, LedgerDay])
def test_ledger_tables(table: Any) -> None:
    columns = _columns(table)
    declared = {a.name: a for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED)}
    assert set(columns) & set(declared) == LEDGER_ATTRIBUTES
    for name in LEDGER_ATTRIBUTES:
        a, column = declared[name], columns[name]
        assert _kind(column) is a.kind, name
        assert getattr(column.type, "length", None) == a.max_length, name
        assert column.nullable == a.nullable, name
    # a text column added to the ledger only (a would-be dimension) is not declared
    texts = {n for n, c in columns.items() if getattr(c.type, "length", None)}
    assert texts - LEDGER_ATTRIBUTES == {"source", "default_metric", "currency", "rate_source"}


def test_rollup_keeps_every_ledger_attribute() -> None:
    keys = {"device_id", "workload_key"}  # the rollup groups by these
    assert set(store._DIMENSIONS) == (LEDGER_ATTRIBUTES - keys) | {"source", "default_metric", "rate_source"}


@pytest.mark.parametrize(
    ("schema", "attributes"), [(ingest._DEVICE_SCHEMA, DEVICE), (ingest._WORKLOAD_SCHEMA, WORKLOAD)]
)
def test_polars_schemas(schema: dict[str, Any], attributes: tuple[Attribute, ...]) -> None:
    assert list(schema) == list(names(attributes))
    assert [schema[a.name] for a in attributes] == [POLARS[a.kind] for a in attributes]


# --- analytics and GraphQL -------------------------------------------------------------------------------


def test_analytics_dimensions() -> None:
    assert [(d.name, d.column) for d in dims.Dimension] == [(d.name, d.column) for d in DIMENSIONS]
    assert {d.name for d in dims.WORKLOAD_DIMENSIONS} == {d.name for d in DIMENSIONS if d.workload}
    day = _columns(LedgerDay)
    assert all(d.column in day for d in dims.Dimension)


def test_graphql_dimensions() -> None:
    definition = api_types.Dimension.__strawberry_definition__  # type: ignore[attr-defined]
    values = [(v.name, v.value, v.description) for v in definition.values]
    assert values == [(d.name, d.name, d.description) for d in DIMENSIONS]
    assert [g.domain() for g in api_types.Dimension] == list(dims.Dimension)
    lower = {d.name.lower() for d in DIMENSIONS}  # LedgerFilter.domain and bucket_fields rely on it
    assert {f.name for f in dataclasses.fields(api_types.LedgerFilter)} == lower | {"unallocated"}
    assert {f.name for f in dataclasses.fields(api_types.LedgerBucket)} == lower | {"period_start", "cursor"}


def test_graphql_device() -> None:
    fields = {f.name for f in dataclasses.fields(api_devices.Device)}
    # tdp_w is stored for estimated energy but not (yet) part of the API
    assert fields == (set(names(DEVICE)) - {"tdp_w"}) | {"source", "metrics", "first_seen", "last_seen"}
    filters = [f.name for f in dataclasses.fields(api_devices.DeviceFilter)]
    assert filters == list(analytics_devices.DEVICE_FILTER_COLUMNS)
    assert set(filters) <= set(names(DEVICE)) | {"source"}


# --- billing ------------------------------------------------------------------------------------------


def test_unmonitored_pseudo_device_takes_the_billed_attributes() -> None:
    # as reprice joins them: the bill's attributes, then the owners its tags name (none) and whether
    # the instance itself held its GPU-hours (no)
    resources = pl.DataFrame(
        {"resource": ["i-1"], "provider": ["aws"], "account": ["1"], "region": ["r"],
         "instance_type": ["p5"], "gpu_model": ["H100"], "project": [None], "team": [None],
         "user_name": [None], "owner_rule": [None], "held": [None]},
        schema_overrides={c: pl.String for c in ("project", "team", "user_name", "owner_rule")}
        | {"held": pl.Boolean},
    )  # fmt: skip
    unmonitored = pl.DataFrame(
        {"resource": ["i-1"], "h": [0], "cost": [0], "gap": [0], "currency": ["USD"],
         "source": ["cur"], "rate_source": ["billing:x"]},
        schema_overrides={"h": pl.Int64, "cost": pl.Int128, "gap": pl.Int128},
    )  # fmt: skip
    empty = pl.DataFrame()
    priced = rates._Priced(updates=empty, unmonitored=unmonitored, rates=empty, scale=1, resources=1)
    row = rates._unmonitored_rows(priced, resources)
    described = set(row.columns) & set(names(DEVICE))
    # device_id is made from the resource, gpu_fraction is 1, vendor is the billed gpu_model's: the
    # rest comes from the bill
    assert described - {"device_id", "gpu_fraction", "vendor"} == set(rates.BILLED_DEVICE_ATTRIBUTES)
    assert row["vendor"].to_list() == ["nvidia"]
    assert set(rates.BILLED_DEVICE_ATTRIBUTES) <= set(_columns(Device))
