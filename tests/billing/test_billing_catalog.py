"""The GPU instance catalog: bundled entries, config overrides, fill_gpus and unknown GPU types."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from billing_fakes import lines, usage

from service.billing.catalog import (
    InstanceTypeConfig,
    bundled_catalog,
    fill_gpus,
    load_catalog,
    unknown_gpu_types,
)
from service.settings import ConfigError, load_settings


@pytest.mark.parametrize(
    ("instance_type", "model", "count"),
    [
        ("p5.48xlarge", "NVIDIA H100 80GB", 8),
        ("p3.2xlarge", "NVIDIA V100 16GB", 1),
        ("p4de.24xlarge", "NVIDIA A100 80GB", 8),
        ("g4dn.12xlarge", "NVIDIA T4", 4),
        ("g4dn.metal", "NVIDIA T4", 8),
        ("g5.12xlarge", "NVIDIA A10G", 4),
        ("g6.48xlarge", "NVIDIA L4", 8),
        ("g6e.2xlarge", "NVIDIA L40S", 1),
        ("a2-megagpu-16g", "NVIDIA A100 40GB", 16),
        ("a3-highgpu-8g", "NVIDIA H100 80GB", 8),
        ("a3-ultragpu-8g", "NVIDIA H200 141GB", 8),
        ("g2-standard-24", "NVIDIA L4", 2),
        ("g2-standard-32", "NVIDIA L4", 1),
        ("Standard_ND96isr_H100_v5", "NVIDIA H100 80GB", 8),
        ("standard_nd96isr_h100_v5", "NVIDIA H100 80GB", 8),  # Azure spells sizes in either case
        (" STANDARD_NC64AS_T4_V3 ", "NVIDIA T4", 4),
        ("Standard_NC80adis_H100_v5", "NVIDIA H100 NVL", 2),
    ],
)
def test_bundled_lookups(instance_type: str, model: str, count: int) -> None:
    entry = bundled_catalog().get(instance_type)
    assert entry is not None and (entry.gpu_model, entry.gpu_count) == (model, count)


def test_bundled_catalog_is_versioned_and_consistent() -> None:
    catalog = bundled_catalog()
    assert catalog.version == "2026.12.1 (2026-12-01)"
    assert len(catalog) == 101  # 86 cloud types + 15 OCI GPU shapes
    assert {e.provider for e in catalog.entries()} == {"aws", "gcp", "azure", "oracle"}
    assert all(e.gpu_count > 0 and (e.gpu_memory_gib or 0) > 0 for e in catalog.entries())
    # N1 machines carry no GPU of their own: attached GPUs are GPU SKU rows.
    assert "n1-standard-8" not in catalog and catalog.gpu_count("n1-standard-8") is None


def test_overrides_from_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_LEDGER_CONFIG", raising=False)
    path = tmp_path / "c.toml"
    path.write_text(
        "[[instance_types]]\n"
        'instance_type = "g9.48xlarge"\ngpu_model = "NVIDIA B300"\ngpu_count = 8\n'
        'gpu_memory_gib = 288\nprovider = "aws"\n'
        "[[instance_types]]\n"
        'instance_type = "P5.48XLARGE"\ngpu_model = "NVIDIA H100 80GB (as billed)"\ngpu_count = 4\n'
    )
    catalog = load_settings(path).instance_catalog()
    assert catalog.version == "2026.12.1 (2026-12-01) + 2 configured"
    added, replaced = catalog.get("g9.48xlarge"), catalog.get("p5.48xlarge")
    assert added is not None and (added.provider, added.gpu_count, added.gpu_memory_gib) == ("aws", 8, 288.0)
    # A replaced entry keeps the bundled provider when the table names none.
    assert replaced is not None and (replaced.provider, replaced.gpu_count) == ("aws", 4)
    assert bundled_catalog().gpu_count("p5.48xlarge") == 8  # the bundled one is untouched


def test_bad_instance_type_table_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[[instance_types]]\ninstance_type = "x.large"\ngpu_model = "X"\ngpu_count = 0\n')
    with pytest.raises(ConfigError, match=r'\[\[instance_types\]\] #1: key "gpu_count"'):
        load_settings(path)


def test_fill_gpus_exact() -> None:
    frame = lines(
        "f.csv",
        [
            usage("a"),  # p5.48xlarge, 24 Hrs
            usage("b", instance_type="g5.12xlarge", usage_quantity="8.5"),
            usage("c", charge_type="SavingsPlanNegation", usage_quantity="24"),
            usage("d", charge_category="Tax", usage_unit=None, usage_quantity=None),
            usage("e", instance_type=None, service="AmazonEBS", usage_unit="GB-Mo", usage_quantity="1800"),
            usage("f", gpu_count=2),  # a count the source gives wins over the catalog's
            # GCP: the GPU SKU row's hours are GPU-hours; the core row of the same machine bills none.
            usage("g", provider="gcp", instance_type="a3-highgpu-8g", is_gpu_sku=True, usage_unit="hour",
                  usage_quantity="8"),
            usage("h", provider="gcp", instance_type="a3-highgpu-8g", usage_unit="hour",
                  usage_quantity="208"),
            usage("i", provider="gcp", instance_type="n1-standard-8", is_gpu_sku=True, usage_unit="hour",
                  usage_quantity="1"),
            usage("j", instance_type="Standard_ND96isr_H100_v5", provider="azure", usage_unit="1 Hour",
                  usage_quantity="708"),
            usage("k", instance_type="g9.xlarge"),
            # a negative usage row (a finding): no negative billed GPU-hours, on either kind of row
            usage("l", usage_quantity="-3"),
            usage("m", provider="gcp", instance_type="a3-highgpu-8g", is_gpu_sku=True, usage_unit="hour",
                  usage_quantity="-2"),
        ],
    )  # fmt: skip
    filled = fill_gpus(frame, load_catalog())
    got = dict(
        zip(filled["line_key"], zip(filled["gpu_count"], filled["gpu_hours"], strict=True), strict=True)
    )
    assert got == {
        "a": (8, Decimal("192")),
        "b": (4, Decimal("34")),
        "c": (8, Decimal(0)),
        "d": (8, Decimal(0)),
        "e": (None, None),
        "f": (2, Decimal("48")),
        "g": (8, Decimal("8")),
        "h": (8, Decimal(0)),
        "i": (None, Decimal("1")),
        "j": (8, Decimal("5664")),
        "k": (None, None),  # unknown: not 0 GPUs
        "l": (8, Decimal(0)),
        "m": (8, Decimal(0)),
    }
    assert filled.schema == frame.schema and filled["line_key"].to_list() == frame["line_key"].to_list()


def test_unknown_gpu_looking_types_are_reported() -> None:
    frame = lines(
        "f.csv",
        [
            usage(str(i), instance_type=t)
            for i, t in enumerate(
                [
                    "g9.xlarge",
                    "p6-b200.48xlarge",
                    "a4-highgpu-8g",
                    "Standard_NV6ads_A10_v5",
                    "p5.48xlarge",
                    "m5.large",
                    "n1-standard-8",
                    "Standard_D4s_v5",
                    "trn1.32xlarge",
                ]
            )
        ],
    )
    assert unknown_gpu_types(fill_gpus(frame)) == [
        "Standard_NV6ads_A10_v5",
        "a4-highgpu-8g",
        "g9.xlarge",
        "p6-b200.48xlarge",
    ]
    override = load_catalog([InstanceTypeConfig(instance_type="g9.xlarge", gpu_model="X", gpu_count=1)])
    assert "g9.xlarge" not in unknown_gpu_types(fill_gpus(frame, override), override)
    assert unknown_gpu_types(frame.clear()) == []
