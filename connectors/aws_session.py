"""AWS credentials for the AWS connectors (``cloudwatch``, ``aws_cur``): one way to build them.

Both configs carry the same keys: ``profile``, or static ``aws_access_key_id`` +
``aws_secret_access_key`` (secrets), or neither (boto3's default chain: environment, SSO, instance
or task role); then optionally ``role_arn`` (+ ``external_id``, ``role_session_name``) assumed
through STS. Clients get botocore's ``standard`` retry mode with ``max_retries + 1`` attempts in
all (botocore's plain ``max_attempts`` would allow one more) and the configured timeouts.
"""

from __future__ import annotations

from typing import Any, Protocol

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ProfileNotFound
from pydantic import SecretStr

from connectors.sdk import ConfigurationError


class AwsKeys(Protocol):
    """A profile or static keys (read-only: configs are frozen); neither: boto3's default chain."""

    @property
    def profile(self) -> str | None: ...
    @property
    def aws_access_key_id(self) -> SecretStr | None: ...
    @property
    def aws_secret_access_key(self) -> SecretStr | None: ...


class AwsAccess(AwsKeys, Protocol):
    """The credential keys an AWS connector's config has, a role to assume, retries and timeouts."""

    @property
    def role_arn(self) -> str | None: ...
    @property
    def external_id(self) -> str | None: ...
    @property
    def role_session_name(self) -> str: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...


def boto_config(config: AwsAccess) -> BotoConfig:
    """botocore's standard retries (``max_retries`` after the first try) and the timeouts."""
    return BotoConfig(
        retries={"mode": "standard", "total_max_attempts": config.max_retries + 1},
        connect_timeout=config.timeout_s,
        read_timeout=config.timeout_s,
    )


def base_session(config: AwsKeys, source: str) -> boto3.Session:
    """The session of the configured profile or static keys (else boto3's default chain)."""
    key, secret = config.aws_access_key_id, config.aws_secret_access_key
    try:
        return boto3.Session(
            profile_name=config.profile,
            aws_access_key_id=key.get_secret_value() if key is not None else None,
            aws_secret_access_key=secret.get_secret_value() if secret is not None else None,
        )
    except ProfileNotFound as exc:
        raise ConfigurationError(f"{source}: {exc}") from exc


def assume_role_request(config: AwsAccess) -> dict[str, Any]:
    """``sts:AssumeRole`` parameters for ``role_arn`` (with ``external_id`` when given)."""
    request: dict[str, Any] = {"RoleArn": config.role_arn, "RoleSessionName": config.role_session_name}
    if config.external_id is not None:
        request["ExternalId"] = config.external_id
    return request


def session_of(credentials: dict[str, Any]) -> boto3.Session:
    """A session of the temporary credentials ``sts:AssumeRole`` answered."""
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )
