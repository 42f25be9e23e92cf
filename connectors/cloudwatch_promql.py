"""``cloudwatch_promql``: dcgm-exporter metrics of OTel Container Insights, read with PromQL.

AWS's recommended Container Insights for EKS (the ``amazon-cloudwatch-observability`` add-on from
``v6.0.1-eksbuild.1``, "OTel Container Insights") no longer publishes ``node_gpu_*`` series: the
agent scrapes dcgm-exporter every 30 s and sends the raw ``DCGM_FI_*`` metrics over OTLP, queried
with PromQL at ``https://monitoring.<region>.amazonaws.com/api/v1/query_range`` (SigV4; IAM
``cloudwatch:GetMetricData`` + ``cloudwatch:ListMetrics``). Checked against amazon-cloudwatch-agent
v1.300071.0 (commit ab55b8d) ``translator/translate/otel/pipeline/opentelemetry/containerinsights/
dcgm.yaml``: each datapoint keeps dcgm-exporter's labels (``gpu``, ``UUID``, ``device``,
``modelName``, and ``pod``/``namespace``/``container`` of the workload: the scrape is a static
target, so nothing is renamed to ``exported_*``), ``Hostname`` is deleted and ``node_name`` set to
the node; the pod's owner becomes the resource attribute ``k8s.workload.name``. Values are
dcgm-exporter's own (``PIPE_TENSOR_ACTIVE`` is a 0–1 ratio although the pipeline labels its unit
``%``), so this is the ``prometheus`` connector — same query grid, field mapping, MIG and pod
rules, device ids (GPU UUIDs) and keys ``k8s:<namespace>/<pod>/<container>`` — with SigV4-signed
requests and AWS defaults: ``step_s`` 30, ``environment`` ``aws``, node from ``node_name``.

The same connector reads Amazon Managed Service for Prometheus (``signing_service = "aps"``,
``url = https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>``), where sites that run
dcgm-exporter with an AMP scraper or ADOT keep the same series.

Limits (CloudWatch's PromQL): at most 500 series per answer, and a query scans at most 24 h
(the connector's one-day chunks respect that). A fleet with more than 500 GPUs needs one
connector per slice with a ``label_selector`` such as ``{node_name=~"ip-10-0-1.*"}``; the
cluster is the resource attribute ``@resource.k8s.cluster.name``, a quoted UTF-8 label name that
``label_selector`` does not accept yet, so set ``cluster`` in the config (one connector per
cluster). Whether CloudWatch honours ``last_over_time`` exactly like Prometheus was not checked
against the service (only against a local Prometheus 2.42 behind a SigV4-checking proxy). No EC2
instance id reaches the ledger on this path (the GPU is keyed by UUID, the node by name), so
billing joins by instance need the node → instance mapping from elsewhere.

Credentials: boto3's default chain (IRSA, instance role, environment), ``profile`` (which may
itself name a ``role_arn``: boto3 assumes it and renews it), or static ``aws_access_key_id`` +
``aws_secret_access_key``. A request is signed right before it is sent, with credentials boto3
refreshes as they near expiry.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, ClassVar, Literal

import boto3
import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import BotoCoreError
from pydantic import Field, PrivateAttr, SecretStr, model_validator

from connectors.aws_session import base_session
from connectors.cloud import auth_error
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import ConnectorConfig

SOURCE = "cloudwatch_promql"
OTEL_NODE_LABELS = ("node_name", "node", "kubernetes_node", "NODE_NAME", "hostname", "Hostname")
_NEXT_STEP = (
    "configure AWS credentials for the connector (default chain, profile or static keys) whose "
    "identity may call cloudwatch:GetMetricData and cloudwatch:ListMetrics (aps:QueryMetrics for AMP)"
)


class CloudWatchPromQLConfig(PrometheusConfig):
    """``type = "cloudwatch_promql"``: ``region`` (required); ``url`` defaults to CloudWatch's
    PromQL endpoint of that region; ``signing_service`` ``monitoring`` (CloudWatch) or ``aps``
    (Amazon Managed Prometheus); ``profile`` or ``aws_access_key_id`` + ``aws_secret_access_key``.
    ``username``/``password``/``bearer_token`` are refused: SigV4 signs the requests."""

    type: str = "cloudwatch_promql"
    url: str = ""
    region: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d+$")
    environment: Literal["onprem", "aws", "gcp", "azure"] = "aws"
    step_s: float = Field(30.0, ge=1.0, le=3600.0)
    node_labels: tuple[str, ...] = OTEL_NODE_LABELS
    signing_service: Literal["monitoring", "aps"] = "monitoring"
    profile: str | None = None
    aws_access_key_id: SecretStr | None = None
    aws_secret_access_key: SecretStr | None = None
    _sigv4: httpx.Auth | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _default_url(cls, values: Any) -> Any:
        if isinstance(values, dict) and not values.get("url") and values.get("region"):
            return {**values, "url": f"https://monitoring.{values['region']}.amazonaws.com"}
        return values

    @model_validator(mode="after")
    def _sigv4_only(self) -> CloudWatchPromQLConfig:
        if self.region is None:
            raise ValueError("region is required (the SigV4 signing region)")
        if self.username is not None or self.bearer_token is not None:
            raise ValueError(
                "cloudwatch_promql signs requests with SigV4: drop username/password/bearer_token"
            )
        if (self.aws_access_key_id is None) != (self.aws_secret_access_key is None):
            raise ValueError("aws_access_key_id and aws_secret_access_key go together")
        if self.profile is not None and self.aws_access_key_id is not None:
            raise ValueError("give profile or static access keys, not both")
        return self

    def with_session(self, session: boto3.Session) -> CloudWatchPromQLConfig:
        """A copy whose ``auth()`` signs with ``session``'s credentials."""
        bound = self.model_copy()
        bound._sigv4 = SigV4HttpxAuth(session, self.signing_service, self.region or "")
        return bound

    def auth(self) -> httpx.Auth | None:
        if self._sigv4 is None:
            self._sigv4 = SigV4HttpxAuth(session_for(self), self.signing_service, self.region or "")
        return self._sigv4


def session_for(config: CloudWatchPromQLConfig) -> boto3.Session:
    return base_session(config, SOURCE)


class SigV4HttpxAuth(httpx.Auth):
    """Signs each httpx request (method, full URL with its query, host) with SigV4."""

    def __init__(self, session: boto3.Session, service: str, region: str) -> None:
        self.session, self.service, self.region = session, service, region

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        try:
            credentials = self.session.get_credentials()
        except BotoCoreError as exc:
            raise auth_error(SOURCE, str(exc), _NEXT_STEP) from exc
        if credentials is None:
            raise auth_error(SOURCE, "no AWS credentials found", _NEXT_STEP)
        signed = AWSRequest(
            method=request.method,
            url=str(request.url),
            data=request.content or None,
            headers={"host": request.url.netloc.decode()},
        )
        SigV4Auth(credentials.get_frozen_credentials(), self.service, self.region).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            if name in signed.headers:
                request.headers[name] = signed.headers[name]
        yield request


class CloudWatchPromQLConnector(PrometheusConnector):
    """The ``prometheus`` connector on CloudWatch's (or AMP's) PromQL endpoint, SigV4-signed."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = CloudWatchPromQLConfig

    def __init__(
        self, config: CloudWatchPromQLConfig, *, session: boto3.Session | None = None, **kwargs: Any
    ) -> None:
        super().__init__(config.with_session(session or session_for(config)), **kwargs)
