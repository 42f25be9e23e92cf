"""The agent checks its config without pydantic (service.agent.keys; issue 13's 60 MB): here every
key of every table it reads is held to the pydantic model that defines it — the service's
``NvmlConfig`` and ``MappingRule``, and ``AgentSettings`` as the agent declared it with pydantic
(below) — on the same values: what is accepted, the value it becomes, and each error's key and
message, in order."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from connectors.attribution import Rule
from connectors.attribution_config import MappingRule
from connectors.nvml_config import NvmlConfig
from connectors.registry import validation_problems
from service.agent.config import AGENT_KEYS, RULE_KEYS, AgentConfigError, AgentSettings, check_rules
from service.agent.keys import Secret, check_table
from service.agent.nvml_options import NVML_KEYS, NvmlSettings


class PydanticAgentSettings(BaseModel):
    """``AgentSettings`` as it was declared with pydantic (before issue 13's memory work)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    service_url: str = Field(pattern=r"^https?://")
    token: SecretStr
    name: str = Field(min_length=1, max_length=100)
    agent_id: str = Field(default_factory=lambda: socket.gethostname(), pattern=r"^[^:\s]+$", max_length=150)
    period_s: float = Field(5.0, gt=0, le=3600)
    ship_every_s: float = Field(60.0, gt=0, le=86400)
    spool_dir: Path
    metrics_host: str = "0.0.0.0"
    metrics_port: int = Field(9400, ge=0, le=65535)
    source: str = "nvml"
    source_options: dict[str, Any] = Field(default_factory=dict)
    request_timeout_s: float = Field(10.0, gt=0)
    backoff_base_s: float = Field(1.0, gt=0)
    backoff_cap_s: float = Field(300.0, gt=0)
    attribution_rules: list[MappingRule] = Field(default_factory=list)
    docker_socket: Path | None = Path("/var/run/docker.sock")
    proc_root: Path = Path("/proc")
    pod_resources_socket: Path | None = None
    pod_resources_every_s: float = Field(10.0, gt=0)
    kubernetes_api: str | None = Field(None, min_length=1)
    kubernetes_node: str = Field(default_factory=lambda: socket.gethostname(), min_length=1, max_length=253)

    @field_validator("service_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.rstrip("/")


MODELS: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (NvmlConfig, NVML_KEYS),
    (MappingRule, RULE_KEYS),
    (PydanticAgentSettings, AGENT_KEYS),
]
# Every kind of value a TOML file can hold, and strings that look like numbers, booleans, paths.
NUMBERS = [0, 1, -1, 2, 3600, 3601, 65535, 65536, 86400, 86401, 0.0, 0.5, 1.0, -0.0, 1.5, 9400.0,
           math.inf, -math.inf, math.nan, 1e20, True, False]  # fmt: skip
TEXTS = ["", " ", "5", " 5 ", "5.0", "1_0", "+5", ".5", "5.", "1e3", "inf", "nan", "-inf", "0x10", "abc",
         "yes", "No", "off", "T", "onprem", "aws", "gcp", "azure", "http://svc/", "https://x", "ftp://x",
         "a b", "a:b", "n17", "x" * 101, "x" * 151, "/tmp/s", "(", "(.*)", "team-(.*)"]  # fmt: skip
OTHER = [
    [],
    [1],
    ["a"],
    {},
    {"a": 1},
    {"a": "b"},
    [{"image": ".*", "team": "t"}],
    [{"projekt": "x"}],
    [1, {}],
]
VALUES = [*NUMBERS, *TEXTS, *OTHER]
TOML_VALUE = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(2**64), 2**64),
        st.floats(),
        st.text(alphabet="0123456789.e+-_ xyzTFnoa:/()$", max_size=8),
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "team", "image"]), inner, max_size=2)
    ),
    max_leaves=4,
)


