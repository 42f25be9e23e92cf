"""The bills' tags own the spend of the instances they bill (issue 16, docs/attribution.md).

The recorded exports (tests/fixtures/README.md) tag every GPU instance: CUR 2.0 ``resource_tags``
(``user_team``, ``user_project``, ``user_cost_center``), legacy CUR ``resourceTags/user:…``
columns, GCP ``labels`` (credits kept beside them as ``gcp:credit:…``), Azure ``Tags`` without
braces, FOCUS ``Tags``. Imported with no metrics, every billed GPU-hour is unmonitored spend; the
rules name its owners. Hand totals from the fixture README:

* AWS: pretrain-70b = R1 3,302.40 + R2 27,740.16 = 31,042.56; chat-serving = R3 1,134.40;
  batch-eval = R4 24 × 11.3481 = 272.3544 (the EBS volume is no GPU: not in the ledger).
* Azure: pretrain-70b = A1 708 × 62.24 = 44,065.92; chat-serving = A2 246 × 98.32 = 24,186.72;
  batch-eval = A3 48 × 19.664 = 943.872 (the unused reservation bills no resource).
* GCP (resource labels ``team`` and ``workload``; project label ``env = prod``, which no rule
  here reads — ``cloud.project_label:env``): inference = G2 12 × 0.729998 =
  8.759976; llm-research = G1 after its promo credit: Σ of its rows 1,440.8434919452054784…, each
  of its 16 hourly spans rounded half-even to 1e-9 once (design §4): 101.112718246575… → …247, so
  16 × 0.4246575e-9 = 6.79e-9 more = 1,440.843491952.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from billing_rows import add, line
from sqlalchemy import Engine, select

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.base import DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from connectors.focus import FocusConfig, FocusConnector
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector
from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension as D
from service.analytics.dims import Granularity as G
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.attribution import AttributionRule
from service.attribution.reattribute import reattribute
from service.billing.ingest import ingest_billing
from service.billing.rates import reprice, reprice_after_metrics
from service.billing.tags import resource_facts, tag_facts, tag_key
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

FIXTURES = Path(__file__).parents[1] / "fixtures"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
RULES = [
    AttributionRule(name="project-tag", source="cloud.tag:project", dimension="project"),
    AttributionRule(name="team-tag", source="cloud.tag:team", dimension="team"),
]


def test_bill_tag_keys_as_the_instance_names_them() -> None:
    assert tag_key("aws", "user_team") == "team"  # CUR 2.0
    assert tag_key("aws", "user:cost-center") == "cost-center"  # legacy CUR, FOCUS from AWS
    assert tag_key("aws", "user_cost_center") == "cost_center"  # CUR 2.0 rewrote the '-'
    assert tag_key("aws", "aws:createdBy") == "aws:createdBy"
    assert tag_key("aws", "user_") == "user_"  # nothing after the marker: no marker
    assert tag_key("gcp", "user_team") == "user_team"  # only AWS bills mark user tags
    assert tag_key("gcp", "gcp:credit:PROMOTION") is None
    assert tag_key("azure", "azure:unparsed_tags") is None
    assert tag_key("gcp", "gcp:project_label:env") is None  # the project's, not the machine's
    assert tag_facts("aws", '{"user_team": "llm", "user_project": "p", "aws:createdBy": "x"}') == {
        "cloud.tag:aws:createdBy": "x", "cloud.tag:project": "p", "cloud.tag:team": "llm",
    }  # fmt: skip
    assert tag_facts("gcp", '{"team": "a", "gcp:credit:PROMOTION": "-88.48", "n": 3}') == {
        "cloud.tag:n": "3", "cloud.tag:team": "a",
    }  # fmt: skip
    # a project label and a resource label of one key stay two facts; only GCP bills mark them
    assert tag_facts("gcp", '{"team": "a", "gcp:project_label:team": "b", "gcp:project_label:": "c"}') == {
        "cloud.project_label:team": "b", "cloud.tag:team": "a",
    }  # fmt: skip
    assert tag_facts("aws", '{"gcp:project_label:team": "b"}') == {}
    for hostile in (None, "", "not json", "[1, 2]", '"text"', '{"k": {"nested": 1}}', '{"k": null}'):
        assert tag_facts("aws", hostile) == {}


def _cost_by(engine: Engine, *dims: D) -> dict[tuple[Any, ...], Decimal]:
    window = check_window(SEP, OCT, max_days=400)
    with engine.connect() as conn:
        rows = cost(conn, LedgerQuery(window, G.TOTAL, dims, access=ALL))
    out: dict[tuple[Any, ...], Decimal] = {}
    for r in rows:
        key = tuple(v for _, v in r.key.dims)
        out[key] = out.get(key, Decimal(0)) + r.cost
    return out


@pytest.mark.parametrize("export", ["aws/cur2_2025-09_daily.csv", "aws/cur_legacy_2025-09_daily.csv"])
def test_cur_tags_own_the_unmonitored_spend(engine: Engine, export: str) -> None:
    with AwsCurConnector(AwsCurConfig(name="bills", path=str(FIXTURES / export))) as source:
        result = ingest_billing(engine, "bills", source, SEP, OCT, attribution_rules=RULES)
    assert not result.failed_files
    assert _cost_by(engine, D.PROJECT) == {
        ("pretrain-70b",): Decimal("31042.56"),
        ("chat-serving",): Decimal("1134.40"),
        ("batch-eval",): Decimal("272.3544"),
    }
    assert _cost_by(engine, D.TEAM) == {
        ("llm-research",): Decimal("31042.56"),
        ("inference",): Decimal("1406.7544"),
    }
    assert _cost_by(engine, D.OWNER_RULE) == {("project-tag",): Decimal("32449.3144")}
    with engine.connect() as conn:
        devices = {d.device_id: d for d in conn.execute(select(Device.__table__))}
        keys = set(conn.execute(select(LedgerHour.workload_key, LedgerHour.workload).distinct()))
    tags = devices["i-0a7c3f1e9d5b2c402/unmonitored"].tags
    tags = json.loads(tags) if isinstance(tags, str) else tags
    # legacy CUR keeps the original key; CUR 2.0 rewrote '-' to '_' (module docstring of tags.py)
    center = "cost-center" if "legacy" in export else "cost_center"
    assert tags == {
        "cloud.tag:project": "pretrain-70b",
        "cloud.tag:team": "llm-research",
        f"cloud.tag:{center}": "cc-1042",
    }
    assert keys == {(f"cloud:{r}", r) for r in ("i-0d1e4c9a2f7b3e801", "i-0a7c3f1e9d5b2c402",
                                                "i-05b8e2d7c4a1f9603", "i-09f3a6c8e1d7b2504")}  # fmt: skip


def test_azure_tags_without_braces_own_the_spend(engine: Engine) -> None:
    config = AzureCostConfig(
        name="azure-bills", path=str(FIXTURES / "azure" / "ea_amortized_cost_2025-09.csv")
    )
    with AzureCostConnector(config) as source:
        ingest_billing(engine, "azure-bills", source, SEP, OCT, attribution_rules=RULES)
    assert _cost_by(engine, D.PROJECT) == {
        ("pretrain-70b",): Decimal("44065.92"),
        ("chat-serving",): Decimal("24186.72"),
        ("batch-eval",): Decimal("943.872"),
    }


def test_gcp_labels_own_the_spend_and_credits_are_no_tags(engine: Engine) -> None:
    config = GcpBillingConfig(
        name="gcp-bills", path=str(FIXTURES / "gcp" / "billing_export_resource_v1_2025-09.jsonl")
    )
    ingest_billing(engine, "gcp-bills", GcpBillingConnector(config), SEP, OCT, attribution_rules=RULES)
    by_team = _cost_by(engine, D.TEAM)
    assert by_team == {("llm-research",): Decimal("1440.843491952"), ("inference",): Decimal("8.759976")}
    assert _cost_by(engine, D.PROJECT) == {(None,): sum(by_team.values())}  # no project label: no owner
    with engine.connect() as conn:
        tags = conn.execute(
            select(Device.tags).where(Device.device_id == "4815162342108301234/unmonitored")
        ).scalar_one()
    tags = json.loads(tags) if isinstance(tags, str) else tags
    assert tags == {  # no credit; the project's label under its own key
        "cloud.tag:team": "llm-research", "cloud.tag:workload": "pretrain", "cloud.project_label:env": "prod",
    }  # fmt: skip


def test_a_resource_label_and_a_project_label_rule_order_decides(engine: Engine) -> None:
    """The export's ``project.labels`` are facts of every resource the project bills; which of a
    resource's and its project's label names the owner is the rules' order (first non-empty wins)."""
    rules = [
        AttributionRule(name="team-from-resource", source="cloud.tag:team", dimension="team"),
        AttributionRule(name="team-from-project", source="cloud.project_label:team", dimension="team"),
    ]
    start = dt.datetime(2025, 9, 3, 0, tzinfo=dt.UTC)
    both = '{"team": "vision", "gcp:project_label:team": "platform"}'
    project_only = '{"gcp:project_label:team": "platform", "gcp:project_label:env": "prod"}'
    add(engine, [
        line("111", start, start + dt.timedelta(hours=1), "8.00", provider="gcp", gpu_count=1,
             gpu_hours=Decimal(1), instance_type="a2-highgpu-1g", tags=both),
        line("222", start, start + dt.timedelta(hours=1), "3.00", provider="gcp", gpu_count=1,
             gpu_hours=Decimal(1), instance_type="a2-highgpu-1g", tags=project_only),
    ])  # fmt: skip
    reprice(engine, SEP, OCT, attribution_rules=rules)
    assert _cost_by(engine, D.TEAM, D.OWNER_RULE) == {
        ("vision", "team-from-resource"): Decimal("8.00"),
        ("platform", "team-from-project"): Decimal("3.00"),
    }
    with engine.connect() as conn:
        facts = resource_facts(conn, ["111", "222"], SEP, OCT)
    assert {r: {f["key"]: f["value"] for f in fs} for r, fs in facts.iter_rows()} == {
        "111": {"cloud.project_label:team": "platform", "cloud.tag:team": "vision"},
        "222": {"cloud.project_label:env": "prod", "cloud.project_label:team": "platform"},
    }


