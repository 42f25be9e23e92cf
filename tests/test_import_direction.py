"""The connector SDK's direction rule: ``service`` depends on ``connectors``, never the reverse.

Every module under ``connectors/`` is parsed (not imported, so an import inside a function or
behind ``TYPE_CHECKING`` counts too) and any ``import service…`` / ``from service… import`` is
reported as file:line. Code that needs the service (the agent staging reader) lives in ``service/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def service_imports(source: str, name: str) -> list[str]:
    """``name:line  statement`` for each import of the ``service`` package in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        if any(m == "service" or m.startswith("service.") for m in modules):
            found.append(f"{name}:{node.lineno}  {ast.unparse(node)}")
    return found


def test_the_check_finds_imports_at_any_depth_and_only_of_service() -> None:
    source = (
        "import os, service\n"
        "from service.timeutil import to_ms\n"
        "from services import other  # another package\n"
        "from .service import sibling  # relative: connectors.service\n"
        "def f():\n"
        "    if True:\n"
        "        import service.db as db\n"
    )
    assert service_imports(source, "c.py") == [
        "c.py:1  import os, service",
        "c.py:2  from service.timeutil import to_ms",
        "c.py:7  import service.db as db",
    ]


def test_connectors_import_nothing_from_service() -> None:
    offenders = [
        hit
        for path in sorted((ROOT / "connectors").rglob("*.py"))
        for hit in service_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    rule = "connectors/ must not import service/ (use connectors.sdk):"
    assert offenders == [], "\n".join([rule, *offenders])
