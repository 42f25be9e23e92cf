"""What the Azure connectors (``azure_monitor``, ``azure_prometheus``) share: credentials, SDK errors.

``tenant_id`` + ``client_id`` + ``client_secret`` (a service principal) build a
``ClientSecretCredential``; with none of them, ``DefaultAzureCredential`` tries the environment,
a managed identity, the workload identity of an AKS pod and ``az login``, in that order. Giving
some of the three but not all is a configuration error: silently falling back to another
identity would read with permissions the operator did not mean to use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import SecretStr

from connectors.cloud import auth_error, permission_error
from connectors.sdk import ConfigurationError, FatalSourceError, RetriableError

#: The operator's next step when Azure AD refuses the connector's identity.
AUTH_NEXT_STEP = "check tenant_id/client_id/client_secret (or run `az login` for DefaultAzureCredential)"


def build_credential(
    tenant_id: str | None,
    client_id: str | None,
    client_secret: SecretStr | None,
    authority_host: str | None = None,
) -> Any:
    """An azure-identity credential from the three service-principal keys, or the default chain.

    ``authority_host``: the Azure AD (Entra ID) host of a sovereign cloud
    (``https://login.microsoftonline.us``, ``https://login.chinacloudapi.cn``) or of a private
    identity endpoint; instance discovery against the public cloud is then skipped, since that
    host would not know it.
    """
    given = [tenant_id is not None, client_id is not None, client_secret is not None]
    if any(given) and not all(given):
        raise ConfigurationError("tenant_id, client_id and client_secret go together (a service principal)")
    from azure.identity import ClientSecretCredential, DefaultAzureCredential

    options: dict[str, Any] = {}
    if authority_host is not None:
        options = {"authority": authority_host, "disable_instance_discovery": True}
    if all(given):
        assert tenant_id is not None and client_id is not None and client_secret is not None
        return ClientSecretCredential(tenant_id, client_id, client_secret.get_secret_value(), **options)
    return DefaultAzureCredential(**options)


def call_azure(source: str, permission: str, request: Callable[[], Any]) -> Any:
    """Run an azure-core SDK call (its retry policy already spent); errors become connector errors.

    401 or a credential that cannot get a token → fatal, check the credentials; 403 → fatal, grant
    ``permission``; 408/429/5xx and connection failures → retriable; other HTTP errors → fatal.
    """
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    try:
        return request()
    except HttpResponseError as exc:
        status = exc.status_code
        detail = f"HTTP {status}: {_reason(exc)}" if status else _reason(exc)
        # A ClientAuthenticationError without a status is the credential failing to get a token.
        if status == 401 or (status is None and isinstance(exc, ClientAuthenticationError)):
            raise auth_error(source, detail, AUTH_NEXT_STEP) from exc
        if status == 403:
            raise permission_error(source, detail, permission) from exc
        if status is not None and (status in (408, 429) or status >= 500):
            raise RetriableError(f"{source}: {detail} (after the retries of max_retries)") from exc
        raise FatalSourceError(f"{source}: {detail}") from exc
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise RetriableError(f"{source}: {type(exc).__name__}: {_reason(exc)}") from exc


def _reason(exc: Exception) -> str:
    return (getattr(exc, "message", None) or str(exc)).splitlines()[0][:300]
