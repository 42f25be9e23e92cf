"""``gpu-ledger tokens`` create / list / revoke, as the acceptance harness runs them (subprocess)
and through typer's CliRunner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.auth.tokens import TokenStore
from service.cli import app
from service.db import make_engine

EXE = Path(sys.executable).parent / "gpu-ledger"


def run(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, list(args), env={"GPU_LEDGER_DATABASE_URL": url, "GPU_LEDGER_CONFIG": ""}
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.e2e
def test_create_prints_the_secret_alone_on_the_last_line_on_a_fresh_database(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"  # never migrated: the command migrates first
    env = {**os.environ, "GPU_LEDGER_DATABASE_URL": f"sqlite:///{db}", "GPU_LEDGER_CONFIG": ""}
    r = subprocess.run(
        [str(EXE), "tokens", "create", "--name", "harness", "--scope", "read", "--scope", "metrics"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    *info, secret = r.stdout.splitlines()
    assert secret.startswith("gpl_") and secret == secret.strip() and " " not in secret
    assert info[0] == 'created token "harness" with scopes metrics read; expires never'
    assert secret not in r.stderr and secret not in "\n".join(info)
    engine = make_engine(f"sqlite:///{db}")
    principal = TokenStore(engine).authenticate(secret)
    engine.dispose()
    assert principal is not None and principal.name == "harness"


def test_list_and_revoke_never_show_the_secret(sqlite_url: str) -> None:
    db = sqlite_url
    code, out, _ = run(db, "tokens", "list")
    assert (code, out.strip()) == (
        0,
        "no tokens (create one: gpu-ledger tokens create --name NAME --scope read)",
    )
    code, out, err = run(
        db, "tokens", "create", "--name", "bi", "--scope", "read:project:atlas", "--expires-days", "30"
    )
    secret = out.splitlines()[-1]
    assert code == 0 and secret not in err
    (audit,) = [line for line in err.splitlines() if "[gpu_ledger.audit]" in line]
    assert "action=token.create" in audit and "name=bi" in audit and "scopes=read:project:atlas" in audit
    code, out, _ = run(db, "tokens", "list")
    header, row = out.strip().splitlines()
    assert header.split() == ["name", "scopes", "created", "expires", "revoked", "last", "used"]
    assert row.split()[0:2] == ["bi", "read:project:atlas"] and row.split()[-2:] == ["-", "never"]
    assert secret not in out and secret[4:12] not in out
    code, out, err = run(db, "tokens", "revoke", "bi")
    assert code == 0 and out.startswith('revoked token "bi" at ')
    (audit,) = [line for line in err.splitlines() if "[gpu_ledger.audit]" in line]
    assert "action=token.revoke" in audit and "name=bi" in audit and "outcome=ok" in audit
    _, out, _ = run(db, "tokens", "list")
    assert out.strip().splitlines()[1].split()[4] != "-"  # the revocation time


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--name", "x", "--scope", "write"], "unknown scope 'write': use admin, read, metrics"),
        (["create", "--name", "x", "--scope", "read", "--expires-days", "-1"], "--expires-days -1: must be"),
        (["create", "--name", "dup", "--scope", "read"], 'a token named "dup" exists already'),
        (["revoke", "nobody"], 'no token named "nobody" (see gpu-ledger tokens list)'),
        (["create", "--name", "x"], "Missing option '--scope'"),
    ],
)
def test_mistakes_are_one_line_exit_2(sqlite_url: str, args: list[str], message: str) -> None:
    db = sqlite_url
    assert run(db, "tokens", "create", "--name", "dup", "--scope", "read")[0] == 0
    code, out, err = run(db, "tokens", *args)
    errors = [line for line in err.splitlines() if line.startswith("gpu-ledger: error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err and "gpl_" not in out


def test_unreachable_database_is_one_line_exit_1() -> None:
    code, out, err = run("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1", "tokens", "list")
    errors = [line for line in err.splitlines() if line.startswith("gpu-ledger: error:")]
    assert code == 1 and len(errors) == 1 and "OperationalError: connection failed" in errors[0], err
    assert "Traceback" not in err and out == ""
