"""An in-process fake of the BigQuery REST API (v2) on 127.0.0.1, for tests of the real
``google-cloud-bigquery`` client over HTTP.

It implements the calls ``Client.get_table`` and ``Client.query(...).result()`` make:

* ``GET  /bigquery/v2/projects/{p}/datasets/{d}/tables/{t}`` — tables.get (schema, partitioning);
* ``POST /bigquery/v2/projects/{p}/jobs`` — jobs.insert of a query job, answered ``DONE``;
* ``GET  /bigquery/v2/projects/{p}/jobs/{id}`` — jobs.get;
* ``GET  /bigquery/v2/projects/{p}/queries/{id}`` — getQueryResults: ``maxResults`` rows from
  ``startIndex`` or ``pageToken`` (the next row's offset), ``totalRows``, the result schema.

It evaluates the subset of standard SQL a billing query is written in, and refuses anything else
with 400 ``invalidQuery`` (as BigQuery would refuse a query it cannot parse):
``SELECT item, … FROM `p.d.t` WHERE cond AND …`` where an item is ``path AS name``,
``CAST(CAST(path AS NUMERIC) AS STRING) AS name`` (the double rounded half away from zero to 9
decimals, rendered as plain decimal text), ``STRUCT(item, …) AS name`` or ``ARRAY(SELECT AS
STRUCT item, … FROM UNNEST(col) AS x WITH OFFSET AS o ORDER BY o) AS name``; a condition is
``usage_start_time >= @p``, ``usage_start_time < @p`` or ``_PARTITIONTIME >= TIMESTAMP_SUB(@p,
INTERVAL n DAY)`` (a row's partition is the UTC day of its ``export_time``). Named ``TIMESTAMP``
parameters come from the job's ``queryParameters``. A column or field the table does not have is
400 ``invalidQuery`` ("Unrecognized name").

Rows are held as the export's JSON records with numbers kept as their text
(``json.loads(parse_float=str)``) and cells go out in the REST row format: ``{"f": [{"v": …}]}``,
a RECORD as ``{"v": {"f": […]}}``, a REPEATED field as ``{"v": [{"v": …}, …]}``, a TIMESTAMP as
integer microseconds text (the client asks ``formatOptions.useInt64Timestamp``), FLOAT as text.

A test can make the next calls (or every call) fail: ``fail_next`` / ``fail_always`` hold
``(route, status, reason, message)`` with route one of ``tables.get``, ``jobs.insert``,
``jobs.get``, ``getQueryResults`` or ``*``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import ROUND_HALF_UP, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Failure = tuple[str, int, str, str]
_ROUTES = [
    ("GET", r"/projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)", "tables.get"),
    ("POST", r"/projects/([^/]+)/jobs", "jobs.insert"),
    ("GET", r"/projects/([^/]+)/jobs/([^/]+)", "jobs.get"),
    ("GET", r"/projects/([^/]+)/queries/([^/]+)", "getQueryResults"),
]
_ARRAY = re.compile(
    r"ARRAY\(SELECT AS STRUCT (.+) FROM UNNEST\((\w+)\) AS (\w+) WITH OFFSET AS (\w+) ORDER BY \4\) AS (\w+)"
)
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
_STATUS.update({429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"})


class QueryError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class FakeTable:
    """``schema``: BigQuery's JSON schema (``[{"name", "type", "mode", "fields"}]``); ``rows``: the
    export's records (numbers as text). ``partitioned``: ingestion-time partitioned by day."""

    def __init__(self, schema: list[dict[str, Any]], rows: list[dict[str, Any]], *, partitioned: bool = True):
        self.schema, self.rows, self.partitioned = schema, rows, partitioned


