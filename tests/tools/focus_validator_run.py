"""Run focus-validator's FOCUS 1.0 rule set on a CSV and print each check's status as JSON.

Runs under .venv-focus's Python (scripts/focus-validator-venv), not the project's: the validator pins
numpy<2. ``--rename`` reads the file under the validator's stale 1.0-preview column ids
(tests/export/test_focus_validator.py says why).

    .venv-focus/bin/python tests/tools/focus_validator_run.py FILE.csv [--rename]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import focus_validator
from focus_validator.data_loaders.data_loader import DataLoader
from focus_validator.rules.spec_rules import SpecRules
from focus_validator.validator import DEFAULT_VERSION_SETS_PATH

#: FOCUS 1.0's column id → the id focus-validator 1.0.0 checks.
VALIDATOR_IDS = {
    "ProviderName": "Provider",
    "PublisherName": "Publisher",
    "InvoiceIssuerName": "InvoiceIssuer",
    "ResourceId": "ResourceID",
}


def main(argv: list[str]) -> None:
    csv = Path(argv[0]).resolve()
    rename = "--rename" in argv[1:]
    # It reads its ISO 4217 list from a path relative to the working directory
    # ("focus_validator/utils/currency_codes.csv"): run it from its installation's parent.
    os.chdir(Path(focus_validator.__file__).parents[1])
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
    json.dump({name: check.status.value for name, check in result.checklist.items()}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