def _p5_hour(resource: str, hour: int, cost: str, tags: str | None) -> Any:
    start = dt.datetime(2025, 9, 3, hour, tzinfo=dt.UTC)
    return line(resource, start, start + dt.timedelta(hours=1), cost, gpu_count=8, gpu_hours=Decimal(8),
                instance_type="p5.48xlarge", tags=tags)  # fmt: skip


def test_latest_line_names_a_changed_tag_and_untagged_spend_stays_unallocated(engine: Engine) -> None:
    add(engine, [
        _p5_hour("i-tagged", 0, "55.04", '{"user_project": "old", "user_team": "t"}'),
        _p5_hour("i-tagged", 1, "55.04", '{"user_project": "new"}'),
        _p5_hour("i-plain", 0, "10.00", "{}"),
        _p5_hour("i-none", 0, "20.00", None),
    ])  # fmt: skip
    with engine.connect() as conn:
        facts = resource_facts(conn, ["i-tagged", "i-plain", "i-none", "i-unknown"], SEP, OCT)
    assert facts.to_dicts() == [
        {"resource": "i-tagged", "facts": [{"key": "cloud.tag:project", "value": "new"},
                                           {"key": "cloud.tag:team", "value": "t"}]},
    ]  # fmt: skip
    reprice(engine, SEP, OCT, attribution_rules=RULES)
    assert _cost_by(engine, D.PROJECT) == {("new",): Decimal("110.08"), (None,): Decimal("30.00")}
    with engine.connect() as conn:
        rows = conn.execute(
            select(LedgerHour.device_id, LedgerHour.workload_key, LedgerHour.project, LedgerHour.owner_rule)
            .where(LedgerHour.device_id.in_(["i-plain/unmonitored", "i-none/unmonitored"]))
            .order_by(LedgerHour.device_id)
        ).all()
    assert [tuple(r) for r in rows] == [
        ("i-none/unmonitored", "", None, None),
        ("i-plain/unmonitored", "", None, None),
    ]