class FakeBigQuery:
    def __init__(self, tables: dict[str, FakeTable]) -> None:
        self.tables = tables
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []  # (route, path, query params)
        self.queries: list[dict[str, Any]] = []  # the jobs.insert bodies
        self.fail_next: list[Failure] = []
        self.fail_always: Failure | None = None
        self._lock = threading.Lock()

    # --- routing -------------------------------------------------------------------------------

    def handle(self, method: str, url: str, body: bytes) -> tuple[int, dict[str, Any]]:
        parsed = urlparse(url)
        params = parse_qs(parsed.query)
        path = parsed.path.removeprefix("/bigquery/v2")
        found = next(
            (
                (route, m)
                for verb, pattern, route in _ROUTES
                if verb == method and (m := re.fullmatch(pattern, path))
            ),
            None,
        )
        if found is None:
            return _error(404, "notFound", f"fake BigQuery: no route {method} {path}")
        route, match = found
        with self._lock:
            self.requests.append((route, path, params))
            failure = next((f for f in self.fail_next if f[0] in (route, "*")), None)
            if failure is not None:
                self.fail_next.remove(failure)
            elif self.fail_always is not None and self.fail_always[0] in (route, "*"):
                failure = self.fail_always
        if failure is not None:
            return _error(*failure[1:])
        try:
            if route == "tables.get":
                return 200, self._table(*match.groups())
            if route == "jobs.insert":
                return 200, self._insert(match.group(1), json.loads(body))
            job = self.jobs.get(match.group(2))
            if job is None:
                return _error(404, "notFound", f"Not found: Job {match.group(1)}:{match.group(2)}")
            if route == "jobs.get":
                return 200, job["resource"]
            return 200, self._results(job, params)
        except QueryError as exc:
            return _error(exc.status, exc.reason, exc.message)

    def _table(self, project: str, dataset: str, table: str) -> dict[str, Any]:
        found = self.tables.get(f"{project}.{dataset}.{table}")
        if found is None:
            raise QueryError(404, "notFound", f"Not found: Table {project}:{dataset}.{table}")
        resource: dict[str, Any] = {
            "kind": "bigquery#table",
            "id": f"{project}:{dataset}.{table}",
            "tableReference": {"projectId": project, "datasetId": dataset, "tableId": table},
            "schema": {"fields": found.schema},
            "numRows": str(len(found.rows)),
            "type": "TABLE",
            "location": "US",
        }
        if found.partitioned:
            resource["timePartitioning"] = {"type": "DAY"}
        return resource

    def _insert(self, project: str, body: dict[str, Any]) -> dict[str, Any]:
        self.queries.append(body)
        query = body["configuration"]["query"]
        if query.get("useLegacySql", True):
            raise QueryError(400, "invalidQuery", "fake BigQuery speaks standard SQL only")
        values = {
            p["name"]: _timestamp(p["parameterValue"]["value"])
            for p in query.get("queryParameters", [])
            if p["parameterType"]["type"] == "TIMESTAMP"
        }
        schema, rows = self._run(query["query"], values)
        job_id = body.get("jobReference", {}).get("jobId") or uuid.uuid4().hex
        reference = {"projectId": project, "jobId": job_id, "location": "US"}
        resource = {
            "kind": "bigquery#job",
            "id": f"{project}:US.{job_id}",
            "jobReference": reference,
            "configuration": body["configuration"],
            "status": {"state": "DONE"},
            "statistics": {"query": {"totalBytesProcessed": "0"}},
        }
        self.jobs[job_id] = {"resource": resource, "schema": schema, "rows": rows}
        return resource

    def _results(self, job: dict[str, Any], params: dict[str, list[str]]) -> dict[str, Any]:
        rows = job["rows"]
        start = int(params.get("pageToken", params.get("startIndex", ["0"]))[0])
        size = int(params.get("maxResults", ["100000"])[0])
        page = rows[start : start + size]
        answer: dict[str, Any] = {
            "kind": "bigquery#getQueryResultsResponse",
            "jobReference": job["resource"]["jobReference"],
            "jobComplete": True,
            "schema": {"fields": job["schema"]},
            "totalRows": str(len(rows)),
        }
        if size > 0:
            answer["rows"] = page
            if start + size < len(rows):
                answer["pageToken"] = str(start + size)
        return answer

    # --- the SQL subset ------------------------------------------------------------------------

    def _run(self, sql: str, values: dict[str, dt.datetime]) -> tuple[list[dict[str, Any]], list[Any]]:
        sql = " ".join(sql.split())
        match = re.fullmatch(r"SELECT (.+) FROM `([^`]+)` WHERE (.+)", sql)
        if match is None:
            raise QueryError(400, "invalidQuery", f"fake BigQuery cannot parse: {sql[:200]}")
        items, table_id, where = match.groups()
        table = self.tables.get(table_id)
        if table is None:
            raise QueryError(404, "notFound", f"Not found: Table {table_id.replace('.', ':', 1)}")
        conditions = [self._condition(c, values) for c in where.split(" AND ")]
        selected = [_Item.parse(text, {f["name"]: f for f in table.schema}) for text in _split(items)]
        schema = [item.field for item in selected]
        rows = []
        for record in table.rows:
            if all(cond(record) for cond in conditions):
                rows.append({"f": [item.cell(record) for item in selected]})
        return schema, rows

    def _condition(self, text: str, values: dict[str, dt.datetime]) -> Any:
        def param(name: str) -> dt.datetime:
            if name not in values:
                raise QueryError(400, "invalidQuery", f"Query parameter '{name}' not found")
            return values[name]

        if m := re.fullmatch(r"usage_start_time (>=|<) @(\w+)", text):
            bound = param(m.group(2))
            if m.group(1) == ">=":
                return lambda r: _timestamp(r["usage_start_time"]) >= bound
            return lambda r: _timestamp(r["usage_start_time"]) < bound
        if m := re.fullmatch(r"_PARTITIONTIME >= TIMESTAMP_SUB\(@(\w+), INTERVAL (\d+) DAY\)", text):
            floor = param(m.group(1)) - dt.timedelta(days=int(m.group(2)))

            def partition(r: dict[str, Any]) -> bool:
                exported = _timestamp(r["export_time"])
                return exported.replace(hour=0, minute=0, second=0, microsecond=0) >= floor

            return partition
        raise QueryError(400, "invalidQuery", f"fake BigQuery cannot evaluate the condition {text!r}")


