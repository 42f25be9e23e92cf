"""devices (Relay connection, keyset paging, page-size cap) and connectors."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from conftest import Gql
from ledger_rows import at

from service.models import ConnectorState, Device

DEVICES = """query($f: DeviceFilter, $n: Int, $a: String){ devices(filter: $f, first: $n, after: $a) {
  totalCount edges { cursor node { deviceId environment gpuModel gpuFraction migProfile metrics firstSeen } }
  pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""


@pytest.fixture
def fleet(put) -> None:  # type: ignore[no-untyped-def]
    devices: list[Any] = [
        Device(device_id=f"GPU-{i}", source="test", environment="aws" if i % 2 else "onprem",
               gpu_model="H200", metrics="gpu_util,sm_active", first_seen=at(0), last_seen=at(5))
        for i in range(5)
    ]  # fmt: skip
    devices.append(
        Device(device_id="MIG-0/1g", source="test", environment="onprem", gpu_model="H200",
               mig_profile="1g.18gb", gpu_fraction=1 / 7, parent_device_id="GPU-0", first_seen=at(0),
               last_seen=at(5))
    )  # fmt: skip
    states = [
        ConnectorState(name="dcgm", type="prometheus", status="OK", watermark=at(5), last_run_at=at(5),
                       last_success_at=at(5)),
        ConnectorState(name="cur", type="aws_cur", status="FAILED_CONNECTION", last_run_at=at(4),
                       last_error="AccessDenied"),
    ]  # fmt: skip
    put([*devices, *states])


def page(gql: Gql, **variables: Any) -> dict[str, Any]:
    r = gql(DEVICES, variables)
    assert "errors" not in r, r
    result: dict[str, Any] = r["data"]["devices"]
    return result


def test_paging_through_all_devices(gql: Gql, fleet: None) -> None:
    seen, after, pages = [], None, 0
    while True:
        p = page(gql, n=2, a=after)
        pages += 1
        assert p["totalCount"] == 6
        seen += [e["node"]["deviceId"] for e in p["edges"]]
        assert p["pageInfo"]["hasPreviousPage"] is (after is not None)
        if not p["pageInfo"]["hasNextPage"]:
            break
        after = p["pageInfo"]["endCursor"]
        assert base64.urlsafe_b64decode(after).decode() == seen[-1]
    assert seen == ["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-4", "MIG-0/1g"] and pages == 3


def test_device_fields_and_filter(gql: Gql, fleet: None) -> None:
    p = page(gql, f={"environment": ["onprem"], "deviceId": ["MIG-0/1g", "GPU-2"]})
    assert p["totalCount"] == 2
    mig = p["edges"][1]["node"]
    assert mig == {
        "deviceId": "MIG-0/1g", "environment": "onprem", "gpuModel": "H200", "gpuFraction": 1 / 7,
        "migProfile": "1g.18gb", "metrics": [], "firstSeen": "2025-01-06T00:00:00+00:00",
    }  # fmt: skip
    assert p["edges"][0]["node"]["metrics"] == ["gpu_util", "sm_active"]
    empty = page(gql, n=0)
    assert (
        empty["edges"] == []
        and empty["pageInfo"]["hasNextPage"] is True
        and empty["pageInfo"]["endCursor"] is None
    )


def test_page_size_cap_and_bad_cursor(gql: Gql, fleet: None) -> None:
    [err] = gql(DEVICES, {"n": 61})["errors"]  # the test app's page_size_max is 60
    assert err["extensions"]["code"] == "PAGE_SIZE_TOO_LARGE" and "60" in err["message"]
    assert len(page(gql, n=60)["edges"]) == 6
    [err] = gql(DEVICES, {"a": "%%%"})["errors"]
    assert err["extensions"]["code"] == "INVALID_ARGUMENT"
    [err] = gql(DEVICES, {"n": -1})["errors"]
    assert err["extensions"]["code"] == "INVALID_ARGUMENT"


def test_connectors(gql: Gql, fleet: None) -> None:
    r = gql("{ connectors { name type status watermark lastRunAt lastSuccessAt lastError } }")
    assert r["data"]["connectors"] == [
        {"name": "cur", "type": "aws_cur", "status": "FAILED_CONNECTION", "watermark": None,
         "lastRunAt": "2025-01-06T04:00:00+00:00", "lastSuccessAt": None, "lastError": "AccessDenied"},
        {"name": "dcgm", "type": "prometheus", "status": "OK", "watermark": "2025-01-06T05:00:00+00:00",
         "lastRunAt": "2025-01-06T05:00:00+00:00", "lastSuccessAt": "2025-01-06T05:00:00+00:00",
         "lastError": None},
    ]  # fmt: skip
    assert dt.datetime.fromisoformat(r["data"]["connectors"][1]["watermark"]) == at(5)
