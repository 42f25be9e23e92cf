"""``gpu-ledger reporting grant|revoke|views``: BI logins' read access to the ``reporting`` views.

Registered on the CLI by ``service.cli`` importing this module (as ``service.prune_cli``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from service.cli import FAILURE_EXIT, ConfigOpt, _settings, app, database_failed, fail
from service.reporting import DEFAULT_ROLE

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from service.settings import Settings

T = TypeVar("T")

reporting_app = typer.Typer(
    help="SQL for BI tools: grant a PostgreSQL login read access to the reporting views, revoke it, "
    "list the views (docs/reporting.md).",
    no_args_is_help=True,
)
app.add_typer(reporting_app, name="reporting")

RoleOpt = Annotated[str, typer.Option("--role", help="The read-only group role the views are granted to.")]
LoginOpt = Annotated[str, typer.Option("--login", help="An existing PostgreSQL login (the BI tool's user).")]


def _in_database(config: Path | None, action: Callable[[Connection, Settings], T]) -> T:
    """``action`` in one transaction on the configured PostgreSQL database, migrated first; every
    failure is one error line (exit 2 for a mistake, 1 for a database that failed)."""
    from sqlalchemy.exc import SQLAlchemyError

    from service.db import MigrationError, make_engine, migrate
    from service.reporting.access import ReportingError

    settings = _settings(config)
    engine = make_engine(settings.database_url)
    try:
        if engine.dialect.name != "postgresql":
            raise fail(
                f"the reporting views exist on PostgreSQL only (database_url is {engine.dialect.name}); "
                "BI tools connect to PostgreSQL"
            )
        migrate(engine)
        with engine.begin() as conn:
            return action(conn, settings)
    except ReportingError as exc:
        raise fail(str(exc)) from None
    except MigrationError as exc:
        raise fail(str(exc), FAILURE_EXIT) from None
    except SQLAlchemyError as exc:
        raise database_failed(settings, exc) from None
    finally:
        engine.dispose()


@reporting_app.command("grant")
def grant_command(login: LoginOpt, role: RoleOpt = DEFAULT_ROLE, config: ConfigOpt = None) -> None:
    """Let LOGIN read the reporting views (and nothing else): create the group role if absent,
    grant it the views, make LOGIN a member, store the service's gpu_cost_share for LOGIN."""
    from service.reporting.access import grant

    done = _in_database(config, lambda conn, s: grant(conn, login, role, s.gpu_cost_share))
    made = " (role created)" if done.created_role else ""
    typer.echo(
        f'granted role "{done.role}"{made} to "{done.login}" in database "{done.database}": '
        "SELECT on the reporting views only"
    )
    if done.cost_share_warning:
        typer.echo(f"gpu-ledger: warning: {done.cost_share_warning}", err=True)


@reporting_app.command("revoke")
def revoke_command(login: LoginOpt, role: RoleOpt = DEFAULT_ROLE, config: ConfigOpt = None) -> None:
    """Take LOGIN out of the reporting role."""
    from service.reporting.access import revoke

    _in_database(config, lambda conn, _s: revoke(conn, login, role))
    typer.echo(f'revoked role "{role}" from "{login}"')


@reporting_app.command("views")
def views_command(config: ConfigOpt = None) -> None:
    """List the reporting views with what each holds."""
    from service.reporting.access import views

    for v in _in_database(config, lambda conn, _s: views(conn)):
        typer.echo(f"reporting.{v.name}: {v.description}")
