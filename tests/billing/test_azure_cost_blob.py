"""``azure_cost`` reading Cost Management exports from Azure Blob Storage: the real
``azure-storage-blob`` ContainerClient over HTTPS to the fake of ``azurefake/blob.py``.

The September 2025 fixture (fixtures/README.md: 74 rows, 8,016 GPU-hours, 69,943.392 effective on
the GPU VMs, 70,066.272 on all rows) is the newest run of its billing-period folder; an older run
of the same month holds other numbers and must not be read, nor must August's folder.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from azurefake.blob import FakeBlobService, fake_blob_service
from azurefake.server import StaticCredential
from pydantic import SecretStr, ValidationError
from sqlalchemy import func, select

from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.base import ConfigurationError, FatalSourceError, RetriableError
from connectors.billing import BillingBatch
from service.billing.catalog import fill_gpus
from service.billing.ingest import ingest_billing
from service.db import make_engine
from service.models import BillingFile, BillingLine

EA = Path(__file__).parents[1] / "fixtures" / "azure" / "ea_amortized_cost_2025-09.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
EXPORT = "exports/gpu-amortized"
AUG_DIR, SEP_DIR = f"{EXPORT}/20250801-20250831", f"{EXPORT}/20250901-20250930"
OLD_RUN = f"{SEP_DIR}/202509150312/0b6c1f9e-old0-4c1b-9a55-3c2f6b8e0d11"
NEW_RUN = f"{SEP_DIR}/202510020305/7d4e2a10-new0-4f7e-8b21-9e0c5d3a7f42"
WRITING_RUN = f"{SEP_DIR}/202510030301/c3a9e5b2-wip0-4a6d-bc19-1f2e3d4c5b6a"  # no manifest yet
AUG_RUN = f"{AUG_DIR}/202509020300/5e8f3b71-aug0-4d2c-a1e0-7b9c8d6e5f40"
STORAGE_SCOPE = "https://storage.azure.com/.default"


def at(day: int, month: int = 9) -> dt.datetime:
    return dt.datetime(2025, month, day, 3, 0, tzinfo=dt.UTC)


def records(first: int | None = None, last: int | None = None) -> bytes:
    """The fixture's header and its records ``[first:last]``."""
    header, *rows = EA.read_bytes().splitlines(keepends=True)
    return b"".join([header, *rows[first:last]])


def manifest(*names: str, kind: str = "AmortizedCost") -> bytes:
    """A manifest.json as improved exports write it (API 2023-07-01-preview)."""
    return json.dumps(
        {
            "exportConfig": {"exportName": "gpu-amortized", "type": kind, "dataVersion": "2021-10-01"},
            "deliveryConfig": {"partitionData": True, "fileFormat": "Csv", "rootFolderPath": "exports"},
            "runInfo": {
                "runId": names[0].split("/")[-2] if names else "",
                "startDate": "2025-09-01T00:00:00",
            },
            "blobs": [{"blobName": n, "byteCount": 1} for n in names],
        }
    ).encode()


def export_runs(svc: FakeBlobService, *, new_run: bool = True) -> None:
    """August's run, an older September run (its first 30 records: other totals), the newest
    September run (the fixture in two parts, the second gzip'ed) and a run still being written."""
    put = lambda name, data, when: svc.put("exports", name, data, when)  # noqa: E731
    put(f"{AUG_RUN}/part_0_0001.csv", records(), at(2))
    put(f"{AUG_RUN}/manifest.json", manifest(f"{AUG_RUN}/part_0_0001.csv"), at(2))
    put(f"{OLD_RUN}/part_0_0001.csv", records(0, 30), at(15))
    put(f"{OLD_RUN}/manifest.json", manifest(f"{OLD_RUN}/part_0_0001.csv"), at(15))
    put("other-export/20250901-20250930/x/part_0_0001.csv", records(), at(20))  # outside the prefix
    if new_run:
        put(f"{NEW_RUN}/part_0_0001.csv", records(0, 40), at(2, 10))
        put(f"{NEW_RUN}/part_0_0002.csv.gz", gzip.compress(records(40)), at(2, 10))
        parts = (f"{NEW_RUN}/part_0_0001.csv", f"{NEW_RUN}/part_0_0002.csv.gz")
        put(f"{NEW_RUN}/manifest.json", manifest(*parts), at(2, 10))
        put(f"{WRITING_RUN}/part_0_0001.csv", records(0, 5), at(3, 10))


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[FakeBlobService]:
    with fake_blob_service(tmp_path, page_size=3) as service:
        service.containers["exports"] = {}
        yield service


def connector(svc: FakeBlobService, credential: object = None, **keys: object) -> AzureCostConnector:
    keys = {"max_retries": 0, "backoff_s": 0, "timeout_s": 5, **keys}
    config = AzureCostConfig(
        name="bills",
        blob_container_url=svc.container_url("exports"),
        blob_prefix=EXPORT,
        ca_file=svc.ca_path,
        **keys,  # type: ignore[arg-type]
    )
    if "sas_token" in keys:
        return AzureCostConnector(config)
    return AzureCostConnector(config, credential=credential or StaticCredential())


