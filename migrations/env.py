"""Alembic environment for GPU Ledger.

Run programmatically by ``service.db.migrate`` (which hands over a connection inside its one
transaction through ``config.attributes["connection"]``) or by the ``alembic`` CLI /
``scripts/new-migration`` with ``sqlalchemy.url`` set. Target metadata is ``SQLModel.metadata``
with every model module imported.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlmodel import SQLModel

import service.models  # noqa: F401  (every table module must be imported here)
from migrations.support import compare_type, render_item

target_metadata = SQLModel.metadata


def _configure(connection: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=compare_type,
        render_item=render_item,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTER needs table copies
        # The connection is inside one real transaction on SQLite too (service.db.migration_connection).
        transactional_ddl=True,
    )


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from service.db import make_engine, migration_connection  # here, not at the top: the CLI path only

    engine = make_engine(context.config.get_main_option("sqlalchemy.url") or "")
    try:
        # One real transaction on SQLite too (pysqlite would commit each DDL statement alone).
        with migration_connection(engine) as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_item=render_item,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
