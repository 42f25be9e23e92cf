"""Options several ``gpu-ledger`` commands share, declared once: typer reads each from the
``Annotated`` alias a command's parameter is typed with (the parameter's name gives the flag where
the alias names none)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="TOML config file (default: $GPU_LEDGER_CONFIG).", show_default=False),
]
#: ``metric``: the utilization metric of effective GPU-hours (default: each device's own).
MetricOpt = Annotated[
    str | None,
    typer.Option(
        help="GPU_UTIL, SM_ACTIVE, TENSOR_ACTIVE or MEM_BW (default: each device's own).", show_default=False
    ),
]
