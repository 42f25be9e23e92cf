"""The built-in demo: a synthetic fleet priced like a real one, for ``gpu-ledger serve --demo``.

Used only when the configuration has no connectors. The on-prem site ``dc1`` has DGX-class TCO
numbers; the cloud rate cards are public on-demand prices divided by GPUs per instance.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from connectors.registry import Registry, default_registry
from service.pricing.break_even import RentOptionConfig
from service.pricing.rates import RateCardConfig
from service.pricing.tco import SiteConfig
from service.scheduler import catch_up_window
from service.settings import Settings
from service.telemetry import utc_now

DEMO_BACKFILL_DAYS = 30

DEMO_CONNECTORS: list[dict[str, Any]] = [
    {"name": "demo", "type": "synthetic", "backfill_days": DEMO_BACKFILL_DAYS, "interval_s": 300.0},
]

DEMO_SITES: list[dict[str, Any]] = [
    {
        "name": "dc1",
        "match_region": "dc1",
        "currency": "USD",
        # GPU's share of its server's price: a DGX H100 is ~$320k for 8 GPUs, a DGX A100 ~$200k.
        "capex_per_gpu": {
            "NVIDIA H100 80GB HBM3": "40000",
            "NVIDIA H200": "45000",
            "NVIDIA A100-SXM4-80GB": "25000",
        },
        "default_capex_per_gpu": "30000",
        "amortization_years": "4",
        "price_per_kwh": "0.12",
        "pue": "1.4",
        "opex_per_gpu_hour": "0.35",  # support contract, staff and rack space per GPU
        "assumed_load": "0.6",
    }
]

_FROM = "2020-01-01T00:00:00Z"

DEMO_RATE_CARDS: list[dict[str, Any]] = [
    # (instance type, on-demand $/h, GPUs per instance) → $ per GPU-hour
    {
        "name": "aws-p5.48xlarge",
        "environment": "aws",
        "instance_type": "p5.48xlarge",
        "rate_per_gpu_hour": "6.88",
    },
    {
        "name": "aws-g5.12xlarge",
        "environment": "aws",
        "instance_type": "g5.12xlarge",
        "rate_per_gpu_hour": "1.418",
    },
    {
        "name": "gcp-a3-highgpu-8g",
        "environment": "gcp",
        "instance_type": "a3-highgpu-8g",
        "rate_per_gpu_hour": "11.03125",
    },
    {
        "name": "azure-ND96isr_H100_v5",
        "environment": "azure",
        "instance_type": "Standard_ND96isr_H100_v5",
        "rate_per_gpu_hour": "12.29",
    },
]
for _card in DEMO_RATE_CARDS:
    _card.update(currency="USD", valid_from=_FROM)

#: breakEven's renting options beside the public catalog's on-demand prices. Illustrative figures
#: (the billing fixtures' scenario, tests/fixtures/README.md): a 1-year Compute Savings Plan at 70 %
#: of p5's on-demand price, an Azure 1-year reservation's amortized rate and a spot price.
DEMO_RENT_OPTIONS: list[dict[str, Any]] = [
    {"name": "demo-p5-sp-1y", "provider": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1",
     "option": "1y", "price_per_instance_hour": "38.528", "currency": "USD"},
    {"name": "demo-nd-h100-ri-1y", "provider": "azure", "instance_type": "Standard_ND96isr_H100_v5",
     "region": "eastus", "option": "1y", "price_per_instance_hour": "62.24", "currency": "USD"},
    {"name": "demo-nd-h100-spot", "provider": "azure", "instance_type": "Standard_ND96isr_H100_v5",
     "region": "eastus", "option": "spot", "price_per_instance_hour": "19.664", "currency": "USD"},
]  # fmt: skip


def with_demo(settings: Settings, registry: Registry | None = None) -> Settings:
    """``settings`` plus the demo connector, site and rate cards (when it has no connectors)."""
    if settings.connectors:
        return settings
    reg = registry or default_registry()
    return settings.model_copy(
        update={
            "connectors": [reg.validate(t) for t in DEMO_CONNECTORS],
            "sites": [*settings.sites, *(SiteConfig.model_validate(s) for s in DEMO_SITES)],
            "rate_cards": [
                *settings.rate_cards,
                *(RateCardConfig.model_validate(c) for c in DEMO_RATE_CARDS),
            ],
            "rent_options": [
                *settings.rent_options,
                *(RentOptionConfig.model_validate(o) for o in DEMO_RENT_OPTIONS),
            ],
        }
    )


def load_demo(
    engine: Engine,
    settings: Settings,
    *,
    ingest: Callable[..., Any],
    on_chunk: Callable[..., Any] | None = None,
    on_window: Callable[[dt.datetime, dt.datetime], None] | None = None,
    registry: Registry | None = None,
    now: dt.datetime | None = None,
) -> Any:
    """Ingest the demo connector up to now: 30 days the first time, from the watermark after."""
    config = settings.connector(DEMO_CONNECTORS[0]["name"])
    connector = (registry or default_registry()).build(config)
    start, end = catch_up_window(engine, config.name, connector, now or utc_now(), config.backfill_days)
    if on_window is not None:
        on_window(start, end)
    return ingest(
        engine,
        config.name,
        connector,
        start,
        end,
        sites=settings.sites,
        idle_threshold_pct=settings.idle_threshold_pct,
        on_chunk=on_chunk,
    )
