"""``gpu-ledger``: serve the API, migrate the database, ingest a window, export the schema, run
the node agent.

Mistakes in arguments or configuration print one line on stderr and exit with status 2; a
failed run prints one line and exits with 1; a billing import that ended ``DEGRADED`` (it imported,
but refused more rows or cost than the connector allows, or a file had no row accepted) prints its
summary and exits with 3 unless ``--allow-degraded``. No tracebacks.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from connectors.base import ConnectorError, close_connector
from connectors.registry import default_registry
from service.break_even_cli import break_even_command
from service.cli_export import export_command
from service.cli_options import ConfigOpt
from service.timeutil import ceil_hour, floor_hour, parse_utc

if TYPE_CHECKING:
    # Imported where used: `gpu-ledger agent` runs on GPU nodes with a 100 MB RSS budget and
    # needs neither the service settings (pydantic-settings) nor the database layer.
    from service.settings import Settings

USAGE_EXIT = 2
FAILURE_EXIT = 1
DEGRADED_EXIT = 3  # a billing import that imported but is DEGRADED (service.billing.health)
#: Findings the ingest summary lists (all are in data_quality_finding and the dataQuality query).
SUMMARY_FINDINGS = 5


class _OneLineErrors(TyperGroup):
    """Click's usage errors as one line on stderr (exit 2), not a usage dump."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _plain_help(self)
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except typer.Abort:
            typer.echo("gpu-ledger: aborted", err=True)
            sys.exit(FAILURE_EXIT)
        except typer.TyperException as exc:  # typer's (vendored) click usage errors
            ctx = getattr(exc, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            if message.strip():  # none when the help was the answer (no arguments): it is printed
                typer.echo(f"gpu-ledger: error: {message}{hint}", err=True)
            sys.exit(getattr(exc, "exit_code", USAGE_EXIT))
        sys.exit(rv if isinstance(rv, int) else 0)


def _plain_help(command: Any) -> None:
    """Our help texts are plain text, but typer renders them as rich markup, where a bare
    ``[auth]`` or ``[agent]`` is a style tag and vanishes, and keeps each line break of a
    docstring: escape them, and join each paragraph's lines (the panel wraps them itself)."""
    from rich.markup import escape

    def plain(text: str) -> str:
        paragraphs = inspect.cleandoc(text).split("\n\n")
        return escape("\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs))

    if command.help:
        command.help = plain(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = plain(param.help)
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


app = typer.Typer(
    cls=_OneLineErrors,
    help="GPU Ledger: what your GPUs cost and how much work they did.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# typer's rich help prints a value type after every option, flags too (`--demo <bool>`,
# `--help <bool>`), though a flag takes no value; its plain help already leaves flags bare.
_option_type = TyperOption.display_type_rich


def _flag_has_no_type(option: TyperOption, ctx: Any) -> str | None:
    return None if option.is_flag or option.count else _option_type(option, ctx)


setattr(TyperOption, "display_type_rich", _flag_has_no_type)  # noqa: B010  (a method, typed loosely)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("gpu-ledger")
        except PackageNotFoundError:  # run from a checkout that was never installed
            installed = "unknown (not installed)"
        typer.echo(f"gpu-ledger {installed}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", is_eager=True, callback=_print_version),
    ] = False,
) -> None:
    """GPU Ledger: what your GPUs cost and how much work they did."""


def fail(message: str, code: int = USAGE_EXIT) -> typer.Exit:
    """Print ``message`` as the one error line; ``raise fail(...)``."""
    typer.echo(f"gpu-ledger: error: {message}", err=True)
    return typer.Exit(code)


def database_failed(settings: Settings, exc: BaseException) -> typer.Exit:
    """The one error line for a database that refused (exit 1): where, what, and the driver's reason."""
    from service.db import driver_reason

    return fail(f"{settings.database_url_masked}: {type(exc).__name__}: {driver_reason(exc)}", FAILURE_EXIT)


def _settings(config: Path | None) -> Settings:
    from service.logging import configure_logging, get_logger
    from service.settings import ConfigError, load_settings, unknown_env_warnings

    try:
        settings = load_settings(config)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    configure_logging(settings.log_level, settings.log_format)
    for warning in unknown_env_warnings(os.environ):  # a misspelt GPU_LEDGER_* is otherwise silent
        get_logger(__name__).warning(warning)
    return settings


def _utc_arg(option: str, text: str) -> dt.datetime:
    try:
        return parse_utc(text)
    except ValueError as exc:
        raise fail(f"{option} {text!r}: {exc} (example: 2025-09-01T00:00Z)") from None


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
    demo: Annotated[
        bool, typer.Option("--demo", help="Without connectors: serve a synthetic demo fleet.")
    ] = False,
    config: ConfigOpt = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes answering requests (PostgreSQL only); the connectors run in one.",
        ),
    ] = 1,
) -> None:
    """Migrate, then serve the GraphQL API and run the connectors on their intervals.

    Every endpoint but /healthz and /readyz needs a token ([auth] in the config). --demo on a
    loopback address allows anonymous reads; on any other address serve refuses to start
    without a way to authenticate (see service.auth.serve_rules). --workers N (PostgreSQL) starts
    N processes; the one holding the database's scheduler lock runs the connectors
    (service.serve_workers).
    """
    import uvicorn

    from service.app import create_app
    from service.auth.serve_rules import ServeRefused, serve_auth
    from service.auth.tokens import TokenStore
    from service.bootstrap import prepare, sync_config
    from service.db import MigrationError, make_engine
    from service.serve_workers import refusal, serve_workers

    settings = _settings(config)
    if (refused := refusal(settings, workers)) is not None:
        raise fail(refused)
    engine = make_engine(settings.database_url)
    try:
        prepare(engine, settings)
        try:
            auth = serve_auth(settings.auth, host, demo=demo, active_tokens=TokenStore(engine).count_active())
        except ServeRefused as exc:
            raise fail(str(exc)) from None
        settings = settings.model_copy(update={"auth": auth})
        if demo and not settings.connectors:
            from service.demo import with_demo

            settings = with_demo(settings)
            sync_config(engine, settings)
            _load_demo(engine, settings)
        if workers > 1:
            engine.dispose()  # each worker has its own; nothing here holds a connection meanwhile
            serve_workers(settings, host, port, workers)
            return
        app_ = create_app(settings, engine, run_scheduler=True)
        # log_config=None: keep our structlog setup instead of uvicorn's own.
        uvicorn.run(app_, host=host, port=port, log_config=None, lifespan="on")
    except ConnectorError as exc:
        raise fail(f"{type(exc).__name__}: {exc}", FAILURE_EXIT) from None
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    finally:
        engine.dispose()