class _Item:
    """One select item: its result schema field and how to compute its cell from a record."""

    def __init__(self, field: dict[str, Any], value: Any) -> None:
        self.field, self.value = field, value

    def cell(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"v": _render(self.field, self.value(record))}

    @classmethod
    def parse(cls, text: str, scope: dict[str, dict[str, Any]]) -> _Item:
        if m := _ARRAY.fullmatch(text):
            inner, column, var, _, name = m.groups()
            source = _lookup(scope, column)
            if source.get("mode") != "REPEATED" or source["type"] != "RECORD":
                raise QueryError(400, "invalidQuery", f"Values referenced in UNNEST must be arrays: {column}")
            items = [cls.parse(t, {var: {**source, "mode": "NULLABLE"}}) for t in _split(inner)]
            field = {"name": name, "type": "RECORD", "mode": "REPEATED", "fields": [i.field for i in items]}
            return cls(
                field,
                lambda r: [{i.field["name"]: i.value({var: e}) for i in items} for e in r.get(column) or []],
            )
        if m := re.fullmatch(r"STRUCT\((.+)\) AS (\w+)", text):
            items = [cls.parse(t, scope) for t in _split(m.group(1))]
            field = {
                "name": m.group(2),
                "type": "RECORD",
                "mode": "NULLABLE",
                "fields": [i.field for i in items],
            }
            return cls(field, lambda r: {i.field["name"]: i.value(r) for i in items})
        if m := re.fullmatch(r"CAST\(CAST\(([\w.]+) AS NUMERIC\) AS STRING\) AS (\w+)", text):
            source = _lookup(scope, m.group(1))
            if source["type"] not in ("FLOAT", "FLOAT64", "NUMERIC", "INTEGER", "INT64"):
                raise QueryError(400, "invalidQuery", f"Invalid cast from {source['type']} to NUMERIC")
            path = m.group(1).split(".")
            return cls(
                {"name": m.group(2), "type": "STRING", "mode": "NULLABLE"}, lambda r: _numeric(_get(r, path))
            )
        if m := re.fullmatch(r"([\w.]+) AS (\w+)", text):
            source = _lookup(scope, m.group(1))
            path = m.group(1).split(".")
            return cls({**source, "name": m.group(2)}, lambda r: _get(r, path))
        raise QueryError(400, "invalidQuery", f"fake BigQuery cannot evaluate {text!r}")


