"""The GCP billing export's columns, and its flat form read back into them.

The export is nested (BigQuery RECORD and REPEATED fields: ``service.id``, ``credits[]``,
``labels[]``); the connector reads it as one *flat text frame* (:data:`NESTED`: flat column → path
in the record). A flat file — a CSV a query or a tool wrote, a flat Parquet — holds the nested
parts as text in a cell, under the export's own name or a query's ``…_json`` alias, as JSON or as
the Python literal pandas' ``to_csv`` and koku-nise write. :func:`from_flat` decodes every such
cell, so a flat CSV and a JSONL of the same rows give the same lines (tests/billing/
test_gcp_flat_csv.py proves it column by column).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable

import polars as pl

from connectors.billing_io import LINE, require_columns
from connectors.sdk import BillingFileError

#: How ``billing_line.tags`` marks a project label (``project.labels``) beside the resource's own
#: labels; :mod:`service.billing.tags` turns it into ``cloud.project_label:<key>``.
PROJECT_LABEL_TAG = "gcp:project_label:"
LABELS = pl.List(pl.Struct({"key": pl.String(), "value": pl.String()}))
CREDITS = pl.List(pl.Struct({"name": pl.String(), "amount": pl.String(), "type": pl.String()}))

# canonical flat column → path in the nested export record
NESTED: dict[str, tuple[str, ...]] = {
    "billing_account_id": ("billing_account_id",),
    "service_id": ("service", "id"),
    "service_description": ("service", "description"),
    "sku_id": ("sku", "id"),
    "sku_description": ("sku", "description"),
    "usage_start_time": ("usage_start_time",),
    "usage_end_time": ("usage_end_time",),
    "project_id": ("project", "id"),
    "location_region": ("location", "region"),
    "location_zone": ("location", "zone"),
    "resource_name": ("resource", "name"),
    "resource_global_name": ("resource", "global_name"),
    "cost": ("cost",),
    "cost_at_list": ("cost_at_list",),
    "currency": ("currency",),
    "usage_amount": ("usage", "amount"),
    "usage_unit": ("usage", "unit"),
    "usage_amount_in_pricing_units": ("usage", "amount_in_pricing_units"),
    "usage_pricing_unit": ("usage", "pricing_unit"),
    "cost_type": ("cost_type",),
    "invoice_month": ("invoice", "month"),
}
REQUIRED = ("sku_description", "usage_start_time", "usage_end_time", "cost", "currency")


def machine_spec(system_labels: pl.Expr) -> pl.Expr:
    spec = system_labels.list.eval(
        pl.element().filter(pl.element().struct.field("key") == "compute.googleapis.com/machine_spec")
    ).list.first()
    return spec.struct.field("value")


def no_global_name(file: str, column: str) -> None:
    """A resource-level export names each resource by ``resource.global_name`` (the instance id the
    ledger joins on); one that has ``resource.name`` but not it would import every row as cost of
    no resource, so the file is refused. The standard export (no ``resource`` at all) is read: it
    has no resources by design."""
    raise BillingFileError(
        file,
        f'missing column "{column}": a resource-level export names each resource by it (the header is'
        " line 1)",
        line=1,
        column=column,
    )


# --- the flat export: nested columns as text in a cell -----------------------------------------

#: The repeated records of the export a flat file holds as text, by the flat frame's name, with
#: the names files give them (dots already read as ``_``): the export's own name, then a query's
#: ``…_json`` alias.
JSON_CELLS: dict[str, tuple[str, ...]] = {
    "credits": ("credits", "credits_json"),
    "labels": ("labels", "labels_json"),
    "system_labels": ("system_labels", "system_labels_json"),
    "project_labels": ("project_labels", "project_labels_json"),
}
#: Records a flat file may hold whole in one cell (pandas' ``to_csv`` of a query's rows writes a
#: RECORD column so): their fields are read where the file has no column of their own.
RECORD_CELLS = ("service", "sku", "project", "location", "resource", "usage", "invoice")


def from_flat(frame: pl.DataFrame, file: str) -> tuple[pl.DataFrame, dict[str, str]]:
    """A flat export (CSV, flat Parquet) as the flat text frame the checks read, and how the file
    spells each of its columns. Dotted names (``service.id``, ``project.labels``) are read as
    ``service_id``…; every JSON-bearing cell is decoded once per distinct text (:func:`_loads`:
    JSON or a Python literal, numbers kept as their text): credits (``credits`` or
    ``credits_json``: a list of ``{name, amount, type}``, or one such object), labels and system
    labels (a list of ``{key, value}`` or an object of them; the machine type is the
    ``compute.googleapis.com/machine_spec`` system label, else a ``machine_spec`` column), a whole
    record (``resource``: ``{"name": …, "global_name": …}``). A cell that cannot be decoded sets
    ``_<name>_bad`` for the checks."""
    spelled = {c.replace(".", "_"): c for c in reversed(frame.columns) if c != LINE}
    frame = frame.rename({c: c.replace(".", "_") for c in frame.columns})
    frame = frame.with_columns(
        pl.col(c).cast(pl.String) for c in frame.columns if c not in (LINE, "line_key")
    )
    frame, spelled = _record_cells(frame, spelled)
    require_columns(frame, file, REQUIRED)
    if "resource_name" in frame.columns and "resource_global_name" not in frame.columns:
        no_global_name(file, spelled.get("resource_name", "resource_name").replace("name", "global_name"))
    shapes = {
        "credits": (CREDITS, _credit_list),
        "labels": (LABELS, _label_list),
        "system_labels": (LABELS, _label_list),
        "project_labels": (LABELS, _label_list),
    }
    for name, spellings in JSON_CELLS.items():
        source = next((s for s in spellings if s in frame.columns), None)
        dtype, convert = shapes[name]
        if source is None:
            frame = frame.with_columns(
                pl.lit(None, dtype).alias(f"_{name}"), pl.lit(False).alias(f"_{name}_bad")
            )
            continue
        spelled[name] = spelled.get(source, source)
        frame = frame.rename({source: name}) if source != name else frame
        frame = _decode_cells(frame, name, dtype, convert)
    spec = machine_spec(pl.col("_system_labels"))
    if "machine_spec" in frame.columns:
        spec = pl.coalesce(spec, pl.when(pl.col("machine_spec") != "").then(pl.col("machine_spec")))
    frame = frame.with_columns(spec.alias("machine_spec"))
    optional = [*NESTED, "credits_total"]
    frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in optional if c not in frame.columns)
    return frame, spelled


def _record_cells(frame: pl.DataFrame, spelled: dict[str, str]) -> tuple[pl.DataFrame, dict[str, str]]:
    """The fields of a record held whole in one cell (``resource`` = ``{"name": …}``) as the flat
    columns, where the file has no column of their own; one that cannot be decoded sets
    ``_<record>_bad``."""
    for record in RECORD_CELLS:
        if record not in frame.columns:
            continue
        fields = {
            c: p[1] for c, p in NESTED.items() if p[0] == record and len(p) == 2 and c not in frame.columns
        }
        if not fields:
            continue
        dtype = pl.Struct({f: pl.String() for f in fields.values()})
        frame = _decode_cells(frame, record, dtype, _record_of(tuple(fields.values())))
        frame = frame.with_columns(pl.col(f"_{record}").struct.field(f).alias(c) for c, f in fields.items())
        spelled.update({c: f"{spelled.get(record, record)}.{f}" for c, f in fields.items()})
    if "project" in frame.columns and "project_labels" not in frame.columns:
        # the project record's labels, as the text a ``project.labels`` cell would hold
        texts = frame["project"].drop_nulls().unique().to_list()  # decoded once per distinct cell
        table = pl.DataFrame(
            {"project": texts, "project_labels": [_project_labels_text(t) for t in texts]},
            schema={"project": pl.String, "project_labels": pl.String},
        )
        frame = frame.join(table, on="project", how="left", maintain_order="left")
        spelled["project_labels"] = f"{spelled.get('project', 'project')}.labels"
    return frame, spelled


def _project_labels_text(cell: str) -> str | None:
    """A ``project`` record cell's ``labels`` as JSON text (None where the cell is no record: its
    own finding says so)."""
    try:
        record = _loads(cell) if cell.strip() else None
    except (ValueError, TypeError, AttributeError):
        return None
    labels = record.get("labels") if isinstance(record, dict) else None
    return None if labels is None else json.dumps(_label_list(labels))


def _decode_cells(
    frame: pl.DataFrame, column: str, dtype: pl.DataType, convert: Callable[[object], object]
) -> pl.DataFrame:
    """``frame`` with ``_<column>`` (the decoded cell as ``dtype``) and ``_<column>_bad`` (a cell that
    is not empty and cannot be decoded); each distinct text is decoded once (most rows repeat a
    few: ``[]``, a VM's labels)."""
    texts = frame[column].drop_nulls().unique().to_list()
    values, bad = [], []
    for text in texts:
        try:
            values.append(convert(_loads(text)) if text.strip() else None)
            bad.append(False)
        except (ValueError, TypeError, AttributeError):
            values.append(None)
            bad.append(True)
    table = pl.DataFrame(
        {column: texts, f"_{column}": values, f"_{column}_bad": bad},
        schema={column: pl.String, f"_{column}": dtype, f"_{column}_bad": pl.Boolean},
    )
    joined = frame.join(table, on=column, how="left", maintain_order="left")
    return joined.with_columns(pl.col(f"_{column}_bad").fill_null(False))


def _loads(text: str) -> object:
    """A JSON-bearing cell: JSON, else a Python literal (pandas' ``to_csv`` and koku-nise write
    ``[{'amount': -3.2e-05, 'full_name': None}]``). Numbers stay their text (never a float).
    Raises ValueError when it is neither."""
    try:
        return json.loads(text, parse_float=str, parse_int=str)
    except json.JSONDecodeError:
        pass
    try:
        tree = ast.parse(text.strip(), mode="eval")  # parsed, never evaluated
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"neither JSON nor a literal: {exc}") from None
    return _literal(tree.body, text.strip())


