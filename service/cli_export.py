"""``gpu-ledger export QUESTION``: an analytic answer written to a file, read straight from the
database with full access (like the other commands), no row cap and no time limit.

The options are the endpoint's query parameters (``GET /export/{question}.{format}``) under CLI
names, and go through the same checks (:mod:`service.export.arguments`), so a file written here
equals the endpoint's answer for an unrestricted caller byte for byte. Imported by
``service.cli`` at start-up: nothing heavy is imported before the command runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli_options import ConfigOpt, MetricOpt

#: CLI option of each parameter, for error messages.
OPTIONS = {
    "start": "--start",
    "end": "--end",
    "granularity": "--granularity",
    "groupBy": "--group-by",
    "metric": "--metric",
    "idlePolicy": "--idle-policy",
    "currency": "--currency",
    "thresholdPct": "--threshold-pct",
    "fields": "--fields",
    "format": "--format",
    "focusVersion": "--focus-version",
    "allocationPct": "--allocation-pct",
    "utilizationPct": "--utilization-pct",
    "timeZone": "--time-zone",
    "compression": "--compression",
}


def export_command(
    question: Annotated[
        str,
        typer.Argument(
            help="usage, cost, idle-waste, effective-cost, break-even, heatmap or focus.",
            show_default=False,
        ),
    ],
    start: Annotated[str, typer.Option(help="Window start, ISO 8601 with offset, a whole UTC hour.")],
    end: Annotated[str, typer.Option(help="Window end (exclusive), a whole UTC hour.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write (replaced atomically).")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="arrow, parquet or csv (default: from the --output suffix).", show_default=False
        ),
    ] = None,
    granularity: Annotated[
        str | None, typer.Option(help="HOUR, DAY, WEEK, MONTH or TOTAL (default TOTAL).", show_default=False)
    ] = None,
    group_by: Annotated[
        list[str] | None,
        typer.Option(
            "--group-by",
            help="Dimension(s) to group by: repeat it or separate by commas.",
            show_default=False,
        ),
    ] = None,
    metric: MetricOpt = None,
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="KEY=VALUE, repeatable: keep rows whose KEY (environment, project, gpuModel, …) is one of "
            "the VALUEs given; unallocated=true|false.",
            show_default=False,
        ),
    ] = None,
    idle_policy: Annotated[
        str | None,
        typer.Option(
            "--idle-policy", help="cost: SEPARATE, SHARE_BY_USAGE or SHARE_EVENLY.", show_default=False
        ),
    ] = None,
    currency: Annotated[
        str | None,
        typer.Option(help="Money answers: convert to this ISO 4217 currency.", show_default=False),
    ] = None,
    threshold_pct: Annotated[
        str | None, typer.Option("--threshold-pct", help="idle-waste: idle below this %.", show_default=False)
    ] = None,
    fields: Annotated[
        str | None, typer.Option(help="Columns to write, comma-separated (default all).", show_default=False)
    ] = None,
    focus_version: Annotated[
        str | None,
        typer.Option(
            "--focus-version", help="focus: FOCUS version 1.0 or 1.2 (default 1.2).", show_default=False
        ),
    ] = None,
    allocation_pct: Annotated[
        str | None,
        typer.Option(
            "--allocation-pct", help="break-even: what if allocated this % of hours.", show_default=False
        ),
    ] = None,
    utilization_pct: Annotated[
        str | None,
        typer.Option(
            "--utilization-pct", help="break-even: what if busy this % of allocated time.", show_default=False
        ),
    ] = None,
    time_zone: Annotated[
        str | None,
        typer.Option("--time-zone", help="heatmap: IANA time zone (e.g. Europe/Berlin).", show_default=False),
    ] = None,
    compression: Annotated[
        str | None,
        typer.Option(
            "--compression",
            help="arrow: compress the stream's buffers with lz4 or zstd (readers without codecs, "
            "such as arrow-js, need the default: uncompressed).",
            show_default=False,
        ),
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Write an analytic answer (as GET /export/QUESTION.FORMAT answers it) to a file."""
    from service.cli import fail

    extension = fmt or output.suffix.lstrip(".")
    params: dict[str, list[str]] = {"start": [start], "end": [end]}
    given = {
        "granularity": granularity,
        "metric": metric,
        "idlePolicy": idle_policy,
        "currency": currency,
        "thresholdPct": threshold_pct,
        "fields": fields,
        "focusVersion": focus_version,
        "allocationPct": allocation_pct,
        "utilizationPct": utilization_pct,
        "timeZone": time_zone,
    }
    params.update({k: [v] for k, v in given.items() if v is not None})
    if group_by is not None:
        params["groupBy"] = list(group_by)
    for item in filters or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise fail(f"--filter {item!r}: expected KEY=VALUE (e.g. project=llm, gpuModel=H100)")
        params.setdefault(key.strip(), []).append(value)
    _run(question, extension, params, output, config, fail, [] if compression is None else [compression])


