"""A directory of CUR files imports without the `aws` extra: boto3 is needed for S3 only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent.parent / "fixtures" / "aws" / "cur2_2025-09_daily.csv"


def test_local_cur_files_need_no_boto3() -> None:
    code = (
        "import sys, datetime as dt\n"
        "sys.modules['boto3'] = sys.modules['botocore'] = None  # as if not installed\n"
        "from connectors.aws_cur import AwsCurConfig, AwsCurConnector\n"
        f"c = AwsCurConnector(AwsCurConfig(name='b', path={str(FIXTURE)!r}))\n"
        "sep, oct = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)\n"
        "batches = list(c.read(sep, oct))\n"
        "print(sum(b.lines.height for b in batches))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "137"