def _literal(node: ast.AST, text: str) -> object:
    """A Python literal's syntax tree as the values ``json.loads(parse_float=str)`` gives."""
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, text) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_literal(k, text) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise ValueError("a literal's keys must be text")
        return {k: _literal(v, text) for k, v in zip(keys, node.values, strict=True)}
    number = (
        node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd) else node
    )
    if isinstance(number, ast.Constant):
        value = number.value
        if number is node and (value is None or isinstance(value, str | bool)):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return ast.get_source_segment(text, node)  # the number as written: exact
    raise ValueError(f"not a literal value: {ast.dump(node)[:80]}")


def _records(value: object) -> list[dict[str, object]]:
    """A repeated record's value: a list of objects, or one object where a list belongs."""
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError("not a list of records")
    return items


def _credit_list(value: object) -> list[dict[str, str | None]]:
    return [{k: _text(c.get(k)) for k in ("name", "amount", "type")} for c in _records(value)]


def _label_list(value: object) -> list[dict[str, str | None]]:
    if isinstance(value, dict) and not {"key", "value"} <= set(value):  # {"team": "ml"}
        return [{"key": k, "value": _text(v)} for k, v in value.items()]
    return [{"key": _text(label.get("key")), "value": _text(label.get("value"))} for label in _records(value)]


def _record_of(fields: tuple[str, ...]) -> Callable[[object], dict[str, str | None]]:
    def record(value: object) -> dict[str, str | None]:
        if not isinstance(value, dict):
            raise ValueError("not a record")
        return {f: _text(value.get(f)) for f in fields}

    return record


def _text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)
