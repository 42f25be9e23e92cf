"""Lists of flat objects completed column by column.

An aggregate page is a list of up to tens of thousands of objects whose selected fields are all
plain scalars read from attributes. graphql-core completes each object field by field: a resolve
info, a resolver call, an awaitable check and a leaf serialization per field and row — about
half the server's CPU for a large page (profile of issue 13 (b)). :class:`LeafListExecutionContext`
completes such a list in one pass per selected field instead: each field's values read with one
``attrgetter`` over the list, serialized with the field type's own ``serialize``, then zipped into
the row dicts graphql-core would have built (response keys in the same order: aliases, fragments
and ``__typename`` as collected by graphql-core itself).

It takes this path only when every selected field of the list's object type is a scalar or enum
field without arguments, served by strawberry's default attribute resolver (no resolver, no field
extension or permission), no middleware wraps resolvers, nothing is deferred or streamed, every
item passes the type's ``is_type_of``, and no value is null where the type forbids it and no
serialization fails. Otherwise, or for any other list, the list goes through graphql-core's normal
path, which also produces any error exactly as before: the fast path never answers differently,
only sooner (tests/api/test_aggregate_paging.py compares both on the same queries).

A resolver may also return a :class:`ColumnRows`: the page's objects held as columns (an answer
read as a polars frame). Then no object is built at all on this path: each selected field's values
are its column (or the column's wire form, e.g. ISO text for instants, where the resolver made
one), and a column is computed only when a field selects it. Anything that iterates or indexes a
``ColumnRows`` (graphql-core's normal path) gets the objects, built from the same columns.

Where the result is only ever written out as JSON (the HTTP view: its context's ``wire_json``),
such a list is not even turned into row dicts: when every selected field has its values as a
polars series (``ColumnRows(series=…)``), polars writes the list's JSON (``[{key: value…}…]``,
response keys in order) and the list is an :class:`orjson.Fragment` that the view's
``orjson.dumps`` splices into the response as is. In-process callers (``schema.execute``: tests,
anything reading ``result.data``) have no ``wire_json`` and get real lists.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, overload

import orjson
import polars as pl
from graphql import (
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    is_leaf_type,
    is_non_null_type,
)
from graphql.pyutils import Path, Undefined
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

from service.analytics.query import collector_paused

_TYPENAME = "__typename"


class ColumnRows(Sequence[Any]):
    """``length`` objects of the strawberry type ``cls`` held as columns by attribute name.

    ``columns[name]()`` computes the values of attribute ``name`` (called once, when a field
    selects it or an object is built); an attribute without a column reads the class's default
    (the dimensions not grouped by: None). ``wire[name]()``, where given, computes the same values
    already serialized as the field's scalar serializes them (ISO text of instants); the columns
    named in ``plain`` are their own serialized form (text; finite floats), as String and Float
    serialize such values to themselves. ``series[name]()``, where given, computes those
    serialized values as a polars series (None where it cannot), for :meth:`json`.
    """

    def __init__(
        self,
        cls: type,
        length: int,
        columns: Mapping[str, Callable[[], Sequence[Any]]],
        wire: Mapping[str, Callable[[], list[Any]]] | None = None,
        plain: frozenset[str] = frozenset(),
        series: Mapping[str, Callable[[], pl.Series | None]] | None = None,
    ) -> None:
        self.cls = cls
        self._length = length
        self._columns = dict(columns)
        self._wire = dict(wire or {})
        self._plain = plain
        self._series = dict(series or {})
        self._values: dict[str, Sequence[Any]] = {}
        self._objects: list[Any] | None = None

    def __len__(self) -> int:
        return self._length

    def column(self, name: str) -> Sequence[Any]:
        """The values of attribute ``name``, in order."""
        values = self._values.get(name)
        if values is None:
            make = self._columns.get(name)
            values = make() if make is not None else [getattr(self.cls, name)] * self._length
            if len(values) != self._length:
                raise ValueError(f"column {name} has {len(values)} values for {self._length} rows")
            self._values[name] = values
        return values

    def wire(self, name: str) -> list[Any] | None:
        """The serialized values of attribute ``name``, where the resolver made them."""
        make = self._wire.get(name)
        if make is not None:
            return make()
        return list(self.column(name)) if name in self._plain else None

    def json(self, fields: Sequence[tuple[str, str | None, str, bool]]) -> bytes | None:
        """The rows as a JSON array of objects, one member per ``(key, constant, name, non_null)``
        in order: the constant text, else the series of attribute ``name``; None where a field has
        no series, or a null where ``non_null`` (the row path then answers, errors included)."""
        columns: list[pl.Series] = []
        for key, constant, name, non_null in fields:
            if constant is not None:
                values: pl.Series | None = pl.repeat(constant, self._length, dtype=pl.String, eager=True)
            elif name in self._series:
                values = self._series[name]()
            elif name not in self._columns and getattr(self.cls, name, 0) is None:
                values = pl.repeat(None, self._length, dtype=pl.String, eager=True)  # not grouped by
            else:
                values = None
            if values is None or values.len() != self._length or (non_null and values.null_count()):
                return None
            columns.append(values.alias(key))
        sink = io.BytesIO()
        pl.DataFrame(columns).write_json(sink)
        return sink.getvalue()

    def objects(self) -> list[Any]:
        """The objects themselves (each ``__dict__`` holding its own columns' values)."""
        if self._objects is None:
            names = list(self._columns)
            columns = [self.column(name) for name in names]
            new, cls = object.__new__, self.cls
            objects = []
            for values in zip(*columns, strict=True):
                obj: Any = new(cls)
                obj.__dict__ = dict(zip(names, values, strict=True))
                objects.append(obj)
            self._objects = objects if columns else [new(cls) for _ in range(self._length)]
        return self._objects

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.objects()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.objects())


