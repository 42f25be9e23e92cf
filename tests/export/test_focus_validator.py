"""The FinOps Foundation's focus-validator (1.0.0, the release on PyPI; it checks FOCUS 1.0) on the
FOCUS 1.0 export of the demo fleet, written by ``gpu-ledger export focus --focus-version 1.0``.

focus-validator 1.0.0's "1.0" rule set still names four columns by their 1.0-preview ids
(``Provider``, ``Publisher``, ``InvoiceIssuer``, ``ResourceID``; FOCUS 1.0 renamed them
``ProviderName``, ``PublisherName``, ``InvoiceIssuerName``, ``ResourceId``) and its SkuPriceId rule
reads ``ChargeType``, a 1.0-preview column FOCUS 1.0 replaced by ``ChargeCategory``. So:

* as shipped, it fails exactly those five checks on our export — and on the FinOps Foundation's
  own FOCUS 1.0 sample (tests/fixtures/public/focus) too: they are the validator's, not ours;
* under the validator's column ids (the four renamed, ``ChargeType`` = ``ChargeCategory``) every
  one of its 133 checks passes: none failed, errored or skipped.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
from export.helpers import DEMO_END, DEMO_START, load_demo_fleet
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.cli import app as cli_app

focus_validator = pytest.importorskip("focus_validator", reason="the `test` extra installs focus-validator")
from focus_validator.data_loaders.data_loader import DataLoader  # noqa: E402
from focus_validator.rules.spec_rules import SpecRules  # noqa: E402
from focus_validator.validator import DEFAULT_VERSION_SETS_PATH  # noqa: E402

#: FOCUS 1.0's column id → the id focus-validator 1.0.0 checks.
VALIDATOR_IDS = {
    "ProviderName": "Provider",
    "PublisherName": "Publisher",
    "InvoiceIssuerName": "InvoiceIssuer",
    "ResourceId": "ResourceID",
}
STALE_CHECKS = {
    "Provider_Required",
    "Publisher_Required",
    "InvoiceIssuer_Required",
    "ResourceID_Required",
    "SkuPriceId_Nullable",
}
SAMPLE = Path(__file__).parents[1] / "fixtures" / "public" / "focus" / "focus_sample.csv.gz"


@pytest.fixture
def validator_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # It reads its ISO 4217 list from a path relative to the working directory
    # ("focus_validator/utils/currency_codes.csv"): run it from its installation's parent.
    monkeypatch.chdir(Path(focus_validator.__file__).parents[1])


def statuses(csv: Path, rename: bool = False) -> dict[str, str]:
    """Each check of the validator's FOCUS 1.0 rule set → passed/failed/errored/skipped, for ``csv``
    read by the validator's own loader (``rename``: under the validator's column ids)."""
    frame = DataLoader(data_filename=str(csv)).load()
    if rename:
        frame = frame.rename(columns=VALIDATOR_IDS)
        frame["ChargeType"] = frame["ChargeCategory"]
    rules = SpecRules(
        override_filename=None,
        rule_set_path=DEFAULT_VERSION_SETS_PATH,
        rules_version="1.0",
        column_namespace=None,
    )
    rules.load()
    result = rules.validate(frame)
    return {name: check.status.value for name, check in result.checklist.items()}


@pytest.fixture
def demo_csv(engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    load_demo_fleet(engine)
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    out = tmp_path / "focus-1.0.csv"
    window = ["--start", DEMO_START.isoformat(), "--end", DEMO_END.isoformat()]
    result = CliRunner().invoke(
        cli_app, ["export", "focus", *window, "--focus-version", "1.0", "-o", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    return out


def test_every_check_passes_under_the_validators_column_ids(demo_csv: Path, validator_dir: None) -> None:
    checks = statuses(demo_csv, rename=True)
    assert len(checks) == 133
    assert {name for name, status in checks.items() if status != "passed"} == set()


def test_as_shipped_it_fails_only_its_stale_column_ids(demo_csv: Path, validator_dir: None) -> None:
    checks = statuses(demo_csv)
    assert {name for name, status in checks.items() if status != "passed"} == STALE_CHECKS


def test_the_foundations_own_sample_fails_the_same_checks(tmp_path: Path, validator_dir: None) -> None:
    sample = tmp_path / "focus_sample.csv"
    with gzip.open(SAMPLE) as src, sample.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    failed = {name for name, status in statuses(sample).items() if status == "failed"}
    assert failed >= STALE_CHECKS