def test_changed_rules_repriced_move_cost_between_projects_total_unchanged(engine: Engine) -> None:
    add(engine, [_p5_hour("i-atlas", 0, "55.04", '{"user_project": "ml-atlas"}'),
                 _p5_hour("i-orion", 0, "44.00", '{"user_project": "orion"}')])  # fmt: skip
    reprice(engine, SEP, OCT, attribution_rules=RULES)
    before = _cost_by(engine, D.PROJECT)
    strip = AttributionRule(name="strip-ml", source="cloud.tag:project", dimension="project", match="ml-(.*)",
                            value="$1", values={"atlas": "orion"})  # fmt: skip
    reprice(engine, SEP, OCT, attribution_rules=[strip])
    after = _cost_by(engine, D.PROJECT)
    assert before == {("ml-atlas",): Decimal("55.04"), ("orion",): Decimal("44.00")}
    assert after == {("orion",): Decimal("55.04"), (None,): Decimal("44.00")}  # 'orion' matches no ml-(.*)
    assert sum(before.values()) == sum(after.values()) == Decimal("99.04")
    assert _cost_by(engine, D.OWNER_RULE) == {("strip-ml",): Decimal("55.04"), (None,): Decimal("44.00")}


def test_focus_tags_of_three_clouds_own_their_spend(engine: Engine) -> None:
    path = FIXTURES / "focus" / "focus_1.1_multicloud_2025-09.csv"
    ingest_billing(engine, "focus", FocusConnector(FocusConfig(name="focus", type="focus", path=str(path))),
                   SEP, OCT, attribution_rules=RULES)  # fmt: skip
    by_project = _cost_by(engine, D.PROJECT)
    assert by_project == {
        ("pretrain-70b",): Decimal("31042.56") + Decimal("44065.92"),  # R1 + R2, A1
        ("chat-serving",): Decimal("1134.40") + Decimal("24186.72"),  # R3, A2
        ("batch-eval",): Decimal("272.3544") + Decimal("943.872"),  # R4, A3
        (None,): by_project[(None,)],  # G1 and G2: labels team/workload, no project
    }
    assert _cost_by(engine, D.TEAM)[("inference",)] == Decimal("1134.40") + Decimal("24186.72") + Decimal(
        "272.3544"
    ) + Decimal("943.872") + Decimal("8.759976")  # and G2 (team label inference)


