"""``azure_prometheus``: dcgm-exporter metrics from an Azure Monitor workspace (managed Prometheus).

Microsoft's current advice for AKS GPU telemetry is dcgm-exporter scraped into an Azure Monitor
workspace (docs/formats.md §4.2), whose query endpoint
(``https://<workspace>.<region>.prometheus.monitor.azure.com``) speaks the Prometheus HTTP API.
This is the ``prometheus`` connector (query grid, field mapping, MIG and pod rules, retries) with
Azure AD auth: every request carries ``Authorization: Bearer <token>`` for ``token_scope``
(default ``https://prometheus.monitor.azure.com/.default``), from a service principal
(``tenant_id``/``client_id``/``client_secret``) or ``DefaultAzureCredential``. A token is reused
until 5 minutes before it expires. The identity needs *Monitoring Data Reader* on the workspace.

``environment`` defaults to ``azure`` (device ids and stamps are :mod:`connectors.dcgm`'s: GPU UUIDs).
A token that cannot be had raises ``FatalSourceError`` with the next step; HTTP 401/403 from the
endpoint are fatal as in ``prometheus``.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, ClassVar, Literal

import httpx
from pydantic import PrivateAttr, SecretStr, model_validator

from connectors.azure_auth import AUTH_NEXT_STEP, build_credential
from connectors.cloud import auth_error
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import ConnectorConfig

DEFAULT_SCOPE = "https://prometheus.monitor.azure.com/.default"
REFRESH_BEFORE_S = 300.0


class AzurePrometheusConfig(PrometheusConfig):
    """``type = "azure_prometheus"``: ``url`` is the workspace's Prometheus query endpoint.

    Adds ``tenant_id``, ``client_id``, ``client_secret`` (none of them: ``DefaultAzureCredential``),
    ``authority_host`` (a sovereign cloud's Azure AD host) and ``token_scope``.
    ``username``/``password``/``bearer_token`` are refused: Azure AD signs the requests.
    """

    type: str = "azure_prometheus"
    environment: Literal["onprem", "aws", "gcp", "azure"] = "azure"
    tenant_id: str | None = None
    authority_host: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    token_scope: str = DEFAULT_SCOPE
    _token_auth: httpx.Auth | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _azure_ad_only(self) -> AzurePrometheusConfig:
        if self.username is not None or self.bearer_token is not None:
            raise ValueError(
                "azure_prometheus signs requests with Azure AD: drop username/password/bearer_token"
            )
        return self

    def with_credential(self, credential: Any) -> AzurePrometheusConfig:
        """A copy whose ``auth()`` signs requests with tokens from ``credential`` (one shared cache)."""
        bound = self.model_copy()
        bound._token_auth = AzureTokenAuth(credential, self.token_scope)
        return bound

    def auth(self) -> httpx.Auth | None:
        if self._token_auth is None:  # a config used on its own: build the credential now
            self._token_auth = AzureTokenAuth(
                build_credential(self.tenant_id, self.client_id, self.client_secret, self.authority_host),
                self.token_scope,
            )
        return self._token_auth


class AzureTokenAuth(httpx.Auth):
    """``Authorization: Bearer`` from an azure-identity credential, cached until near expiry."""

    def __init__(self, credential: Any, scope: str, clock: Callable[[], float] = time.time) -> None:
        self.credential, self.scope, self._clock = credential, scope, clock
        self._token: str | None = None
        self._expires_on = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        from azure.core.exceptions import ClientAuthenticationError

        with self._lock:
            if self._token is None or self._clock() >= self._expires_on - REFRESH_BEFORE_S:
                try:
                    access = self.credential.get_token(self.scope)
                except ClientAuthenticationError as exc:
                    detail = (exc.message or str(exc)).splitlines()[0][:300]
                    raise auth_error("azure_prometheus", detail, AUTH_NEXT_STEP) from exc
                self._token, self._expires_on = access.token, float(access.expires_on)
            return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token()}"
        yield request


class AzurePrometheusConnector(PrometheusConnector):
    """The ``prometheus`` connector on an Azure Monitor workspace; see the module docstring."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = AzurePrometheusConfig

    def __init__(
        self,
        config: AzurePrometheusConfig,
        *,
        credential: Any = None,
        client: httpx.Client | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._credential = (
            credential
            if credential is not None
            else build_credential(
                config.tenant_id, config.client_id, config.client_secret, config.authority_host
            )
        )
        self._owns_credential = credential is None
        super().__init__(config.with_credential(self._credential), client=client, clock=clock, sleep=sleep)

    def close(self) -> None:
        super().close()
        if self._owns_credential:
            closer = getattr(self._credential, "close", None)
            if callable(closer):
                closer()