def read(source: AzureCostConnector) -> list[BillingBatch]:
    with source:
        items = list(source.read(SEP, OCT))
    assert all(isinstance(i, BillingBatch) for i in items), items
    return items  # type: ignore[return-value]


def assert_fixture_totals(batches: list[BillingBatch]) -> None:
    lines = fill_gpus(pl.concat([b.lines for b in batches]))
    gpu_vms = lines.filter(pl.col("instance_type") == "Standard_ND96isr_H100_v5")
    assert lines.height == 74 and lines["line_key"].n_unique() == 74
    assert gpu_vms.filter(pl.col("charge_type") == "Usage")["gpu_hours"].sum() == Decimal("8016")
    assert gpu_vms["effective_cost"].sum() == Decimal("69943.392")
    assert lines["effective_cost"].sum() == Decimal("70066.272")


def test_only_the_newest_complete_run_of_a_period_in_the_window_is_read(svc: FakeBlobService) -> None:
    export_runs(svc)
    credential = StaticCredential()
    batches = read(connector(svc, credential))

    base = svc.container_url("exports")
    assert [b.source_file for b in batches] == [
        f"{base}/{NEW_RUN}/part_0_0001.csv",
        f"{base}/{NEW_RUN}/part_0_0002.csv.gz",  # gzip undone
    ]
    assert [(b.read, b.lines.height, b.refused) for b in batches] == [(40, 40, []), (34, 34, [])]
    assert {(b.period_start, b.period_end, b.assembly_id) for b in batches} == {
        (SEP, OCT, "7d4e2a10-new0-4f7e-8b21-9e0c5d3a7f42")  # 20250930 inclusive → 1 Oct
    }
    assert_fixture_totals(batches)
    assert batches[0].lines["source_file"].unique().to_list() == [f"{base}/{NEW_RUN}/part_0_0001.csv"]

    # 9 blobs under the prefix, 3 a page: three List Blobs calls, the 2nd and 3rd with NextMarker.
    lists = [r for r in svc.requests if r.query.get("comp") == ["list"]]
    assert len(lists) == 3
    assert [("marker" in r.query, r.query["prefix"]) for r in lists] == [
        (False, [f"{EXPORT}/"]),
        (True, [f"{EXPORT}/"]),
        (True, [f"{EXPORT}/"]),
    ]
    # Downloaded: the newest run's manifest and files only (not the older run, the run still
    # being written, nor August's folder).
    gets = [r.path.removeprefix("/acct/exports/") for r in svc.requests if "comp" not in r.query]
    assert gets == [f"{NEW_RUN}/manifest.json", f"{NEW_RUN}/part_0_0001.csv", f"{NEW_RUN}/part_0_0002.csv.gz"]
    assert {r.headers["authorization"] for r in svc.requests} == {"Bearer test-token"}
    assert set(credential.scopes) == {(STORAGE_SCOPE,)}


def test_export_without_manifests_reads_the_newest_file_of_the_period(svc: FakeBlobService) -> None:
    # Exports without file partitioning write each run's file straight into the date-range folder.
    svc.put("exports", f"{SEP_DIR}/gpu-amortized_1b2c.csv", records(0, 30), at(15))
    svc.put("exports", f"{SEP_DIR}/gpu-amortized_9f8e.csv.gz", gzip.compress(records()), at(2, 10))
    svc.put("exports", f"{AUG_DIR}/gpu-amortized_0a0a.csv", records(), at(2))
    batches = read(connector(svc))
    assert [b.source_file.rsplit("/", 1)[1] for b in batches] == ["gpu-amortized_9f8e.csv.gz"]
    assert (batches[0].period_start, batches[0].period_end) == (SEP, OCT)
    assert_fixture_totals(batches)


def test_a_sas_token_is_sent_but_never_lands_in_source_file(svc: FakeBlobService) -> None:
    export_runs(svc)
    sas = "sv=2025-11-05&sr=c&sp=rl&se=2025-12-01T00%3A00%3A00Z&sig=c2VjcmV0LXNpZw%3D%3D"
    batches = read(connector(svc, sas_token=SecretStr(sas)))
    assert_fixture_totals(batches)
    assert all(r.query.get("sig") == ["c2VjcmV0LXNpZw=="] for r in svc.requests)
    assert all("authorization" not in r.headers for r in svc.requests)
    files = {f for b in batches for f in [b.source_file, *b.lines["source_file"].unique().to_list()]}
    assert files and not any("sig" in f or "?" in f for f in files)