def _split(text: str) -> list[str]:
    """Comma-separated items at parenthesis depth 0."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    return items


def _lookup(scope: dict[str, dict[str, Any]], path: str) -> dict[str, Any]:
    names = path.split(".")
    field = scope.get(names[0])
    for name in names[1:]:
        if field is None or field["type"] != "RECORD" or field.get("mode") == "REPEATED":
            field = None
            break
        field = next((f for f in field["fields"] if f["name"] == name), None)
    if field is None:
        raise QueryError(400, "invalidQuery", f"Unrecognized name: {path}")
    return field


def _get(record: dict[str, Any] | None, path: list[str]) -> Any:
    value: Any = record
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _numeric(text: Any) -> str | None:
    if text is None:
        return None
    exact = Decimal(float(text))  # a FLOAT64 cell holds the double, not the export's text
    rounded = exact.quantize(Decimal("1e-9"), rounding=ROUND_HALF_UP)
    plain = format(rounded.normalize(), "f")
    return plain if plain != "-0" else "0"


def _timestamp(text: str) -> dt.datetime:
    text = text.strip().removesuffix(" UTC").replace("T", " ").replace("Z", "+00:00")
    moment = dt.datetime.fromisoformat(text)
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def _render(field: dict[str, Any], value: Any) -> Any:
    if field.get("mode") == "REPEATED":
        element = {**field, "mode": "NULLABLE"}
        return [{"v": _render(element, v)} for v in value or []]
    if value is None:
        return None
    if field["type"] == "RECORD":
        return {"f": [{"v": _render(f, value.get(f["name"]))} for f in field["fields"]]}
    if field["type"] == "TIMESTAMP":
        moment = _timestamp(value)
        return str((moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1))
    if field["type"] == "BOOLEAN":
        return "true" if value in (True, "true") else "false"
    return str(value)


def _error(status: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    errors = [{"message": message, "domain": "global", "reason": reason}]
    return status, {
        "error": {"code": status, "message": message, "errors": errors, "status": _STATUS.get(status, "")}
    }


def schema_of(records: list[dict[str, Any]], floats: set[str], timestamps: set[str]) -> list[dict[str, Any]]:
    """A BigQuery schema for ``records`` (the export's shape): dicts are RECORD, lists REPEATED,
    paths in ``floats`` FLOAT, in ``timestamps`` TIMESTAMP, everything else STRING."""

    def fields(values: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
        names: dict[str, list[Any]] = {}
        for value in values:
            for name, item in value.items():
                names.setdefault(name, []).append(item)
        out = []
        for name, items in names.items():
            path = prefix + name
            present = [i for i in items if i is not None]
            repeated = any(isinstance(i, list) for i in present)
            flat = [e for i in present for e in (i if isinstance(i, list) else [i])]
            if flat and all(isinstance(e, dict) for e in flat):
                field = {"name": name, "type": "RECORD", "fields": fields(flat, path + ".")}
            elif path in floats:
                field = {"name": name, "type": "FLOAT"}
            elif path in timestamps:
                field = {"name": name, "type": "TIMESTAMP"}
            else:
                field = {"name": name, "type": "STRING"}
            field["mode"] = "REPEATED" if repeated else "NULLABLE"
            out.append(field)
        return out

    return fields(records, "")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeBigQuery

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.fake.handle(method, self.path, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the request log
        return


@contextmanager
def serve(fake: FakeBigQuery) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1; yields the endpoint (``http://127.0.0.1:PORT``)."""
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