# --- metered rows of a billed instance: the bill's tags under the device's own --------------------

EKS = "i-0eks000000000001"
POD = "k8s:serving/infer-0/main"
HOUR3 = dt.datetime(2025, 9, 3, 3, tzinfo=dt.UTC)


class _PodOnGpu:
    """A metrics source: GPU 0 of ``EKS`` held by ``POD`` every minute of 03:00–04:00; the instance
    names no tags of its own (``own``: unless given)."""

    kind = "metrics"
    sampling = Sampling.every(60.0)

    def __init__(self, own: dict[str, str] | None = None) -> None:
        self.own = own or {}

    def collect(self, start: dt.datetime, end: dt.datetime) -> Any:
        ts = [int((HOUR3 + dt.timedelta(minutes=m)).timestamp() * 1000) for m in range(60)]
        ts = [t for t in ts if start.timestamp() * 1000 <= t < end.timestamp() * 1000]
        device = DeviceInfo(f"{EKS}/gpu0", "aws", instance_id=EKS, instance_type="p5.48xlarge", tags=self.own)
        n = len(ts)
        columns = {"device_id": [device.device_id] * n, "ts_ms": ts, "metric": ["gpu_util"] * n,
                   "value": [50.0] * n, "workload_key": [POD] * n, "share": [1.0] * n}  # fmt: skip
        if n:
            yield SampleBatch.from_columns(columns, [device], [WorkloadInfo(POD, namespace="serving")])


