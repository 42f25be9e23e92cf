"""billing_line: line_key and resource_id COLLATE "C" (PostgreSQL), the unique key as (line_key, source)

Index builds are most of what PostgreSQL spends on a large billing import (the unit tables are
indexed once per period: store.UnitTable). Measured on a 1 M-line CUR month, one backend, no
parallel workers: the unique key (source, line_key) took 5.2 s of CPU to build, (line_key COLLATE
"C", source) 1.0 s — with a byte-ordered first column that starts with random line item ids the
sort compares abbreviated keys, not whole strings behind a constant ``source``;
(resource_id, charge_start) 3.5 → 2.8 s with resource_id byte-ordered. Byte order is the order the
server's ``C.UTF-8`` default already gives (code points), so no query's answer changes: only the
cost of a comparison (no strcoll). SQLite compares bytes already; there only the unique key's
column order changes (the table is rebuilt by batch mode).

The unit tables (children of billing_line) follow their parent's column collation (ALTER TABLE
recurses); their own copy of the unique index is rebuilt in the new order too.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02 14:40:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNIQUE = "uq_billing_line_source_key"


def upgrade() -> None:
    _switch(collation='"C"', new=("line_key", "source"), old=("source", "line_key"))


def downgrade() -> None:
    _switch(collation='"default"', new=("source", "line_key"), old=("line_key", "source"))


def _switch(*, collation: str, new: tuple[str, str], old: tuple[str, str]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        with op.batch_alter_table("billing_line", schema=None) as batch_op:
            batch_op.drop_constraint(UNIQUE, type_="unique")
            batch_op.create_unique_constraint(UNIQUE, list(new))
        return
    # PostgreSQL will not alter a column a view reads (reporting.reconciliation_daily_v1): the
    # views on billing_line are dropped and made again as they were, comments and grants included
    views = _views_on(bind, "public.billing_line")
    for view in views:
        op.execute(f"DROP VIEW {view.name}")
    op.execute(
        f"ALTER TABLE billing_line ALTER COLUMN line_key TYPE VARCHAR(200) COLLATE {collation},"
        f" ALTER COLUMN resource_id TYPE VARCHAR(500) COLLATE {collation}"
    )
    for view in views:
        view.restore()
    op.execute(f"ALTER TABLE billing_line DROP CONSTRAINT {UNIQUE}")
    op.execute(f"ALTER TABLE billing_line ADD CONSTRAINT {UNIQUE} UNIQUE ({', '.join(new)})")
    # each unit table's copy of the unique key (an index of its own: store.finish_unit_table)
    children = bind.exec_driver_sql(
        "SELECT i.indexrelid::regclass::text, c.oid::regclass::text FROM pg_inherits h"
        " JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_index i ON i.indrelid = c.oid"
        " WHERE h.inhparent = 'public.billing_line'::regclass AND i.indisunique"
        " AND pg_get_indexdef(i.indexrelid) LIKE %(old)s",
        {"old": f"% USING btree ({', '.join(old)})"},
    ).all()
    for index, table in children:
        op.execute(f"CREATE UNIQUE INDEX ON {table} USING btree ({', '.join(new)})")
        op.execute(f"DROP INDEX {index}")


class _View(NamedTuple):
    """A view as the catalog holds it: what it takes to make it again after a drop (a NamedTuple:
    Alembic loads this file outside ``sys.modules``, where a dataclass cannot be made)."""

    name: str
    definition: str
    comment: str | None
    column_comments: tuple[tuple[str, str], ...]
    grants: tuple[tuple[str, str], ...]  # (grantee, privilege), the owner's own left out

    def restore(self) -> None:
        # as the driver's text: a definition holds casts ("::text") SQLAlchemy would read as binds
        op.get_bind().exec_driver_sql(f"CREATE VIEW {self.name} AS {self.definition}")
        if self.comment is not None:
            op.execute(f"COMMENT ON VIEW {self.name} IS {_literal(self.comment)}")
        for column, text in self.column_comments:
            op.execute(f'COMMENT ON COLUMN {self.name}."{column}" IS {_literal(text)}')
        for grantee, privilege in self.grants:
            op.execute(f'GRANT {privilege} ON {self.name} TO "{grantee}"')


def _views_on(bind: Any, table: str) -> list[_View]:
    """The views reading ``table`` directly (none reads one of them: checked)."""
    rows = bind.exec_driver_sql(
        "SELECT DISTINCT v.oid, v.oid::regclass::text, pg_get_viewdef(v.oid),"
        " obj_description(v.oid, 'pg_class') FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid"
        " JOIN pg_class v ON v.oid = r.ev_class"
        " WHERE d.refobjid = %(table)s::regclass AND v.relkind = 'v' ORDER BY 2",
        {"table": table},
    ).all()
    views = []
    for oid, name, definition, comment in rows:
        readers = bind.exec_driver_sql(
            "SELECT count(*) FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid"
            " WHERE d.refobjid = %(oid)s AND r.ev_class <> %(oid)s",
            {"oid": oid},
        ).scalar_one()
        assert readers == 0, f"a view reads {name}: this migration would have to make it again too"
        columns = bind.exec_driver_sql(
            "SELECT a.attname, col_description(a.attrelid, a.attnum) FROM pg_attribute a"
            " WHERE a.attrelid = %(oid)s AND a.attnum > 0"
            " AND col_description(a.attrelid, a.attnum) IS NOT NULL ORDER BY a.attnum",
            {"oid": oid},
        ).all()
        grants = bind.exec_driver_sql(
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,"
            " a.privilege_type FROM pg_class c, aclexplode(c.relacl) a"
            " WHERE c.oid = %(oid)s AND a.grantee <> c.relowner ORDER BY 1, 2",
            {"oid": oid},
        ).all()
        views.append(
            _View(
                name,
                definition,
                comment,
                tuple((str(c), str(t)) for c, t in columns),
                tuple(map(tuple, grants)),
            )
        )
    return views


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