def pydantic_side(
    model: type[BaseModel], table: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    try:
        return dict(model.model_validate(table)), []
    except ValidationError as exc:
        return None, validation_problems(exc)


def agent_side(
    model: type[BaseModel], table: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
    if model is MappingRule:
        rules, problems = check_rules([table], "x")
        problems = [(k.removeprefix("x.0").removeprefix("."), m) for k, m in problems]
        return (vars(rules[0]) if rules else None), problems
    if model is PydanticAgentSettings:
        try:
            return vars(AgentSettings.from_table(table)), []
        except AgentConfigError as exc:
            return None, _parsed(str(exc))
    values, problems = check_table(table, NVML_KEYS)
    return (None if problems else values), problems


def _parsed(message: str) -> list[tuple[str, str]]:
    assert message.startswith("[agent]: ")
    out = []
    for part in message.removeprefix("[agent]: ").split('; key "'):
        key, _, text = part.removeprefix('key "').partition('": ')
        out.append((key, text))
    return out


def same(a: Any, b: Any) -> bool:
    if isinstance(a, SecretStr) or isinstance(b, Secret):
        return a.get_secret_value() == b.get_secret_value()
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):  # attribution rules: pydantic's front vs Rule
        return len(a) == len(b) and all(vars(x._rule) == vars(y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def assert_same(model: type[BaseModel], table: dict[str, Any]) -> None:
    expected_values, expected = pydantic_side(model, table)
    got_values, got = agent_side(model, table)
    # the same problems, each with the same text; the order is not judged: pydantic names a nested
    # field's unknown key (attribution_rules.0.a) before a top-level one, the agent the other way
    # round, and a person reads one message listing them all (hypothesis found such a table)
    assert sorted(got) == sorted(expected), table
    if expected_values is not None:
        assert got_values is not None
        for key, value in expected_values.items():
            if model is MappingRule and key == "label":
                assert dict(got_values[key]) == value
            else:
                assert same(value, got_values[key]), (key, value, got_values[key])


BASE = {
    NvmlConfig: {},
    MappingRule: {"image": ".*", "team": "t"},
    PydanticAgentSettings: {"service_url": "http://svc", "token": "t", "name": "n", "spool_dir": "/s"},
}


@pytest.mark.parametrize(("model", "keys"), MODELS, ids=lambda m: getattr(m, "__name__", ""))
def test_the_same_keys_in_the_same_order_with_the_same_defaults(model: type[BaseModel], keys: dict) -> None:
    assert list(model.model_fields) == list(keys)
    for name, field in model.model_fields.items():
        if field.default_factory is not None:
            assert keys[name].factory is not None
            assert keys[name].factory() == field.default_factory()  # type: ignore[call-arg]
        elif field.is_required():
            assert keys[name].missing() is not None and field.is_required()
            assert not BASE[model] or name in BASE[model] or model is not PydanticAgentSettings
        else:
            assert keys[name].missing() == field.default, name


@pytest.mark.parametrize(("model", "keys"), MODELS, ids=lambda m: getattr(m, "__name__", ""))
def test_every_key_checks_every_kind_of_value_as_pydantic_does(model: type[BaseModel], keys: dict) -> None:
    for name in keys:
        for value in VALUES:
            assert_same(model, {**BASE[model], name: value})
    assert_same(model, {**BASE[model], "projekt": 1, "zzz": "x"})  # unknown keys, after the known ones
    for required in [k for k, f in model.model_fields.items() if f.is_required()]:
        assert_same(model, {k: v for k, v in BASE[model].items() if k != required})


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from([m for m, _ in MODELS]),
    changes=st.dictionaries(
        st.sampled_from(sorted({k for _, keys in MODELS for k in keys} | {"x"})), TOML_VALUE, max_size=4
    ),
)
def test_any_table_is_judged_the_same(model: type[BaseModel], changes: dict[str, Any]) -> None:
    assert_same(model, {**BASE[model], **changes})


@pytest.mark.parametrize(
    "rule",
    [
        {"image": "(", "project": "x"},
        {"label": {"team": "[a-"}, "team": "x"},
        {"image": "(.*)", "project": "$2"},
        {"image": "(?P<a>.*)", "project": "${b}"},
        {"image": ".*"},
        {"label": {"team": 3}, "team": "x"},
        {"namespace": "team-(.*)", "team": "$1", "user": "${label:owner}"},
    ],
)
def test_rules_fail_and_pass_alike_inside_the_agent_table(rule: dict[str, Any]) -> None:
    table = {**BASE[PydanticAgentSettings], "attribution_rules": [rule, 7], "period_s": 0}
    assert_same(PydanticAgentSettings, table)
    assert_same(MappingRule, rule)


def test_the_nvml_sampler_reads_the_same_settings_from_either() -> None:
    options = {"node": "n1", "cluster": "c", "period_s": "2", "energy_every_s": 0, "environment": "aws"}
    values, problems = check_table(options, NVML_KEYS)
    assert problems == []
    ours, theirs = NvmlSettings(**values), NvmlConfig.model_validate(options)
    assert vars(ours) == dict(theirs)
    assert Rule(namespace="team-(.*)", team="$1") == MappingRule(namespace="team-(.*)", team="$1")._rule