def _run(
    name: str,
    extension: str,
    params: dict[str, list[str]],
    output: Path,
    config: Path | None,
    fail: Any,
    compression: list[str],
) -> None:
    from rich.console import Console
    from sqlalchemy.exc import SQLAlchemyError

    from service.analytics.access import ALL
    from service.analytics.errors import QueryError
    from service.analytics.window import pruned_hours_refused
    from service.cli import FAILURE_EXIT, _settings, database_failed
    from service.db import make_engine
    from service.export.arguments import ParameterError, arrow_compression, parse_args
    from service.export.formats import Format
    from service.export.questions import QUESTIONS, ExportContext, export_frame, parameter_of

    question = QUESTIONS.get(name)
    if question is None:
        raise fail(f"no export named {name!r}; there are {', '.join(QUESTIONS)}")
    fmt = Format.named(extension)
    if fmt is None or fmt not in question.formats:
        formats = ", ".join(f.value for f in Format if f in question.formats)
        raise fail(f"--format {extension!r}: use one of {formats} (or an --output ending in one)")
    settings = _settings(config)
    try:
        codec = arrow_compression(compression, fmt)
        args = parse_args(question, params, access=ALL, max_window_days=settings.max_window_days)
        question.columns_of(args)  # the question's own checks (focus: its version), before connecting
    except ParameterError as exc:
        raise fail(f"{_option(exc.parameter)}{exc.message}") from None
    context = ExportContext(ledger_threshold_pct=settings.idle_threshold_pct, planning=settings.planning())
    console = Console(stderr=True)
    engine = make_engine(settings.database_url)
    try:
        querying = console.status(f"export {question.name}: querying {settings.database_url_masked}")
        # over pruned hours a device-level answer fails (HOURS_PRUNED) as the endpoint's does
        with querying, engine.connect() as conn, pruned_hours_refused(conn):
            frame = export_frame(conn, question, args, context, max_rows=None)
        with console.status(f"export {question.name}: writing {frame.height} rows to {output}"):
            _write_atomically(frame, fmt, output, codec)
    except QueryError as exc:
        code = 2 if exc.code.startswith(("INVALID", "UNKNOWN", "UNSUPPORTED", "WINDOW")) else FAILURE_EXIT
        raise fail(f"{_option(parameter_of(exc))}{exc.code}: {exc.message}", code) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    except OSError as exc:
        raise fail(f"{output}: {exc.strerror or exc}", FAILURE_EXIT) from None
    finally:
        engine.dispose()
    typer.echo(f"{question.name}: {frame.height} rows, {output.stat().st_size} bytes → {output}")


def _option(parameter: str | None) -> str:
    if parameter is None:
        return ""
    return f"{OPTIONS.get(parameter, f'--filter {parameter}=…')}: "


def _write_atomically(frame: Any, fmt: Any, output: Path, compression: Any = "uncompressed") -> None:
    """Write into a temporary file beside ``output``, then rename it over ``output``: a failed or
    interrupted export never leaves a truncated file behind."""
    directory = output.parent if str(output.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as sink:
            fmt.write(frame, sink, compression=compression)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have created it (mkstemp makes it 0600)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
