"""Azure resource tags of GPU VMs and AKS node scale sets, from Azure Resource Manager.

``GET {arm_endpoint}{resource_id}?api-version=2024-07-01`` (Microsoft.Compute's virtual machine and
virtual machine scale set *Get*) answers the resource with its ``tags`` object. It is read through
azure-core's own pipeline (``PipelineClient`` with the bearer-token, retry and logging policies
the Azure SDKs use) rather than azure-mgmt-compute or Azure Resource Graph: one GET per resource
needs no SDK of its own, and the project carries neither (Resource Graph would answer every
resource in one KQL query, which matters beyond some thousands of GPU VMs: a dependency on
``azure-mgmt-resourcegraph`` to add then). The identity needs ``Microsoft.Compute/
virtualMachines/read`` and ``…/virtualMachineScaleSets/read`` (the Reader role).

Each resource is asked once per :class:`ArmTags` (a connector's life); a resource that is gone
(404) has no tags. The tags become ``cloud.tag:<key>`` facts (:func:`connectors.cloud_tags.facts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from connectors.azure_auth import call_azure
from connectors.cloud_tags import facts

API_VERSION = "2024-07-01"
PERMISSION = "Reader (Microsoft.Compute/virtualMachines/read, virtualMachineScaleSets/read) on the GPU VMs"
#: An ARM id of a VM or scale set: nothing else is put into a URL.
_COMPUTE_ID = re.compile(
    r"^/subscriptions/[0-9a-f-]{36}/resourcegroups/[-\w._()]{1,90}/providers/microsoft\.compute/"
    r"(virtualmachines|virtualmachinescalesets)/[-\w.]{1,80}$",
    re.IGNORECASE,
)


class ArmTags:
    """Tags of ARM resources by id, cached; ``client_kwargs`` as the connector's other clients."""

    def __init__(self, source: str, credential: Any, endpoint: str, client_kwargs: dict[str, Any]) -> None:
        from azure.core import PipelineClient
        from azure.core.pipeline.policies import (
            BearerTokenCredentialPolicy,
            HeadersPolicy,
            NetworkTraceLoggingPolicy,
            RetryPolicy,
            UserAgentPolicy,
        )

        kwargs = dict(client_kwargs)
        self._source, self._endpoint = source, endpoint.rstrip("/")
        self._send_kwargs = {
            k: kwargs.pop(k)
            for k in ("connection_verify", "connection_timeout", "read_timeout")
            if k in kwargs
        }
        retry = RetryPolicy(
            retry_total=kwargs.get("retry_total", 3),
            retry_backoff_factor=kwargs.get("retry_backoff_factor", 0.8),
        )
        policies = [
            HeadersPolicy(),
            UserAgentPolicy(sdk_moniker="gpu-ledger-arm-tags"),
            retry,
            BearerTokenCredentialPolicy(credential, f"{self._endpoint}/.default"),
            NetworkTraceLoggingPolicy(),
        ]
        self._client: Any = PipelineClient(self._endpoint, policies=policies)
        self._known: dict[str, dict[str, str]] = {}

    def close(self) -> None:
        self._client.close()

    def tags(self, resource_ids: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each id (lower case, as the connectors key instances) → its tags as facts; ids that are
        no VM or scale set id get none, without a request."""
        for resource in sorted({r.lower() for r in resource_ids} - set(self._known)):
            self._known[resource] = self._get(resource) if _COMPUTE_ID.match(resource) else {}
        return {r.lower(): self._known[r.lower()] for r in resource_ids}

    def _get(self, resource: str) -> dict[str, str]:
        from azure.core.exceptions import HttpResponseError
        from azure.core.rest import HttpRequest

        def get() -> Any:
            request = HttpRequest("GET", f"{self._endpoint}{resource}", params={"api-version": API_VERSION})
            response = self._client.send_request(request, **self._send_kwargs)
            if response.status_code == 404:
                return None  # deleted since it ran: its GPU-hours stay, without tags
            if response.status_code >= 400:
                raise HttpResponseError(response=response)
            try:
                return response.json()
            except ValueError:
                return None  # an answer that is no JSON: no tags rather than no ledger

        body = call_azure(self._source, PERMISSION, get)
        tags = body.get("tags") if isinstance(body, dict) else None
        if not isinstance(tags, dict):
            return {}
        return facts((k, v) for k, v in tags.items() if isinstance(v, str))
