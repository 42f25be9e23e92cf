"""Cloud instance tags and labels as attribution facts (docs/attribution.md, "Cloud tags").

Every cloud source that knows a machine's tags — EC2 ``DescribeInstances``, Compute Engine labels
(Cloud Monitoring ``metadata.user_labels``), Azure resource tags, AKS node labels, and the bills'
tag columns (:mod:`service.billing.tags`) — hands them over through :func:`facts`, so they arrive
under one spelling: ``cloud.tag:<key>`` (``k8s.node_label:<key>`` for node labels), the key as the
cloud spells it. Bounded as the push API bounds an agent's facts (``service.push_batch``): at most
:data:`MAX_FACTS` entries, keys and values of at most :data:`MAX_CHARS` printable characters; what
falls outside is left out (a tag no rule could read whole is no owner), never cut.
"""

from __future__ import annotations

from collections.abc import Iterable

CLOUD_TAG = "cloud.tag:"
NODE_LABEL = "k8s.node_label:"
#: A GCP project's label (the billing export's ``project.labels``): the project's, not the machine's
PROJECT_LABEL = "cloud.project_label:"
MAX_FACTS = 200
MAX_CHARS = 300


def _fits(text: str) -> bool:
    return len(text) <= MAX_CHARS and text.isprintable()


def facts(pairs: Iterable[tuple[object, object]], prefix: str = CLOUD_TAG) -> dict[str, str]:
    """``(key, value)`` pairs → ``{prefix + key: value}``: empty keys, null values, non-printable or
    over-long keys/values left out; the first :data:`MAX_FACTS` keys in sorted order kept."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if key is None or value is None:
            continue
        name, text = f"{prefix}{key}", str(value)
        if str(key) and _fits(name) and _fits(text):
            out[name] = text
    return dict(sorted(out.items())[:MAX_FACTS])