def _eks_bill(
    engine: Engine, tags: str = '{"user_project": "eks-serving", "user_team": "inference"}'
) -> None:
    add(engine, [_p5_hour(EKS, 3, "55.04", tags)])


def _owners(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(LedgerHour.device_id, LedgerHour.workload_key, LedgerHour.project, LedgerHour.team,
                   LedgerHour.owner_rule, LedgerHour.cost).where(LedgerHour.hour_start == HOUR3)
        ).all()  # fmt: skip
    return {r[0]: tuple(r[1:]) for r in rows}


# One GPU of eight metered for the hour: 55.04 / 8 = 6.88 to the pod's row, 7 × 6.88 = 48.16 unmonitored.
EXPECTED = {
    f"{EKS}/gpu0": (POD, "eks-serving", "inference", "project-tag", Decimal("6.88")),
    f"{EKS}/unmonitored": (f"cloud:{EKS}", "eks-serving", "inference", "project-tag", Decimal("48.16")),
}


def test_bill_first_then_metrics_the_rules_see_the_bill_at_ingest(engine: Engine) -> None:
    _eks_bill(engine)
    reprice(engine, SEP, OCT, attribution_rules=RULES)
    hook = functools.partial(reprice_after_metrics, attribution_rules=RULES)
    ingest_window(engine, "cw", _PodOnGpu(), HOUR3, HOUR3 + dt.timedelta(hours=1), attribution_rules=RULES,
                  after_ingest=hook)  # fmt: skip
    assert _owners(engine) == EXPECTED
    assert _cost_by(engine, D.PROJECT) == {("eks-serving",): Decimal("55.04")}
    with engine.connect() as conn:  # what the instance said is what is kept: the bill is not copied
        assert conn.execute(select(Device.tags).where(Device.device_id == f"{EKS}/gpu0")).scalar_one() is None


def test_metrics_first_then_the_bill_reattributes_the_metered_rows(engine: Engine) -> None:
    ingest_window(engine, "cw", _PodOnGpu(), HOUR3, HOUR3 + dt.timedelta(hours=1), attribution_rules=RULES)
    assert _owners(engine)[f"{EKS}/gpu0"][1:4] == (None, None, None)  # no bill yet: nobody named
    _eks_bill(engine)
    reprice(engine, SEP, OCT, attribution_rules=RULES)  # what a billing import runs
    assert _owners(engine) == EXPECTED
    # reattribute by hand reads the bill too: nothing changes
    assert reattribute(engine, RULES, SEP, OCT).rows_changed == 0


def test_the_instance_own_tag_wins_over_the_bill(engine: Engine) -> None:
    _eks_bill(engine)
    source = _PodOnGpu({"cloud.tag:project": "from-ec2"})
    ingest_window(engine, "cw", source, HOUR3, HOUR3 + dt.timedelta(hours=1), attribution_rules=RULES)
    reprice(engine, SEP, OCT, attribution_rules=RULES)
    owners = _owners(engine)
    assert owners[f"{EKS}/gpu0"][1:4] == ("from-ec2", "inference", "project-tag")  # team: from the bill
    assert owners[f"{EKS}/unmonitored"][1] == "eks-serving"  # no metric, only the bill


