"""devices(search:): a case-insensitive substring over the columns a person would type, with LIKE's
wildcards taken literally, combined with the filter and paging; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Gql
from ledger_rows import at

from service.analytics.devices import SEARCH_MAX_CHARS
from service.models import Device

QUERY = """query($s: String, $f: DeviceFilter, $n: Int!, $a: String) {
  devices(search: $s, filter: $f, first: $n, after: $a) {
    totalCount edges { node { deviceId } } pageInfo { hasNextPage endCursor } } }"""


@pytest.fixture
def fleet(put) -> None:  # type: ignore[no-untyped-def]
    def device(device_id: str, **columns: Any) -> Device:
        columns = {"source": "dcgm-east", "environment": "onprem", **columns}
        return Device(device_id=device_id, first_seen=at(0), last_seen=at(1), **columns)

    put(
        [
            device("GPU-aaa", node="DGX-H100-001", gpu_model="NVIDIA H100 80GB HBM3", region="dc1"),
            device("GPU-bbb", node="dgx-h100-002", gpu_model="NVIDIA H100 80GB HBM3", region="dc1"),
            device("GPU-ccc", node="dgx-a100-001", gpu_model="NVIDIA A100-SXM4-80GB", region="dc2"),
            device(
                "i-0abc/gpu0",
                environment="aws",
                instance_id="i-0abc",
                instance_type="p5.48xlarge",
                account="123456789012",
            ),  # fmt: skip
            device("GPU-100%_x", node="odd"),
        ]
    )


def ids(gql: Gql, **variables: Any) -> list[str]:
    answer = gql(QUERY, {"n": 50, **variables})
    assert "errors" not in answer, answer
    return [e["node"]["deviceId"] for e in answer["data"]["devices"]["edges"]]


def test_search_matches_any_listed_column_without_case(gql: Gql, fleet: None) -> None:
    assert ids(gql, s="h100") == ["GPU-aaa", "GPU-bbb"]  # node and model, either case
    assert ids(gql, s="DC2") == ["GPU-ccc"]  # region
    assert ids(gql, s="p5.48") == ["i-0abc/gpu0"]  # instance type
    assert ids(gql, s="456789") == ["i-0abc/gpu0"]  # account
    assert ids(gql, s="east") == ids(gql) and len(ids(gql)) == 5  # connector
    assert ids(gql, s="  ") == ids(gql)  # blank: no search
    assert ids(gql, s="nothing-like-this") == []


def test_wildcards_are_literal(gql: Gql, fleet: None) -> None:
    assert ids(gql, s="%") == ["GPU-100%_x"]
    assert ids(gql, s="0%_") == ["GPU-100%_x"]
    assert ids(gql, s="_") == ["GPU-100%_x"]


def test_search_with_filter_and_paging(gql: Gql, fleet: None) -> None:
    assert ids(gql, s="gpu-", f={"environment": ["onprem"]}) == [
        "GPU-100%_x",
        "GPU-aaa",
        "GPU-bbb",
        "GPU-ccc",
    ]
    first = gql(QUERY, {"s": "dgx", "n": 2})["data"]["devices"]
    assert first["totalCount"] == 3 and first["pageInfo"]["hasNextPage"] is True
    assert ids(gql, s="dgx", n=2, a=first["pageInfo"]["endCursor"]) == ["GPU-ccc"]


def test_too_long_a_search_is_refused(gql: Gql, fleet: None) -> None:
    [error] = gql(QUERY, {"s": "x" * (SEARCH_MAX_CHARS + 1), "n": 5})["errors"]
    assert error["extensions"]["code"] == "INVALID_ARGUMENT" and str(SEARCH_MAX_CHARS) in error["message"]