def _load_demo(engine: Any, settings: Settings) -> None:
    from service.demo import load_demo
    from service.ledger.ingest import ingest_window
    from service.progress import ChunkProgress

    with ChunkProgress("demo: loading synthetic fleet") as progress:
        load_demo(engine, settings, ingest=ingest_window, on_chunk=progress, on_window=progress.set_window)


@app.command()
def migrate(config: ConfigOpt = None) -> None:
    """Create or upgrade the database schema to the newest revision (all of it or nothing), and
    close runs left RUNNING by processes that died as ABORTED."""
    from service.db import MigrationError, current_revision, make_engine
    from service.db import migrate as run_migrate
    from service.runs import abort_orphaned_runs

    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        run_migrate(engine)
        aborted = abort_orphaned_runs(engine)
        typer.echo(f"{settings.database_url_masked}: at revision {current_revision(engine)}")
        if aborted:
            typer.echo(f"aborted {len(aborted)} run(s) left RUNNING by processes that are gone: ", nl=False)
            typer.echo(", ".join(f"{r.connector} #{r.id}" for r in aborted))
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    finally:
        engine.dispose()


@app.command()
def ingest(
    name: Annotated[str, typer.Argument(help="Configured connector name.")],
    start: Annotated[str, typer.Option(help="Window start, ISO 8601 UTC (floored to the hour).")],
    end: Annotated[str, typer.Option(help="Window end, ISO 8601 UTC (ceiled to the hour).")],
    allow_degraded: Annotated[
        bool,
        typer.Option(
            "--allow-degraded",
            help=f"Exit 0 for a billing import or facts run that ended DEGRADED (else {DEGRADED_EXIT}).",
        ),
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Ingest one connector's window [START, END) into the ledger (idempotent)."""
    start_utc, end_utc = _utc_arg("--start", start), _utc_arg("--end", end)
    if end_utc <= start_utc:
        raise fail(f"--end {end_utc.isoformat()} must be after --start {start_utc.isoformat()}")
    settings = _settings(config)
    try:
        connector_config = settings.connector(name)
    except KeyError as exc:
        raise fail(str(exc.args[0])) from None
    aligned = floor_hour(start_utc), ceil_hour(end_utc)
    if aligned != (start_utc, end_utc):
        typer.echo(
            f"note: window widened to whole hours: {aligned[0].isoformat()} – {aligned[1].isoformat()}",
            err=True,
        )

    from service.bootstrap import prepare
    from service.db import MigrationError, make_engine
    from service.ledger.ingest import ingest_window
    from service.progress import ChunkProgress

    engine = make_engine(settings.database_url)
    connector = None
    try:
        # An `agent` connector reads pushed samples from this database: it needs the engine.
        extra = {"engine": engine} if connector_config.type == "agent" else {}
        connector = default_registry().build(connector_config, **extra)
        prepare(engine, settings)
        if getattr(connector, "kind", None) == "billing":
            # Billing exports are replaced by billing period, not by hour: the window as given.
            _ingest_billing(engine, name, connector, start_utc, end_utc, settings, allow_degraded)
            _evaluate_alerts(engine, settings)
            return
        if getattr(connector, "kind", None) == "facts":
            # Attribution facts (the slurm connector): kept per workload key, no ledger rows.
            from connectors.sdk import ConnectorStatus
            from service.facts_ingest import ingest_facts

            facts = ingest_facts(engine, name, connector, *aligned, attribution_rules=settings.attribution)
            typer.echo(f"{name}: {facts.summary()}")
            if facts.status != ConnectorStatus.OK and not allow_degraded:
                raise typer.Exit(DEGRADED_EXIT)
            return
        with ChunkProgress(f"ingest {name}") as progress:
            progress.set_window(*aligned)
            result = ingest_window(
                engine,
                name,
                connector,
                *aligned,
                sites=settings.sites,
                idle_threshold_pct=settings.idle_threshold_pct,
                attribution_rules=settings.attribution,
                on_chunk=progress,
                after_ingest=settings.reprice_from_bills(),
            )
        _evaluate_alerts(engine, settings)
    except typer.Exit:
        raise  # a billing import with failed files or DEGRADED: its summary is printed
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    except Exception as exc:  # noqa: BLE001  (every failure of the run: one line, its status)
        raise fail(run_failure_line(name, exc), FAILURE_EXIT) from None
    finally:
        close_connector(connector)
        engine.dispose()
    typer.echo(f"{name}: {_describe(result)}")


def _evaluate_alerts(engine: Any, settings: Settings) -> None:
    """The alert rules after a hand-run ingest, as ``serve`` evaluates them after each scheduled
    run (docs/alerts.md): a zombie job found by a backfill is announced now, not at the next run."""
    from service.alerts.engine import alert_hook, utc_now

    hook = alert_hook(engine, settings)
    if hook is not None:
        hook(utc_now())  # logs and never raises: the ingest itself succeeded


def run_failure_line(name: str, error: Exception) -> str:
    """The one line a failed ingest prints — ``NAME: STATUS: Type: message`` with the status
    ``service.failures.classify`` gives (the run's and the scheduler's); a bug's traceback goes
    to the log first (once: the run recorder may have logged it already)."""
    from service.failures import classify, log_traceback_once

    failure = classify(error)
    if failure.bug:
        log_traceback_once(error, f"gpu-ledger ingest {name}")
        return f"{name}: {failure.status}: {failure.message} (a bug: the traceback is in the log above)"
    return f"{name}: {failure.status}: {failure.message}"


def _ingest_billing(  # noqa: PLR0917
    engine: Any,
    name: str,
    connector: Any,
    start: dt.datetime,
    end: dt.datetime,
    settings: Settings,
    allow_degraded: bool = False,
) -> None:
    """Import a billing connector's files with a progress bar per file, print the summary; exit 1
    when a file could not be read at all, 3 when the run is DEGRADED (unless allowed)."""
    from connectors.sdk import ConnectorStatus
    from service.billing.ingest import ingest_billing

    with _file_progress(f"ingest {name}") as progress:
        result = ingest_billing(
            engine,
            name,
            connector,
            start,
            end,
            catalog=settings.instance_catalog(),
            gpu_cost_share=settings.gpu_cost_share,
            attribution_rules=settings.attribution,
            on_file=progress,
        )
    for line in billing_summary(result):
        typer.echo(line)
    if result.failed_files:
        raise typer.Exit(FAILURE_EXIT)
    if result.status == ConnectorStatus.DEGRADED and not allow_degraded:
        raise typer.Exit(DEGRADED_EXIT)


def _file_progress(description: str) -> Any:
    """``service.progress.ChunkProgress`` counting files instead of hours."""
    from rich.progress import TextColumn

    from service.progress import ChunkProgress

    progress = ChunkProgress(description)
    progress.progress.columns = tuple(
        TextColumn("files") if isinstance(c, TextColumn) and c.text_format == "hours" else c
        for c in progress.progress.columns
    )
    return progress


def billing_summary(result: Any) -> list[str]:
    """The import summary: files, counts (read = accepted + refused + skipped), data-quality
    findings (rows imported although they break a rule) and the refused rows' cost, why the run is
    DEGRADED, the largest findings, unknown instance types, where the refused rows are."""
    failed = result.failed_files
    lines = [
        f"{result.connector}: status={result.status} files={len(result.files)} failed={len(failed)} "
        f"read={result.read} accepted={result.accepted} refused={result.refused} "
        f"skipped={result.skipped} replaced={result.lines_replaced} "
        f"findings={result.findings} refused_cost={_amount(result.refused_cost)}"
        + (f" {result.notice}" if getattr(result, "notice", None) else "")
    ]
    if str(result.status) == "DEGRADED":
        lines.append(f"  DEGRADED: {result.error}")
    for f in result.files:
        if f.error:
            lines.append(f"  FAILED {f.error}")
        else:
            skipped = ", ".join(f"{n} {r}" for r, n in sorted(f.skipped_reasons.items()))
            lines.append(
                f"  {f.source_file}: read={f.read} accepted={f.accepted} refused={f.refused} "
                f"skipped={f.skipped}"
                + (f" ({skipped})" if skipped else "")
                + f" findings={f.findings} refused_cost={_amount(f.refused_cost)}"
                + (f" {f.notice}" if getattr(f, "notice", None) else "")
            )
    found = result.finding_list
    if found:
        more = len(found) - SUMMARY_FINDINGS
        lines.append(
            f"  findings (rows imported although they break a rule; all in table data_quality_finding,"
            f" query dataQuality){f', the largest {SUMMARY_FINDINGS}' if more > 0 else ''}:"
        )
        lines += [f"    {f.message()}" for f in found[:SUMMARY_FINDINGS]]
    if result.refused or failed:
        lines.append(
            f"  refused rows: table rejection, run_id={result.run_id} "
            f"(SELECT file, line, field, reason FROM rejection WHERE run_id = {result.run_id})"
        )
    if result.unknown_types:
        lines.append(
            "  unknown GPU instance types (no GPU count, not priced; add [[instance_types]]): "
            + ", ".join(result.unknown_types)
        )
    return lines


def _amount(value: Any) -> str:
    """A Decimal as plain digits, no exponent and no trailing zeros (``0``, ``12.5``)."""
    return f"{value.normalize():f}" if value else "0"


def _describe(result: Any) -> str:
    fields = ("status", "samples_read", "samples_accepted", "samples_rejected", "ledger_rows", "devices")
    parts = [f"{f}={getattr(result, f)}" for f in fields if hasattr(result, f)]
    return " ".join(parts) or str(result)


def schema_sdl() -> str:
    """The SDL of ``service.api.graphql.schema`` exactly as ``schema.graphql`` holds it."""
    from strawberry.printer import print_schema

    from service.api.graphql import schema

    return print_schema(schema).rstrip("\n") + "\n"


@app.command("export-schema")
def export_schema(
    output: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
) -> None:
    """Print the GraphQL schema (SDL); the repository's schema.graphql must equal it."""
    sdl = schema_sdl()
    if output is None:
        typer.echo(sdl, nl=False)
    else:
        output.write_text(sdl)
        typer.echo(f"wrote {output}", err=True)


@app.command("connectors")
def list_connectors(config: ConfigOpt = None) -> None:
    """List configured connectors with their status and watermark."""
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy.exc import SQLAlchemyError
    from sqlmodel import Session, select

    from service.analytics.devices import last_run_findings
    from service.db import make_engine
    from service.models import ConnectorState

    settings = _settings(config)
    if not settings.connectors:
        typer.echo("no connectors configured (add [[connectors]] tables to the config file)")
        return
    states, findings = {}, {}  # no database or not migrated yet: every connector "never run"
    # A listing reads: it must not create the SQLite file that connecting to a missing one would.
    if _database_exists(settings.database_url):
        engine = make_engine(settings.database_url)
        try:
            with Session(engine) as session:
                states = {s.name: s for s in session.exec(select(ConnectorState)).all()}
            with engine.connect() as conn:
                findings = last_run_findings(conn)
        except SQLAlchemyError:
            pass
        finally:
            engine.dispose()
    table = Table(
        "name", "type", "enabled", "status", "watermark", "findings", "last error", "notice", box=None
    )
    for c in settings.connectors:
        state = states.get(c.name)
        status = "DISABLED" if not c.enabled else (state.status if state else "NEVER_RUN")
        watermark = state.watermark.isoformat() if state and state.watermark else "-"
        # A DEGRADED run's reason is its error: shown longer, it says which share or file.
        width = 240 if state and state.status == "DEGRADED" else 80
        error = (state.last_error or "-").splitlines()[0][:width] if state and state.last_error else "-"
        notice = (state.notice or "-") if state else "-"
        found = str(findings[c.name]) if c.name in findings else "-"
        table.add_row(c.name, c.type, "yes" if c.enabled else "no", status, watermark, found, error, notice)
    Console(width=200).print(table)


def _database_exists(url: str) -> bool:
    """False for a SQLite file that isn't there (connecting would create it); True otherwise."""
    from service.db import normalize_url

    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return True
    return Path(parsed.database).exists()


@app.command("agent")
def agent_command(
    config: Annotated[Path, typer.Option("--config", help="The agent's TOML file ([agent] table).")],
) -> None:
    """Run the node agent: sample the GPUs, spool, ship to the service, serve /metrics."""
    from service.agent.run import AgentStartError, run_agent

    try:
        run_agent(config)
    except AgentStartError as exc:
        raise fail(str(exc)) from None


app.command("export")(export_command)  # service.cli_export
app.command("break-even")(break_even_command)  # service.break_even_cli

tokens_app = typer.Typer(
    help="API tokens: create (the secret is shown once), list, revoke.", no_args_is_help=True
)
app.add_typer(tokens_app, name="tokens")


@contextlib.contextmanager
def _token_store(config: Path | None) -> Iterator[Any]:
    """The token store of the configured database, migrated first (works on a fresh database);
    a database that can't be reached or migrated is one error line, exit 1."""
    from service.auth.tokens import TokenStore

    with migrated_engine(_settings(config)) as engine:
        yield TokenStore(engine)


@contextlib.contextmanager
def migrated_engine(settings: Settings) -> Iterator[Any]:
    """An engine on the configured database, migrated first (a fresh database works); a database
    that can't be reached or migrated, there or in the block, is one error line, exit 1."""
    from sqlalchemy.exc import SQLAlchemyError

    from service.db import MigrationError, make_engine, migrate

    engine = make_engine(settings.database_url)
    try:
        migrate(engine)
        yield engine
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    finally:
        engine.dispose()


def _cli_caller() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (containers)
        return "cli"


def _when(value: dt.datetime | None, none: str = "-") -> str:
    return value.strftime("%Y-%m-%dT%H:%MZ") if value is not None else none


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Option("--name", help="Unique name (shown in logs and audits).")],
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope",
            help="admin, read, metrics, read:project:NAME, read:team:NAME or push:CONNECTOR (repeatable).",
        ),
    ],
    expires_days: Annotated[
        int | None, typer.Option("--expires-days", help="Expire after this many days (default: never).")
    ] = None,
    config: ConfigOpt = None,
) -> None:
    """Create a token; its secret is printed alone on the last line, once (only its hash is kept)."""
    from service.auth.audit import audit
    from service.auth.principal import ScopeError
    from service.auth.tokens import TokenError

    with _token_store(config) as store:
        try:
            secret, info = store.create(name, scope, expires_days)
        except (ScopeError, TokenError) as exc:
            raise fail(str(exc)) from None
    audit(
        "token.create",
        "ok",
        name=info.name,
        scopes=info.scopes,
        caller=_cli_caller(),
        expires_at=_when(info.expires_at, "never"),
    )
    typer.echo(
        f'created token "{info.name}" with scopes {" ".join(info.scopes)}; '
        f"expires {_when(info.expires_at, 'never')}"
    )
    typer.echo(
        "the secret below is shown once (only its SHA-256 is stored); send it as "
        "Authorization: Bearer <secret>"
    )
    typer.echo(secret)