def test_hostile_tags_are_bounded_not_fatal(engine: Engine) -> None:
    many = json.dumps({f"user_k{i:03d}": "v" for i in range(150)})
    more = json.dumps(
        {f"user_k{i:03d}": "w" for i in range(150, 300)} | {"user_big": "x" * 301, "user_nl": "a\nb"}
    )
    facts = tag_facts("aws", more)
    assert len(facts) == 150 and "cloud.tag:big" not in facts and "cloud.tag:nl" not in facts
    add(engine, [_p5_hour("i-many", 0, "1.00", many), _p5_hour("i-many", 1, "1.00", more),
                 _p5_hour("i-bad", 0, "1.00", "{not json")])  # fmt: skip
    with engine.connect() as conn:
        found = dict(resource_facts(conn, ["i-many", "i-bad"], SEP, OCT).iter_rows())
    assert list(found) == ["i-many"]
    keys = [f["key"] for f in found["i-many"]]
    assert len(keys) == 200 and keys == sorted(keys) and keys[-1] == "cloud.tag:k199"  # 300 merged, 200 kept
    reprice(engine, SEP, OCT, attribution_rules=RULES)  # no rule matches: no owner, nothing breaks
    assert _cost_by(engine, D.PROJECT) == {(None,): Decimal("3.00")}


# --- a tagged VM metered without workloads: its GPU-hours are the instance's, metered or not -----

VM = "i-0vm0000000000001"


class _BareGpu(_PodOnGpu):
    """GPU 0 of ``VM``, metered for 03:00–04:00 with no workload (the CloudWatch agent's view)."""

    def collect(self, start: dt.datetime, end: dt.datetime) -> Any:
        for batch in super().collect(start, end):
            columns = dict(batch.columns) | {"device_id": [f"{VM}/gpu0"] * len(batch.columns["ts_ms"])}
            columns["workload_key"] = [""] * len(columns["ts_ms"])
            device = DeviceInfo(f"{VM}/gpu0", "aws", instance_id=VM, instance_type="p5.48xlarge")
            yield SampleBatch.from_columns(columns, [device])


def _vm_rows(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(LedgerHour.device_id, LedgerHour.workload_key, LedgerHour.workload, LedgerHour.project,
                   LedgerHour.owner_rule, LedgerHour.cost).where(LedgerHour.instance_id == VM)
        ).all()  # fmt: skip
    return {r[0]: tuple(r[1:]) for r in rows}


def test_a_tagged_vm_metered_without_workloads_is_held_by_the_instance(engine: Engine) -> None:
    add(engine, [_p5_hour(VM, 3, "55.04", '{"user_project": "vm-owner"}')])
    hook = functools.partial(reprice_after_metrics, attribution_rules=RULES)
    ingest_window(engine, "cw", _BareGpu(), HOUR3, HOUR3 + dt.timedelta(hours=1), attribution_rules=RULES,
                  after_ingest=hook)  # fmt: skip
    held = {
        f"{VM}/gpu0": (f"cloud:{VM}", VM, "vm-owner", "project-tag", Decimal("6.88")),  # 55.04 / 8 GPUs
        f"{VM}/unmonitored": (f"cloud:{VM}", VM, "vm-owner", "project-tag", Decimal("48.16")),  # the other 7
    }
    assert _vm_rows(engine) == held
    assert _cost_by(engine, D.PROJECT) == {("vm-owner",): Decimal("55.04")}  # all of it, metered or not
    reprice(engine, SEP, OCT, attribution_rules=RULES)
    assert _vm_rows(engine) == held  # again: nothing moves
    # without rules (or once the bill no longer tags it) the rows go back to the pool, as before
    reprice(engine, SEP, OCT)
    assert _vm_rows(engine) == {
        f"{VM}/gpu0": ("", None, None, None, Decimal("6.88")),
        f"{VM}/unmonitored": ("", None, None, None, Decimal("48.16")),
    }
    assert _cost_by(engine, D.PROJECT) == {(None,): Decimal("55.04")}
