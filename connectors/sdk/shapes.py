"""The shape of a device and of a workload, and the ledger's dimensions, declared once.

A connector describes each device it reads (``DeviceInfo``) and what occupied it
(``WorkloadInfo``); the service stores those attributes (staging and ``device`` tables, copied onto
every ledger row), validates them when an agent pushes them, and lets answers be grouped and
filtered by some of them. Each attribute is one :class:`Attribute` here, each dimension one
:class:`LedgerDimension`. The service derives what it can from these tuples without losing static
types (push validation models, Polars schemas, the rollup's dimension columns, the analytics
column map, the GraphQL enum's descriptions, the pseudo-device columns a bill fills); the rest —
the dataclasses, the SQL tables (no migration for a refactor), the enums whose members code names —
stays written out and ``tests/test_shapes_agree.py`` fails when any of them disagrees with this
module. Adding an attribute or a dimension starts here.

Imports nothing beyond the standard library: the node agent imports the SDK and must stay small.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute of a device or workload description.

    ``max_length`` is in characters and is the storage column's length (PostgreSQL refuses longer
    values, so push validation refuses them first). ``required`` attributes have no default;
    others default to ``default`` (``None`` = unknown, stored as NULL). ``choices``, ``gt``/``ge``/
    ``le`` bound what a pushed description may hold.
    """

    name: str
    kind: type
    description: str
    max_length: int | None = None
    min_length: int = 0
    required: bool = False
    default: float | None = None
    choices: tuple[str, ...] = ()
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    #: copied from the description onto every ledger row at ingest (a ``LedgerFacts`` column), so
    #: aggregates never join
    ledger: bool = False
    #: a billing line names it too: an unmonitored instance's pseudo-device takes it from the bill
    billed: bool = False

    @property
    def nullable(self) -> bool:
        return not self.required and self.default is None


ENVIRONMENTS = ("onprem", "aws", "gcp", "azure")
VENDORS = ("nvidia", "amd", "intel", "huawei")  # connectors.sdk.vendors derives one from gpu_model

DEVICE: tuple[Attribute, ...] = (
    Attribute(
        "device_id", str, "GPU-…/MIG-… UUID, or <instance-id>/gpu<index>",
        max_length=200, min_length=1, required=True, ledger=True,
    ),
    Attribute(
        "environment", str, "onprem, aws, gcp or azure",
        max_length=16, required=True, choices=ENVIRONMENTS, ledger=True, billed=True,
    ),
    Attribute("provider", str, "cloud provider or on-prem operator", max_length=32, ledger=True, billed=True),
    Attribute(
        "account", str, "cloud account / subscription / project id",
        max_length=200, ledger=True, billed=True,
    ),
    Attribute("region", str, "cloud region or on-prem site", max_length=100, ledger=True, billed=True),
    Attribute("cluster", str, "cluster name", max_length=200, ledger=True),
    Attribute("node", str, "node / host", max_length=200, ledger=True),
    Attribute("instance_id", str, "cloud VM id (joins billing)", max_length=300, ledger=True, billed=True),
    Attribute("instance_type", str, "cloud instance type", max_length=100, ledger=True, billed=True),
    Attribute("gpu_model", str, "GPU model, e.g. H100", max_length=100, ledger=True, billed=True),
    Attribute("gpu_index", int, "index of the GPU on its node", ge=0, le=65535),
    Attribute("parent_device_id", str, "parent GPU of a MIG instance", max_length=200),
    Attribute("mig_profile", str, "MIG profile, e.g. 1g.18gb", max_length=50, ledger=True),
    Attribute(
        "gpu_fraction", float, "share of a physical GPU: 1, or MIG slices / 7",
        default=1.0, gt=0, le=1, ledger=True,
    ),
    Attribute("tdp_w", float, "board power limit in W, for estimated energy", gt=0, le=100_000),
    Attribute(
        "vendor", str, "accelerator vendor: nvidia, amd, intel or huawei (from gpu_model when unsaid)",
        max_length=16, choices=VENDORS, ledger=True,
    ),
)  # fmt: skip

WORKLOAD: tuple[Attribute, ...] = (
    Attribute(
        "workload_key", str, "the source's key of what occupied the device; '' = nothing",
        max_length=500, required=True, ledger=True,
    ),
    Attribute("project", str, "workload's project", max_length=200, ledger=True),
    Attribute("team", str, "workload's team", max_length=200, ledger=True),
    Attribute("user_name", str, "workload's user", max_length=200, ledger=True),
    Attribute("namespace", str, "workload's Kubernetes namespace", max_length=200, ledger=True),
    Attribute("workload", str, "pod/container, job or VM", max_length=300, ledger=True),
)  # fmt: skip


#: Ledger columns the service fills itself (no connector describes them): which ``[[attribution]]``
#: rule named the row's owner (docs/attribution.md). Like the workload's, null on unallocated rows.
ATTRIBUTED: tuple[Attribute, ...] = (
    Attribute(
        "owner_rule", str, "the [[attribution]] rule that named the owner; 'source': the connector did",
        max_length=100, ledger=True,
    ),
)  # fmt: skip


#: Each description's attribution facts (source key → value, docs/attribution.md): a mapping, not
#: an attribute, last in the dataclass and the push model; ``[[attribution]]`` rules read them.
DEVICE_FACTS = "tags"
WORKLOAD_FACTS = "facts"


@dataclass(frozen=True, slots=True)
class LedgerDimension:
    """A ledger column answers may be grouped and filtered by.

    ``name`` is the member of the analytics and GraphQL ``Dimension`` enums, ``column`` the
    attribute it reads, ``description`` the GraphQL enum value's. ``workload`` dimensions describe
    who held the device: they are null on unallocated rows.
    """

    name: str
    column: str
    description: str
    workload: bool = False


def _dimension(name: str, column: str, description: str = "") -> LedgerDimension:
    """The dimension reading attribute ``column``, described as the attribute unless told."""
    attribute = next(a for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED) if a.name == column)
    workload = attribute in WORKLOAD or attribute in ATTRIBUTED
    return LedgerDimension(name, column, description or attribute.description, workload)


# In the GraphQL enum's order (schema.graphql lists them so).
DIMENSIONS: tuple[LedgerDimension, ...] = (
    _dimension("ENVIRONMENT", "environment"),
    _dimension("PROVIDER", "provider"),
    _dimension("ACCOUNT", "account"),
    _dimension("REGION", "region"),
    _dimension("CLUSTER", "cluster"),
    _dimension("NODE", "node"),
    _dimension("DEVICE", "device_id", "device id (GPU or MIG instance)"),
    _dimension("GPU_MODEL", "gpu_model"),
    _dimension("VENDOR", "vendor", "accelerator vendor: nvidia, amd, intel or huawei"),
    _dimension("INSTANCE_TYPE", "instance_type"),
    _dimension("PROJECT", "project"),
    _dimension("TEAM", "team"),
    _dimension("USER", "user_name"),
    _dimension("NAMESPACE", "namespace"),
    _dimension("WORKLOAD", "workload"),
    _dimension("OWNER_RULE", "owner_rule"),
)


def names(attributes: tuple[Attribute, ...]) -> tuple[str, ...]:
    return tuple(a.name for a in attributes)


def dimension(name: str) -> LedgerDimension:
    """The declared dimension whose enum member is ``name``."""
    return next(d for d in DIMENSIONS if d.name == name)
