"""connectors.sdk.vendors: the vendor a model name says, the same in Python and in Polars."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.sdk import DeviceInfo
from connectors.sdk.vendors import vendor_expr, vendor_of, with_vendor

NAMED = {
    "NVIDIA H100 80GB HBM3": "nvidia", "H100": "nvidia", "NVIDIA A10G": "nvidia", "T4": "nvidia",
    "Tesla V100-SXM2-16GB": "nvidia", "NVIDIA GH200 480GB": "nvidia", "B200": "nvidia", "L40S": "nvidia",
    "AMD Instinct MI300X": "amd", "MI250X": "amd", "Radeon PRO W7900": "amd",
    "Intel Data Center GPU Max 1550": "intel", "Intel(R) Data Center GPU Flex 170": "intel",
    "Gaudi2": "intel",
    "Ascend 910B3": "huawei", "Ascend910B": "huawei",
    "102-D65208-0C": None, "": None, "GPU": None, "A0\u00b9": "nvidia", "MI300\u00b9": "amd",
    "\u212aevin": None,  # KELVIN SIGN: no ASCII k
}  # fmt: skip


def test_models_as_vendors_name_them() -> None:
    assert {model: vendor_of(model) for model in NAMED} == NAMED
    assert vendor_of(None) is None
    frame = pl.DataFrame({"gpu_model": [*NAMED, None]})
    assert frame.select(vendor_expr())["vendor"].to_list() == [*NAMED.values(), None]


def test_a_source_that_names_the_vendor_wins() -> None:
    mi = DeviceInfo("d", "onprem", gpu_model="NVIDIA H100", vendor="amd")  # the source knows better
    assert with_vendor(mi) is mi
    assert with_vendor(DeviceInfo("d", "onprem", gpu_model="H100")).vendor == "nvidia"
    unknown = DeviceInfo("d", "onprem", gpu_model="102-D65208-0C")
    assert with_vendor(unknown) is unknown


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=20))
def test_polars_and_python_agree_on_any_text(models: list[str]) -> None:
    got = pl.DataFrame({"gpu_model": models}, schema={"gpu_model": pl.String}).select(vendor_expr())
    assert got["vendor"].to_list() == [vendor_of(m) for m in models]


def test_a_pushed_device_names_one_of_the_four_vendors_or_none() -> None:
    from pydantic import ValidationError

    from service.push_batch import DeviceIn

    assert (
        DeviceIn.model_validate({"device_id": "GPU-1", "environment": "onprem", "vendor": "amd"}).vendor
        == "amd"
    )
    assert DeviceIn.model_validate({"device_id": "GPU-1", "environment": "onprem"}).vendor is None
    for bad in ("AMD", "qualcomm", "nvidia\x00", "x" * 17):
        with pytest.raises(ValidationError, match="vendor"):
            DeviceIn.model_validate({"device_id": "GPU-1", "environment": "onprem", "vendor": bad})