def test_permission_denied_names_the_role_to_grant(svc: FakeBlobService) -> None:
    export_runs(svc)
    svc.fail = lambda request: (403, "AuthorizationPermissionMismatch")
    with pytest.raises(FatalSourceError) as error:
        read(connector(svc))
    assert "Storage Blob Data Reader" in str(error.value) and "AuthorizationPermissionMismatch" in str(
        error.value
    )
    assert len(svc.requests) == 1  # a 403 is not retried


def test_a_missing_container_is_a_configuration_error(svc: FakeBlobService) -> None:
    source = AzureCostConnector(
        AzureCostConfig(
            name="bills", blob_container_url=svc.container_url("nope"), ca_file=svc.ca_path, max_retries=0
        ),
        credential=StaticCredential(),
    )
    with pytest.raises(ConfigurationError, match="ContainerNotFound.*check blob_container_url"):
        read(source)


def test_server_busy_is_retried_then_retriable(svc: FakeBlobService) -> None:
    export_runs(svc)
    busy = iter([True, True])
    svc.fail = lambda request: (503, "ServerBusy") if next(busy, False) else None
    assert_fixture_totals(read(connector(svc, max_retries=2)))  # two 503s, then the third try lands

    svc.requests.clear()
    svc.fail = lambda request: (503, "ServerBusy")
    with pytest.raises(RetriableError, match="HTTP 503"):
        read(connector(svc, max_retries=2))
    assert len(svc.requests) == 3  # the first try and max_retries = 2 retries


def test_config_takes_one_source_and_no_sas_in_the_url() -> None:
    url = "https://acct.blob.core.windows.net/exports"
    with pytest.raises(ValidationError, match="exactly one"):
        AzureCostConfig(name="b", path="/tmp/x", blob_container_url=url)
    with pytest.raises(ValidationError, match="blob_container_url"):
        AzureCostConfig(name="b", blob_container_url=url + "?sv=1&sig=x")
    with pytest.raises(ValidationError, match="not both"):
        AzureCostConfig(name="b", blob_container_url=url, sas_token="s", tenant_id="t")  # type: ignore[arg-type]


def test_ingest_replaces_the_older_run_with_the_newer_one(svc: FakeBlobService, sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:

        def ingest() -> None:
            ingest_billing(
                engine,
                "bills",
                connector(svc),
                SEP,
                OCT,
                clock=lambda: dt.datetime(2025, 10, 3, tzinfo=dt.UTC),
                after_import=lambda engine, periods: None,
            )

        def stored() -> tuple[int, Decimal, set[str]]:
            table = BillingLine.__table__
            with engine.connect() as conn:
                count, total = conn.execute(select(func.count(), func.sum(table.c.effective_cost))).one()
                files = set(conn.execute(select(table.c.source_file).distinct()).scalars())
            return count, Decimal(str(total)), {f.rsplit("/", 2)[-2] for f in files}

        export_runs(svc, new_run=False)  # 15 September: only the older run is there
        ingest()
        count, total, runs = stored()
        assert (count, runs) == (30, {"0b6c1f9e-old0-4c1b-9a55-3c2f6b8e0d11"})
        assert total != Decimal("70066.272")

        export_runs(svc)  # 2 October: the month's newest run
        ingest()
        assert stored() == (74, Decimal("70066.272"), {"7d4e2a10-new0-4f7e-8b21-9e0c5d3a7f42"})
        with engine.connect() as conn:
            imported = conn.execute(select(BillingFile.__table__.c.assembly_id).distinct()).scalars().all()
        assert "7d4e2a10-new0-4f7e-8b21-9e0c5d3a7f42" in imported
    finally:
        engine.dispose()


def test_a_refused_sas_is_an_authentication_error(svc: FakeBlobService) -> None:
    export_runs(svc)
    svc.fail = lambda request: (403, "AuthenticationFailed")
    with pytest.raises(FatalSourceError, match="authentication failed.*check sas_token"):
        read(connector(svc, sas_token=SecretStr("sv=2025-11-05&sig=expired")))


def test_a_file_the_manifest_names_but_is_missing_is_reported_and_the_others_land(
    svc: FakeBlobService,
) -> None:
    export_runs(svc)
    names = (f"{NEW_RUN}/part_0_0001.csv", f"{NEW_RUN}/part_0_0003.csv", f"{NEW_RUN}/part_0_0002.csv.gz")
    svc.put("exports", f"{NEW_RUN}/manifest.json", manifest(*names), at(2, 10))
    with connector(svc) as source:
        items = list(source.read(SEP, OCT))
    errors = [i for i in items if not isinstance(i, BillingBatch)]
    assert [str(e) for e in errors] == [
        f"{svc.container_url('exports')}/{NEW_RUN}/part_0_0003.csv: named by the manifest "
        f"{svc.container_url('exports')}/{NEW_RUN}/manifest.json but not found"
    ]
    assert_fixture_totals([i for i in items if isinstance(i, BillingBatch)])
