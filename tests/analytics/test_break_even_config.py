"""breakEven's configuration: the bundled price catalog, an operator's own catalog file and
``[[rent_options]]`` — refused at start, naming the file, line or table, when wrong."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from fractions import Fraction
from pathlib import Path

import pytest

from service.billing.catalog import bundled_catalog
from service.pricing.break_even import RateSource, RentOption, listed_prices, same_gpu
from service.pricing.common import PricingConfigError
from service.pricing.price_catalog import bundled_price_catalog, load_price_catalog, parse_catalog
from service.settings import ConfigError, load_settings

HEADER = "provider,instance_type,region,price_per_instance_hour,currency,as_of,source\n"
FIRST = "# mine, version 7 (2026-11-30)\n"


def test_the_bundled_catalog_is_dated_sourced_and_priced_per_gpu() -> None:
    catalog = bundled_price_catalog()
    assert catalog.label == "2026.12.1 (2026-12-02)"
    assert {p.provider for p in catalog.prices} == {"aws", "gcp", "azure"}
    instances = bundled_catalog()
    for p in catalog.prices:  # every listed type has its GPUs in the instance catalog
        assert instances.get(p.instance_type) is not None, p.instance_type
        assert p.as_of <= catalog.date and p.source in {"aws-pl", "gcp-sku", "azure-rp"}
    per_gpu = {(p.provider, p.instance_type): p.per_gpu_hour for p in listed_prices(catalog, instances, [])}
    assert per_gpu[("aws", "p5.48xlarge")] == Fraction("6.88")
    assert per_gpu[("azure", "Standard_ND96isr_H100_v5")] == Fraction("12.29")
    assert per_gpu[("gcp", "a3-highgpu-8g")] == Fraction("100.455184") / 8
    assert per_gpu[("aws", "p4d.24xlarge")] == Fraction("21.957642") / 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "first line"),
        ("provider,instance_type\n", "first line"),
        (FIRST + "a,b,c\n", "header row"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,lots,USD,2026-11-01,x\n", "line 3: price 'lots'"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,-1,USD,2026-11-01,x\n", "positive"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,NaN,USD,2026-11-01,x\n", "positive"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,1,dollars,2026-11-01,x\n", "ISO 4217"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,1,USD,yesterday,x\n", "not a date"),
        (FIRST + HEADER + "aws,,us-east-1,1,USD,2026-11-01,x\n", "non-empty"),
        (FIRST + HEADER + "aws,p5.48xlarge,us-east-1,1,USD,2026-11-01,x\n" * 2, "listed twice"),
    ],
)
def test_a_broken_catalog_is_refused_naming_where(text: str, message: str) -> None:
    with pytest.raises(PricingConfigError, match="prices.csv") as err:
        parse_catalog(text, "prices.csv")
    assert message in str(err.value)


def test_an_operators_catalog_replaces_the_bundled_one(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(FIRST + HEADER + "aws,p5.48xlarge,eu-west-1,60.00,EUR,2026-11-15,quote\n")
    catalog = load_price_catalog(path)
    assert (catalog.version, catalog.date) == ("7", dt.date(2026, 11, 30))
    [price] = catalog.prices
    assert (price.region, price.price_per_instance_hour, price.currency) == ("eu-west-1", D("60.00"), "EUR")
    with pytest.raises(PricingConfigError, match="cannot read"):
        load_price_catalog(tmp_path / "missing.csv")


def test_rent_options_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text(
        """
[[rent_options]]
name = "p5-od-negotiated"
provider = "AWS"
instance_type = "p5.48xlarge"
region = "us-east-1"
option = "on_demand"
price_per_instance_hour = "50"
currency = "usd"

[[rent_options]]
name = "h100-spot"
provider = "gcp"
gpu_model = "NVIDIA H100 80GB"
option = "spot"
price_per_gpu_hour = "2.25"
currency = "USD"
"""
    )
    prices = load_settings(config).planning().prices
    p5 = [p for p in prices if p.instance_type == "p5.48xlarge"]
    # The configured on-demand price replaced the catalog's in its region.
    assert [(p.source, p.option, p.per_gpu_hour, p.detail) for p in p5] == [
        (RateSource.CONFIG, RentOption.ON_DEMAND, Fraction(50, 8), "rent option p5-od-negotiated")
    ]
    spot = [p for p in prices if p.option is RentOption.SPOT]
    assert [(p.provider, p.gpu_model, p.per_gpu_hour, p.currency) for p in spot] == [
        ("gcp", "NVIDIA H100 80GB", Fraction("2.25"), "USD")
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "2y"\nprice_per_gpu_hour = "1"\n'
         'currency = "USD"', 'key "option"'),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\ncurrency = "USD"',
         "give price_per_gpu_hour or price_per_instance_hour"),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\nprice_per_gpu_hour = "1"\n'
         'price_per_instance_hour = "8"\ncurrency = "USD"', "give price_per_gpu_hour or"),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\nprice_per_instance_hour = "8"\n'
         'currency = "USD"', "needs instance_type"),
        ('name = "x"\nprovider = "aws"\noption = "spot"\nprice_per_gpu_hour = "1"\ncurrency = "USD"',
         "give instance_type or gpu_model"),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\nprice_per_gpu_hour = "-1"\n'
         'currency = "USD"', 'key "price_per_gpu_hour"'),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\nprice_per_gpu_hour = "inf"\n'
         'currency = "USD"', 'key "price_per_gpu_hour"'),
        ('name = "x"\nprovider = "aws"\ngpu_model = "H100"\noption = "spot"\nprice_per_gpu_hour = "1"\n'
         'currency = "USD"\ncolour = "red"', 'key "colour"'),
    ],
)  # fmt: skip
def test_a_wrong_rent_option_fails_at_start(tmp_path: Path, table: str, message: str) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text(f"[[rent_options]]\n{table}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert "[[rent_options]] #1" in str(err.value) and message in str(err.value)


def test_an_instance_price_of_an_unknown_type_fails_at_start(tmp_path: Path) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text(
        '[[rent_options]]\nname = "x"\nprovider = "aws"\ninstance_type = "p9.huge"\noption = "1y"\n'
        'price_per_instance_hour = "8"\ncurrency = "USD"\n'
    )
    with pytest.raises(PricingConfigError, match="'p9.huge' is not in the instance catalog"):
        load_settings(config).planning()


@pytest.mark.parametrize(
    ("owned", "listed", "same"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB", True),
        ("NVIDIA H200", "NVIDIA H200 141GB", True),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB", True),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 40GB", False),
        ("NVIDIA A10G", "NVIDIA A100 40GB", False),
        ("NVIDIA H100 NVL", "NVIDIA H100 80GB", False),
        ("NVIDIA", "NVIDIA H100 80GB", False),  # vendor words alone name no GPU
    ],
)
def test_gpu_names_match_by_their_words(owned: str, listed: str, same: bool) -> None:
    assert same_gpu(owned, listed) is same
