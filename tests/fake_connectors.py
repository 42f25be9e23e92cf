"""Connector classes for tests, registered through in-test ``EntryPoint`` objects."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from typing import ClassVar, Literal

from pydantic import SecretStr

from connectors.base import ConnectorConfig, DeviceInfo, SampleBatch, Sampling, empty_samples
from connectors.registry import ENTRY_POINT_GROUP, Registry


class FakeMetricsConfig(ConnectorConfig):
    url: str = "http://127.0.0.1:1"
    token: SecretStr | None = None
    regions: list[str] = []


class FakeMetrics:
    """A metrics connector with no devices (the scheduler tests never call collect)."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = FakeMetricsConfig

    def __init__(self, config: FakeMetricsConfig, *, presence_gap_s: float = 3600.0):
        self.config = config
        self.sampling = Sampling.every(15.0, presence_gap_s=presence_gap_s)

    def discover(self) -> list[DeviceInfo]:
        return []

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        yield SampleBatch(samples=empty_samples(), devices=[])


class FakeBillingConfig(ConnectorConfig):
    path: str


class FakeBilling:
    kind: ClassVar[Literal["billing"]] = "billing"
    config_model: ClassVar[type[ConnectorConfig]] = FakeBillingConfig

    def __init__(self, config: FakeBillingConfig):
        self.config = config

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[object]:
        return iter(())


def ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def fake_registry(disabled: tuple[str, ...] = ()) -> Registry:
    return Registry(
        [ep("fake", "fake_connectors:FakeMetrics"), ep("fakebill", "fake_connectors:FakeBilling")],
        disabled=disabled,
    )
