"""pytest fixtures for the ``cloudwatch`` tests; a test module imports the ones it uses.

``aws_endpoint``: one moto server per test module; ``moto`` (function scope): that endpoint with
its state reset and the environment cleared of any AWS profile, config file or endpoint override,
so only the connector's own settings reach boto3; ``aws_client``: a factory of the test's own
boto3 clients on that endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from awsfake.server import KEY_ID, SECRET, moto_server, reset

_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_CLOUDWATCH",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_STS",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
)


@pytest.fixture(scope="module")
def aws_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def moto(aws_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reset(aws_endpoint)
    return aws_endpoint


@pytest.fixture
def aws_client(moto: str) -> Iterator[Callable[..., Any]]:
    """Makes plain boto3 clients on the moto endpoint (the test's own writers, not the
    connector's), closed after the test."""
    made: list[Any] = []

    def make(service: str, region: str = "us-east-1", **creds: str) -> Any:
        keys = creds or {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET}
        made.append(boto3.client(service, region_name=region, endpoint_url=moto, **keys))
        return made[-1]

    yield make
    for c in made:
        c.close()


def cloudwatch_config(endpoint: str, **extra: Any) -> Any:
    """A ``cloudwatch`` connector config on the moto ``endpoint`` with the fake's keys, no retries
    and no Container Insights; ``extra`` overrides any key."""
    from connectors.cloudwatch import CloudWatchConfig

    values: dict[str, Any] = {
        "name": "aws",
        "regions": ["us-east-1"],
        "endpoint_url": endpoint,
        "aws_access_key_id": KEY_ID,
        "aws_secret_access_key": SECRET,
        "account_id": "111122223333",
        "max_retries": 0,
        "container_insights": False,
    }
    return CloudWatchConfig(**(values | extra))
