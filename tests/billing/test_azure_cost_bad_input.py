"""azure_cost on broken exports: bad rows refused naming file, line and column; good rows land;
read == accepted + refused; a missing column refuses the file."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.billing import BillingFileError

EA = Path(__file__).parent.parent / "fixtures" / "azure" / "ea_amortized_cost_2025-09.csv"
ROWS = (
    EA.read_bytes().splitlines()
)  # line 2: A1 09/01 (1493.76), 3: A2 09/01 (2359.68), 4: disk 09/01 (4.096)
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)


def read(tmp_path: Path) -> list:
    return list(
        AzureCostConnector(AzureCostConfig(name="b", type="azure_cost", path=str(tmp_path))).read(SEP, OCT)
    )


def test_rows_are_refused_only_when_money_cannot_be_read(tmp_path: Path) -> None:
    rows = list(ROWS[:12])
    rows[1] = rows[1].replace(
        b",1493.76,", b",1.493,76,", 1
    )  # line 2: a field too many shifts nothing: ragged
    rows[2] = rows[2].replace(b",2359.68,", b",n/a,")  # line 3
    rows[3] = rows[3].replace(b",0.0333333333,", b",-0.0333333333,")  # line 4: negative quantity
    rows[4] = rows[4].replace(b",USD,", b",US$,")  # line 5
    rows[5] = rows[5].replace(b"inference", b"inf\xe9rence")  # line 6: Latin-1 in Tags
    rows[6] = rows[6].replace(b",Usage,", b",Bonus,")  # line 7
    rows[7] = rows[7].replace(b'"""team"": ""llm-research""', b'"team=llm')  # line 8: tags not JSON: kept
    rows.append(ROWS[9])  # line 13: line 10 again
    rows.append(ROWS[10][:200])  # line 14: truncated
    (tmp_path / "cost.csv").write_bytes(b"\n".join(rows) + b"\n")
    (batch,) = read(tmp_path)
    refused = {r.line: (r.column, r.reason) for r in batch.refused}
    assert {r.file for r in batch.refused} == {str(tmp_path / "cost.csv")}
    assert batch.read == 13 and batch.read == batch.lines.height + len(batch.refused)
    # refused: money, currency, the raw record (bytes, shape) or a true duplicate — nothing else
    assert batch.lines["line_no"].to_list() == [4, 7, 8, 9, 10, 11, 12]
    assert refused[3] == ("CostInBillingCurrency", "not a number: 'n/a'")
    assert refused[5] == ("BillingCurrencyCode", "unknown currency code: 'US$'")
    assert refused[6] == ("Tags", "bytes that are not UTF-8")
    assert refused[13] == (None, "duplicated line: the same as line 10")
    assert sorted(refused) == [2, 3, 5, 6, 13, 14]  # and a shifted and a truncated record
    # imported with a finding: a negative quantity on a usage row, an unknown ChargeType, tags
    # that are no JSON object (kept whole)
    found = {f.rule: (f.column, f.count, f.examples, f.provider) for f in batch.findings}
    assert found == {
        "negative_usage": ("Quantity", 1, ((4, "-0.0333333333"),), "azure"),
        "unknown_value": ("ChargeType", 1, ((7, "Bonus"),), "azure"),
        "invalid_tags": (
            "Tags",
            1,
            ((8, 'team=llm,"project": "pretrain-70b","cost-center": "cc-1042"'),),
            "azure",
        ),
    }
    bonus = batch.lines.filter(batch.lines["line_no"] == 7).row(0, named=True)
    assert (bonus["charge_type"], bonus["charge_category"], bonus["pricing_model"]) == (
        "Bonus",
        "Adjustment",
        None,
    )
    tags = batch.lines.filter(batch.lines["line_no"] == 8)["tags"][0]
    assert tags.startswith('{"azure:unparsed_tags":"team=llm,')
    assert (
        batch.lines["effective_cost"].sum()
        == (Decimal("1493.76") + Decimal("2359.68")) * 2
        + Decimal("4.096") * 3  # 8, 11 (A1), 9, 12 (A2), 4, 7, 10
    )


def test_a_missing_cost_column_refuses_the_file(tmp_path: Path) -> None:
    (tmp_path / "cost.csv").write_bytes(
        b"\n".join([ROWS[0].replace(b"CostInBillingCurrency", b"Kosten"), *ROWS[1:3]])
    )
    [error] = read(tmp_path)  # yielded, as every unreadable file is
    assert isinstance(error, BillingFileError)
    assert re.search(r'cost\.csv, line 1, column "CostInBillingCurrency": missing column', str(error))