@dataclass(frozen=True)
class _Column:
    """How to compute one response key of every row: read (None: a constant) and serialize;
    ``name``: the attribute read (a :class:`ColumnRows` column)."""

    read: Callable[[Any], Any] | None
    serialize: Callable[[Any], Any] | None
    non_null: bool
    constant: str | None = None
    name: str = ""


@dataclass(frozen=True)
class _Plan:
    keys: tuple[str, ...]
    columns: tuple[_Column, ...]
    is_type_of: Callable[[Any, GraphQLResolveInfo], Any] | None


def _column(object_type: GraphQLObjectType, field_name: str) -> _Column | None:
    if field_name == _TYPENAME:
        return _Column(None, None, True, object_type.name)
    field_def = object_type.fields.get(field_name)
    if field_def is None or field_def.args:
        return None
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    basic = (
        isinstance(definition, StrawberryField)
        and definition.is_basic_field
        and definition.default_resolver is getattr
        and getattr(field_def.resolve, "_is_default", False)
    )
    if not basic:
        return None
    assert isinstance(definition, StrawberryField)  # for mypy: checked above
    non_null = is_non_null_type(field_def.type)
    leaf = field_def.type.of_type if isinstance(field_def.type, GraphQLNonNull) else field_def.type
    if not is_leaf_type(leaf):
        return None
    name = definition.python_name
    return _Column(attrgetter(name), leaf.serialize, non_null, name=name)


def _values(column: _Column, items: Sequence[Any]) -> list[Any] | None:
    """The serialized values of ``column`` for ``items``, or None where the normal path must run."""
    if column.read is None:
        return [column.constant] * len(items)
    if isinstance(items, ColumnRows):
        wire = items.wire(column.name)
        if wire is not None and not (column.non_null and None in wire):
            return wire
        raw = list(items.column(column.name))
    else:
        raw = list(map(column.read, items))
    serialize = column.serialize
    assert serialize is not None  # a read column always has one
    try:
        if None not in raw:
            out = list(map(serialize, raw))
        elif column.non_null:
            return None  # the normal path raises the non-null error
        else:
            out = [None if v is None else serialize(v) for v in raw]
    except Exception:  # noqa: BLE001  (the normal path raises it, located, as usual)
        return None
    # graphql-core refuses a serializer's None/Undefined for a present value: so does this.
    for value, result in zip(raw, out, strict=True):
        if value is not None and (result is None or result is Undefined):
            return None
    return out


class LeafListExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """strawberry's execution context with column-wise completion of flat object lists."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._leaf_plans: dict[tuple[int, int], tuple[Any, _Plan | None]] = {}

    def complete_iterable_value(  # noqa: PLR0917
        self,
        item_type: GraphQLOutputType,
        field_details_list: Any,
        info: GraphQLResolveInfo,
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> Any:
        if isinstance(items, list | ColumnRows) and len(items) > 1:
            plan = self._plan(item_type, field_details_list, path)
            rows = None if plan is None else self._complete(plan, items, info)
            if rows is not None:
                return rows
        if isinstance(items, ColumnRows):
            items = items.objects()
        return super().complete_iterable_value(
            item_type, field_details_list, info, path, items, position_context
        )

    def _plan(self, item_type: GraphQLOutputType, field_details_list: Any, path: Path) -> _Plan | None:
        # Memoized like collect_subfields: on the identity of the field list, kept alive with it.
        key = (id(item_type), id(field_details_list))
        cached = self._leaf_plans.get(key)
        if cached is not None:
            return cached[1]
        plan = self._make_plan(item_type, field_details_list, path)
        self._leaf_plans[key] = (field_details_list, plan)
        return plan

    def _make_plan(self, item_type: GraphQLOutputType, field_details_list: Any, path: Path) -> _Plan | None:
        middleware = self.middleware_manager
        if middleware is not None and middleware.middlewares:
            return None
        if self.get_stream_usage(field_details_list, path) is not None:
            return None
        object_type = item_type.of_type if isinstance(item_type, GraphQLNonNull) else item_type
        if not isinstance(object_type, GraphQLObjectType):
            return None
        grouped_field_set, new_defer_usages, *_ = self.collect_subfields(object_type, field_details_list)
        if new_defer_usages:
            return None
        keys: list[str] = []
        columns: list[_Column] = []
        for response_key, sub_fields in grouped_field_set.items():
            nodes = [d.node for d in sub_fields]
            if any(getattr(d, "defer_usage", None) is not None for d in sub_fields):
                return None
            column = _column(object_type, nodes[0].name.value)
            if column is None:
                return None
            keys.append(response_key)
            columns.append(column)
        return _Plan(tuple(keys), tuple(columns), object_type.is_type_of)

    @staticmethod
    @collector_paused
    def _complete(plan: _Plan, items: Sequence[Any], info: GraphQLResolveInfo) -> list[Any] | None:
        is_type_of = plan.is_type_of
        if isinstance(items, ColumnRows):  # one class: the first object stands for all of them
            if is_type_of is not None and is_type_of(object.__new__(items.cls), info) is not True:
                return None
        elif any(item is None for item in items):
            return None  # the normal path: a non-null error, or null items of a nullable list
        elif is_type_of is not None and not all(is_type_of(item, info) is True for item in items):
            return None
        if isinstance(items, ColumnRows) and getattr(info.context, "wire_json", False):
            fields = [
                (k, c.constant, c.name, c.non_null) for k, c in zip(plan.keys, plan.columns, strict=True)
            ]
            text = items.json(fields)
            if text is not None:
                # written out by the view's orjson.dumps as is (only the HTTP view sets wire_json)
                return orjson.Fragment(text)  # type: ignore[return-value]
        columns = []
        for column in plan.columns:
            values = _values(column, items)
            if values is None:
                return None
            columns.append(values)
        keys = plan.keys
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
