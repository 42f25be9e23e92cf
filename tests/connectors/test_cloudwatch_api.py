"""The ``cloudwatch`` connector's AWS paths: batching, pagination, retries, auth, assume-role,
Container Insights attribution — real boto3 clients over the wire to moto on 127.0.0.1, with a
fault proxy in front of it where moto cannot misbehave (throttling, 5xx, refused credentials)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import KEY_ID, SECRET, CallLog, FaultProxy, json_error, put_points

from connectors.base import ConfigurationError, FatalSourceError, RetriableError
from connectors.cloudwatch import CloudWatchConfig, CloudWatchConnector, client_factory
from connectors.registry import connector_class, validate_config

T0 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
M = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
UTIL = "nvidia_smi_utilization_gpu"


def _config(endpoint: str, **extra: Any) -> CloudWatchConfig:
    return cloudwatch_config(endpoint, **extra)


def _connector(endpoint: str, retries: int) -> CloudWatchConnector:
    return CloudWatchConnector(_config(endpoint, max_retries=retries), clock=lambda: T0 + H)


def _logged(config: CloudWatchConfig, log: CallLog) -> Callable[[Any, str, str], Any]:
    def make_client(session: Any, service: str, region: str) -> Any:
        return log.attach(client_factory(config)(session, service, region))

    return make_client


def _gpu(instance: str, index: int) -> dict[str, str]:
    return {"index": str(index), "InstanceId": instance, "InstanceType": "p4d.24xlarge",
            "host": f"ip-{instance}", "name": "NVIDIA A100-SXM4-40GB", "arch": "Ampere"}  # fmt: skip


def _collect(connector: CloudWatchConnector, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    return pl.concat([b.samples for b in connector.collect(start, end)])


@pytest.mark.slow
def test_more_than_500_series_take_two_get_metric_data_calls(
    moto: str, aws_client: Callable[..., Any]
) -> None:
    """13 instances × 8 GPUs × 5 metrics = 520 series: one call of 500 queries, one of 20."""
    cloudwatch = aws_client("cloudwatch")
    metrics = ("nvidia_smi_utilization_gpu", "nvidia_smi_memory_used", "nvidia_smi_memory_total",
               "nvidia_smi_power_draw", "nvidia_smi_temperature_gpu")  # fmt: skip
    data = []
    for n in range(13):
        for i in range(8):
            dims = [{"Name": k, "Value": v} for k, v in _gpu(f"i-{n:04d}", i).items()]
            for k, metric in enumerate(metrics):
                data.append(
                    {"MetricName": metric, "Dimensions": dims, "Timestamp": T0, "Value": float(n * 8 + i + k)}
                )
    for first in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[first : first + 1000])
    log = CallLog()
    config = _config(moto)
    with CloudWatchConnector(config, make_client=_logged(config, log), clock=lambda: T0 + H) as connector:
        samples = _collect(connector, T0, T0 + M)
    assert [len(c["MetricDataQueries"]) for c in log.calls] == [500, 20]
    assert samples.height == 520
    util = samples.filter(pl.col("metric") == "gpu_util")
    assert dict(zip(util["device_id"], util["value"], strict=True))["i-0012/gpu7"] == 103.0
    temp = samples.filter(pl.col("metric") == "temp_c")
    assert dict(zip(temp["device_id"], temp["value"], strict=True))["i-0012/gpu7"] == 107.0


class _Paging:
    """Wraps a real client: the first GetMetricData answer keeps each result's first half, marks it
    ``PartialData`` and hands out a NextToken; the call with that token returns the rest (moto
    itself ignores NextToken and answers in one page)."""

    def __init__(self, client: Any, drop_token: bool = False) -> None:
        self._client, self._drop_token, self._rest = client, drop_token, None
        self.tokens: list[str | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_metric_data(self, **request: Any) -> dict[str, Any]:
        self.tokens.append(request.get("NextToken"))
        if request.get("NextToken") == "page-2":
            return {"MetricDataResults": self._rest, "Messages": []}
        answer = self._client.get_metric_data(**request)
        first, self._rest = [], []
        for result in answer["MetricDataResults"]:
            half = len(result["Timestamps"]) // 2
            head = {"Timestamps": result["Timestamps"][:half], "Values": result["Values"][:half]}
            first.append(result | head | {"StatusCode": "PartialData"})
            self._rest.append(
                result | {"Timestamps": result["Timestamps"][half:], "Values": result["Values"][half:]}
            )
        page = {"MetricDataResults": first, "Messages": []}
        return page if self._drop_token else page | {"NextToken": "page-2"}


def test_next_token_pages_are_followed(moto: str, aws_client: Callable[..., Any]) -> None:
    put_points(aws_client("cloudwatch"), "CWAgent", UTIL, _gpu("i-0001", 0), [T0 + m * M for m in range(10)],
               [10.0 * m for m in range(10)])  # fmt: skip
    config = _config(moto)
    wrappers: list[_Paging] = []

    def make_client(session: Any, service: str, region: str) -> Any:
        real = client_factory(config)(session, service, region)
        if service != "cloudwatch":
            return real
        wrappers.append(_Paging(real))
        return wrappers[-1]

    with CloudWatchConnector(config, make_client=make_client, clock=lambda: T0 + H) as connector:
        samples = _collect(connector, T0, T0 + 10 * M)
    assert wrappers[0].tokens == [None, "page-2"]
    assert samples.sort("ts_ms")["value"].to_list() == [10.0 * m for m in range(10)]


def test_partial_data_without_a_next_token_is_retriable(moto: str, aws_client: Callable[..., Any]) -> None:
    put_points(aws_client("cloudwatch"), "CWAgent", UTIL, _gpu("i-0001", 0), [T0, T0 + M], [1.0, 2.0])
    config = _config(moto)

    def make_client(session: Any, service: str, region: str) -> Any:
        real = client_factory(config)(session, service, region)
        return _Paging(real, drop_token=True) if service == "cloudwatch" else real

    connector = CloudWatchConnector(config, make_client=make_client, clock=lambda: T0 + H)
    with connector, pytest.raises(RetriableError, match="PartialData without a NextToken"):
        _collect(connector, T0, T0 + 2 * M)


def test_throttling_is_retried_by_botocore_then_succeeds(moto: str, aws_client: Callable[..., Any]) -> None:
    put_points(aws_client("cloudwatch"), "CWAgent", UTIL, _gpu("i-0001", 0), [T0], [42.0])
    fault = json_error(400, "Throttling", "Rate exceeded")
    with FaultProxy(moto, fault, failures=1) as proxy, _connector(proxy.url, 1) as connector:
        samples = _collect(connector, T0, T0 + M)
    # the first ListMetrics throttled and retried, 4 more (one per agent metric), 1 DescribeInstances
    # (the instance's tags), 1 GetMetricData
    assert proxy.requests == 1 + 5 + 1 + 1
    assert samples["value"].to_list() == [42.0]


@pytest.mark.parametrize(
    ("fault", "retries", "match"),
    [
        # throttling backs off 0–1 s, 0–2 s, … (botocore): one retry keeps the test short
        (json_error(400, "Throttling", "Rate exceeded"), 1, "Throttling: Rate exceeded \\(after 2 tries\\)"),
        (json_error(503, "ServiceUnavailable", "try later"), 3,
         "ServiceUnavailable: try later \\(after 4 tries\\)"),
        ((500, {"Content-Type": "text/plain"}, b"upstream broke"), 3, "\\(after 4 tries\\)"),
    ],
)  # fmt: skip
def test_throttling_and_5xx_become_retriable_after_botocore_retries(
    moto: str, fault: tuple[int, dict[str, str], bytes], retries: int, match: str
) -> None:
    with (
        FaultProxy(moto, fault, failures=100) as proxy,
        _connector(proxy.url, retries) as connector,
        pytest.raises(RetriableError, match=match),
    ):
        _collect(connector, T0, T0 + M)
    assert proxy.requests == retries + 1  # the first try and max_retries retries, then no more calls


def test_a_dead_endpoint_is_retriable() -> None:
    with _connector("http://127.0.0.1:9", 0) as connector, pytest.raises(RetriableError, match="ListMetrics"):
        _collect(connector, T0, T0 + M)


@pytest.mark.parametrize(
    ("fault", "match"),
    [
        (json_error(403, "AccessDenied", "User: arn:aws:iam::111122223333:user/x is not authorized"),
         "permission denied .*Next step: grant the connector's identity cloudwatch:GetMetricData, "
         "cloudwatch:ListMetrics, ec2:DescribeInstances"),
        (json_error(400, "InvalidClientTokenId", "The security token included in the request is invalid."),
         "authentication failed .*Next step: check the connector's AWS credentials"),
        (json_error(400, "ExpiredToken", "The security token included in the request is expired"),
         "authentication failed .*ExpiredToken"),
    ],
)  # fmt: skip
def test_refused_credentials_are_fatal_with_the_next_step(
    moto: str, fault: tuple[int, dict[str, str], bytes], match: str
) -> None:
    with (
        FaultProxy(moto, fault, failures=100) as proxy,
        _connector(proxy.url, 3) as connector,
        pytest.raises(FatalSourceError, match=match) as raised,
    ):
        _collect(connector, T0, T0 + M)
    assert proxy.requests == 1  # never retried
    assert SECRET not in str(raised.value) and KEY_ID not in str(raised.value)


def test_assume_role_reads_the_role_account_in_two_regions(moto: str, aws_client: Callable[..., Any]) -> None:
    """Metrics live in account 444455556666 (us-east-1 and eu-west-1); the connector's own keys
    belong to moto's default account 123456789012, which has a decoy GPU of its own."""
    role = "arn:aws:iam::444455556666:role/gpu-ledger-reader"
    creds = aws_client("sts").assume_role(RoleArn=role, RoleSessionName="writer")["Credentials"]
    keys = {"aws_access_key_id": creds["AccessKeyId"], "aws_secret_access_key": creds["SecretAccessKey"],
            "aws_session_token": creds["SessionToken"]}  # fmt: skip
    put_points(aws_client("cloudwatch", "us-east-1", **keys), "CWAgent", UTIL, _gpu("i-0e1", 0), [T0], [11.0])
    put_points(aws_client("cloudwatch", "eu-west-1", **keys), "CWAgent", UTIL, _gpu("i-0e2", 3), [T0], [22.0])
    put_points(aws_client("cloudwatch", "us-east-1"), "CWAgent", UTIL, _gpu("i-decoy", 0), [T0], [99.0])
    config = _config(
        moto, regions=["us-east-1", "eu-west-1"], role_arn=role, external_id="ext-123", account_id=None
    )
    with CloudWatchConnector(config, clock=lambda: T0 + H) as connector:
        batches = list(connector.collect(T0, T0 + M))
    devices = {d.device_id: d for b in batches for d in b.devices}
    assert {k: (d.account, d.region) for k, d in devices.items()} == {
        "i-0e1/gpu0": ("444455556666", "us-east-1"),
        "i-0e2/gpu3": ("444455556666", "eu-west-1"),
    }
    samples = pl.concat([b.samples for b in batches]).sort("device_id")
    assert samples["value"].to_list() == [11.0, 22.0]


def test_config_is_found_by_type_and_checked() -> None:
    base = {"name": "aws", "type": "cloudwatch", "regions": ["us-east-1"], "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET}  # fmt: skip
    config = validate_config(base | {"role_arn": "arn:aws:iam::444455556666:role/r", "external_id": "x"})
    assert isinstance(config, CloudWatchConfig) and connector_class("cloudwatch") is CloudWatchConnector
    assert SECRET not in repr(config) and KEY_ID not in repr(config)
    assert (config.period_s, config.namespace, config.max_retries) == (60, "CWAgent", 5)
    for change in (
        {"period_s": 90},  # CloudWatch: 1, 5, 10, 30 or a multiple of 60
        {"regions": []},
        {"regions": ["US East"]},
        {"aws_secret_access_key": None},  # a key id without its secret
        {"external_id": "x"},  # without role_arn
        {"account_id": "12345"},
        {"profile": "p"},  # besides static keys
        {"region": "us-east-1"},  # unknown key (a typo of regions)
    ):
        table = {k: v for k, v in (base | change).items() if v is not None}
        with pytest.raises(ConfigurationError):
            validate_config(table)
