"""AWS plumbing of the ``cloudwatch`` connector: sessions (static keys, profile, default chain,
an assumed role renewed before it expires), one cached client per region and service, and
botocore errors mapped to the connector errors (what the runner does next)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, Protocol

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from connectors.aws_session import AwsAccess, assume_role_request, base_session, boto_config, session_of
from connectors.cloud import auth_error, permission_error
from connectors.sdk import ConfigurationError, ConnectorError, FatalSourceError, RetriableError

SOURCE = "CloudWatch"
PERMISSIONS = "cloudwatch:GetMetricData, cloudwatch:ListMetrics, ec2:DescribeInstances, logs:FilterLogEvents"

_THROTTLING = {"Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
               "TooManyRequestsException", "RequestThrottledException", "ServiceUnavailable",
               "InternalFailure", "InternalError"}  # fmt: skip
_AUTH = {"UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException",
         "AuthFailure", "SignatureDoesNotMatch", "InvalidSignatureException", "IncompleteSignature",
         "MissingAuthenticationToken"}  # fmt: skip
DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}
_AUTH_NEXT_STEP = (
    "check the connector's AWS credentials (profile, access keys or role_arn/external_id) and "
    f"that its identity may call {PERMISSIONS}"
)


class AwsConnectorConfig(AwsAccess, Protocol):
    """What the plumbing reads of a connector's config besides the credentials."""

    @property
    def endpoint_url(self) -> str | None: ...
    @property
    def account_id(self) -> str | None: ...


#: Builds one AWS client: (boto3 session, service name, region) → client.
ClientFactory = Callable[[boto3.Session, str, str], Any]


def client_factory(config: AwsConnectorConfig) -> ClientFactory:
    """The production client factory: botocore's standard retries, timeouts, the endpoint."""
    boto = boto_config(config)

    def make(session: boto3.Session, service: str, region: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=config.endpoint_url, config=boto)

    return make


class AwsCalls:
    """Sessions, clients and error mapping for a connector that sets ``config``, ``_session_given``,
    ``_make_client`` and ``_clock`` and calls :meth:`_init_aws` from its ``__init__``."""

    config: AwsConnectorConfig
    _session_given: boto3.Session | None
    _make_client: ClientFactory
    _clock: Callable[[], dt.datetime]

    def _init_aws(self) -> None:
        self._clients: dict[tuple[str, str, bool], Any] = {}
        self._assumed: dict[str, tuple[boto3.Session, dt.datetime]] = {}
        self._account: str | None = self.config.account_id

    def close(self) -> None:
        """Close every AWS client the connector opened."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _base_session(self) -> boto3.Session:
        if self._session_given is None:
            self._session_given = base_session(self.config, SOURCE)
        return self._session_given

    def _session(self, region: str) -> boto3.Session:
        cfg = self.config
        if cfg.role_arn is None:
            return self._base_session()
        cached = self._assumed.get(region)
        if cached is not None and cached[1] - self._clock() > dt.timedelta(minutes=5):
            return cached[0]
        sts = self._raw_client(self._base_session(), "sts", region, base=True)
        try:
            answer = sts.assume_role(**assume_role_request(cfg))
        except ClientError as exc:
            if error_code(exc) in DENIED:
                raise permission_error(
                    SOURCE,
                    f"sts:AssumeRole {cfg.role_arn}: {error_code(exc)}",
                    f"sts:AssumeRole on {cfg.role_arn} (and check the role's trust policy and external_id)",
                ) from exc
            raise self._mapped(exc, "sts:AssumeRole") from exc
        except BotoCoreError as exc:
            raise self._mapped(exc, "sts:AssumeRole") from exc
        creds = answer["Credentials"]
        session = session_of(creds)
        for key in [k for k in self._clients if k[0] == region and not k[2]]:
            self._clients.pop(key).close()  # clients of the expiring credentials
        self._assumed[region] = (session, creds["Expiration"])
        return session

    def _client(self, region: str, service: str) -> Any:
        session = self._session(region)
        return self._raw_client(session, service, region, base=False)

    def _raw_client(self, session: boto3.Session, service: str, region: str, *, base: bool) -> Any:
        key = (region, service, base)
        if key not in self._clients:
            self._clients[key] = self._make_client(session, service, region)
        return self._clients[key]

    def _account_id(self, region: str) -> str:
        if self._account is None:
            sts = self._client(region, "sts")
            self._account = self._call(lambda: sts.get_caller_identity()["Account"], "sts:GetCallerIdentity")
        return self._account

    def _call(self, call: Callable[[], Any], what: str) -> Any:
        try:
            return call()
        except (ClientError, BotoCoreError) as exc:
            raise self._mapped(exc, what) from exc

    def _mapped(self, exc: Exception, what: str) -> ConnectorError:
        tries = self.config.max_retries + 1
        if isinstance(exc, ClientError):
            code = error_code(exc)
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            detail = f"{what}: {code}: {exc.response.get('Error', {}).get('Message', '')}"[:300]
            if code in DENIED:
                return permission_error(SOURCE, detail, PERMISSIONS)
            if code in _AUTH:
                return auth_error(SOURCE, detail, _AUTH_NEXT_STEP)
            if code in _THROTTLING or status == 429 or status >= 500:
                return RetriableError(f"{SOURCE}: {detail} (after {tries} tries)")
            return FatalSourceError(f"{SOURCE}: {detail}")
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return auth_error(
                SOURCE, f"{what}: {exc}", "configure AWS credentials for the connector: " + _AUTH_NEXT_STEP
            )
        if isinstance(exc, ProfileNotFound):
            return ConfigurationError(f"{SOURCE}: {exc}")
        if isinstance(exc, BotoConnectionError | HTTPClientError):
            return RetriableError(f"{SOURCE}: {what}: {exc} (after {tries} tries)")
        return FatalSourceError(f"{SOURCE}: {what}: {type(exc).__name__}: {exc}")


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
