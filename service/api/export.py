"""``GET /export/{question}.{format}``: an analytic answer as an Arrow IPC stream, Parquet or CSV.

``question`` is a name of :data:`service.export.questions.QUESTIONS` (``usage``, ``cost``,
``idle-waste``, ``effective-cost``), ``format`` one of :class:`service.export.formats.Format`;
the query parameters are the GraphQL field's arguments (:mod:`service.export.arguments`), plus
``compression=lz4|zstd`` for an Arrow stream whose buffers the reader can decompress (polars,
pyarrow; default ``uncompressed``, which every Arrow reader takes).

The same limits as ``/graphql``, answered as HTTP statuses with the body
``{"error": message, "code": CODE, "parameter": name or null}``:

* a caller (the auth middleware: 401 without one) with a read scope (403 ``FORBIDDEN``); a
  project- or team-scoped caller gets the rows of its scope, exactly as through GraphQL (the
  query is built under its ``Access``);
* 400 for an argument to change (``INVALID_ARGUMENT``, ``INVALID_WINDOW``, ``WINDOW_NOT_ALIGNED``,
  ``WINDOW_TOO_LARGE``, ``UNSUPPORTED_THRESHOLD``, ``UNKNOWN_CURRENCY``), naming it; 404
  ``NOT_FOUND`` for an unknown question or format; 422 ``MISSING_FX_RATE``;
* 413 ``RESULT_TOO_LARGE`` above ``export_max_rows`` rows (default 5,000,000; GraphQL's
  ``max_result_rows`` does not apply: an export is for big answers);
* 504 ``QUERY_TIMEOUT`` when its SQL runs past ``[limits] request_timeout_s``;
* 429 ``RATE_LIMITED`` / 503 ``OVERLOADED`` (with ``Retry-After``) under the ``[limits]`` rate and
  concurrency caps. Exports have their own token buckets and query slots, with GraphQL's values.

The SQL runs in the threadpool under the request's deadline, the file is written into memory in
the threadpool too, and the response streams it out in chunks: the event loop never waits on
either.
"""

from __future__ import annotations

import io
import logging
import math
import time
from collections.abc import Iterator

import polars as pl
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from service.analytics.errors import QueryError
from service.api.context import ApiContext
from service.api.errors import clip
from service.api.graphql import caller_key
from service.auth.principal import principal_of
from service.export.arguments import COMPRESSION, ParameterError, arrow_compression, parse_args
from service.export.formats import Format, IpcCompression
from service.export.questions import QUESTIONS, ExportContext, export_frame, parameter_of
from service.limits.gate import ConcurrencyGate, Overloaded
from service.limits.rate import RateLimiter
from service.settings import Settings

log = logging.getLogger("gpu_ledger.export")

PATH = "/export/{question}.{format}"
#: Bytes per chunk of a streamed response.
CHUNK_B = 1 << 20

#: HTTP status of each refusal code (any other QueryError: 400).
STATUS = {
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "RESULT_TOO_LARGE": 413,
    "MISSING_FX_RATE": 422,
    "QUERY_TIMEOUT": 504,
}


TIMEOUT_MESSAGE = (
    "the export's query stopped after the time limit of {:g} s: narrow the window or the groupBy, "
    "or run `gpu-ledger export` next to the database (no time limit)"
)


def export_paths() -> frozenset[str]:
    """Every path an export answers (the HTTP metrics' route labels: a finite set)."""
    return frozenset(f"/export/{q.name}.{f.value}" for q in QUESTIONS.values() for f in q.formats)


def refusal(status: int, code: str, message: str, parameter: str | None = None, **headers: str) -> Response:
    body = {"error": clip(message), "code": code, "parameter": parameter}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _chunks(data: memoryview) -> Iterator[memoryview]:
    # slices of the written file, not copies of them
    for at in range(0, len(data), CHUNK_B):
        yield data[at : at + CHUNK_B]


def export_route(engine: Engine, settings: Settings) -> Route:
    """The export endpoint on ``engine`` under ``settings`` (limits, window, row cap, threshold)."""
    api_settings = settings.api_settings()
    limits = settings.limits
    rate = RateLimiter(limits.rate_per_minute, limits.rate_burst)
    gate = ConcurrencyGate(limits.max_concurrent_queries, limits.queue_wait_s)
    context = ExportContext(ledger_threshold_pct=settings.idle_threshold_pct, planning=api_settings.planning)

    async def export(request: Request) -> Response:
        principal = principal_of(request.scope)
        if not principal.can_read:
            return refusal(
                403, "FORBIDDEN", "this needs a read scope (read, read:project:NAME or read:team:NAME)"
            )
        wait_s = rate.take(caller_key(request.scope))
        if wait_s > 0:
            retry_s = str(max(1, math.ceil(wait_s)))
            message = f"more than {limits.rate_per_minute} requests a minute: retry in {retry_s} s"
            return refusal(429, "RATE_LIMITED", message, **{"Retry-After": retry_s})
        name, extension = request.path_params["question"], request.path_params["format"]
        question, fmt = QUESTIONS.get(name), Format.named(extension)
        if question is None:
            known = ", ".join(QUESTIONS)
            return refusal(404, "NOT_FOUND", f"no export named {name!r}; there are {known}", "question")
        if fmt is None or fmt not in question.formats:
            known = ", ".join(f.value for f in Format if f in question.formats)
            message = f"no {question.name} export as {extension!r}; there are {known}"
            return refusal(404, "NOT_FOUND", message, "format")
        params = {key: request.query_params.getlist(key) for key in request.query_params}
        try:
            compression = arrow_compression(params.pop(COMPRESSION, []), fmt)
            args = parse_args(
                question, params, access=principal.access, max_window_days=settings.max_window_days
            )
            async with gate.slot():
                ctx = ApiContext(engine, api_settings, request)
                ctx.deadline = time.monotonic() + limits.request_timeout_s
                frame = await ctx.read(
                    lambda conn: export_frame(
                        conn, question, args, context, max_rows=settings.export_max_rows
                    )
                )
                data, rows = await run_in_threadpool(_encode, frame, fmt, compression), frame.height
        except ParameterError as exc:
            return refusal(STATUS.get(exc.code, 400), exc.code, exc.message, exc.parameter)
        except QueryError as exc:
            message = (
                TIMEOUT_MESSAGE.format(limits.request_timeout_s)
                if exc.code == "QUERY_TIMEOUT"
                else exc.message
            )
            return refusal(STATUS.get(exc.code, 400), exc.code, message, parameter_of(exc))
        except Overloaded as exc:
            return refusal(503, "OVERLOADED", str(exc), **{"Retry-After": str(exc.retry_after_s)})
        except Exception:  # a bug: logged with its traceback, never shown
            log.exception("export %s.%s failed", name, extension)
            return refusal(500, "INTERNAL", "internal error")
        headers = {
            "Content-Disposition": f'attachment; filename="{question.name}.{fmt.value}"',
            "Content-Length": str(len(data)),
            "X-Export-Rows": str(rows),
        }
        return StreamingResponse(_chunks(data), media_type=fmt.media_type, headers=headers)

    return Route(PATH, export, methods=["GET"])


def _encode(frame: pl.DataFrame, fmt: Format, compression: IpcCompression) -> memoryview:
    sink = io.BytesIO()
    fmt.write(frame, sink, compression=compression)
    return sink.getbuffer()  # the written bytes themselves (getvalue() would copy them)