@tokens_app.command("list")
def tokens_list(config: ConfigOpt = None) -> None:
    """List tokens: name, scopes, created, expires, revoked, last used (never the secret)."""
    from rich.console import Console
    from rich.table import Table

    with _token_store(config) as store:
        tokens = store.list_all()
    if not tokens:
        typer.echo("no tokens (create one: gpu-ledger tokens create --name NAME --scope read)")
        return
    table = Table("name", "scopes", "created", "expires", "revoked", "last used", box=None)
    for t in tokens:
        table.add_row(
            t.name,
            " ".join(t.scopes),
            _when(t.created_at),
            _when(t.expires_at, "never"),
            _when(t.revoked_at),
            _when(t.last_used_at, "never"),
        )
    Console(width=200).print(table)


@tokens_app.command("revoke")
def tokens_revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")],
    config: ConfigOpt = None,
) -> None:
    """Revoke a token: it is refused from the next request on (its name stays taken)."""
    from service.auth.audit import audit
    from service.auth.tokens import TokenError

    with _token_store(config) as store:
        try:
            info = store.revoke(name)
        except TokenError as exc:
            raise fail(str(exc)) from None
    audit("token.revoke", "ok", name=info.name, scopes=info.scopes, caller=_cli_caller())
    typer.echo(f'revoked token "{info.name}" at {_when(info.revoked_at)}')


import service.alerts_cli  # noqa: E402, F401  (registers `gpu-ledger alerts`; imports app from here)
import service.forecast_cli  # noqa: E402, F401  (registers `gpu-ledger forecast`; imports app from here)
import service.prune_cli  # noqa: E402, F401  (registers `gpu-ledger prune`; imports app from here)
import service.reattribute_cli  # noqa: E402, F401  (registers `gpu-ledger reattribute`; imports app from here)
import service.reporting.cli  # noqa: E402, F401  (registers `gpu-ledger reporting`; imports app from here)
import service.reports_cli  # noqa: E402, F401  (registers `gpu-ledger report`; imports app from here)
