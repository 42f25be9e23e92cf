"""schema.graphql at the top of the repository is exactly what the code exports."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schema.graphql"


def test_schema_graphql_matches_code(tmp_path: Path) -> None:
    from service.cli import app, schema_sdl

    result = CliRunner().invoke(app, ["export-schema"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == schema_sdl()
    out = tmp_path / "s.graphql"
    assert CliRunner().invoke(app, ["export-schema", "--output", str(out)]).exit_code == 0
    assert out.read_text() == schema_sdl()
    assert SCHEMA_FILE.exists(), (
        "schema.graphql missing: run `gpu-ledger export-schema --output schema.graphql`"
    )
    assert SCHEMA_FILE.read_text() == schema_sdl(), (
        "schema.graphql drifted from the code: run `gpu-ledger export-schema --output schema.graphql`"
    )
