"""The attribution engine on hand-computed cases, and against a plain reference by hypothesis."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from attribution_fleet import rule
from hypothesis import given, settings
from hypothesis import strategies as st

from service.attribution import AttributionRule, attribute, facts_series


def _rows(*rows: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "key": [r.get("key", f"w{i}") for i, r in enumerate(rows)],
            "project": pl.Series([r.get("project") for r in rows], dtype=pl.String),
            "team": pl.Series([r.get("team") for r in rows], dtype=pl.String),
            "user_name": pl.Series([r.get("user_name") for r in rows], dtype=pl.String),
            "facts": facts_series(r.get("facts") for r in rows),
            "device_tags": facts_series((r.get("tags") for r in rows), "device_tags"),
        }
    )


def _owners(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return frame.select("key", "project", "team", "user_name", "owner_rule").rows()


def test_precedence_override_then_source_then_rules_in_file_order() -> None:
    rules = [
        rule("p-late", "slurm.account", "project"),
        rule("p-force", "cloud.tag:project", "project", override=True),
        rule("p-early", "slurm.partition", "project"),
        rule("t", "slurm.account", "team", value="team-$0"),
    ]
    out = attribute(
        _rows(
            # override beats the source's own value
            {"project": "own", "facts": {"cloud.tag:project": "forced", "slurm.account": "acct"}},
            # no override fact: the source's value beats the other rules
            {"project": "own", "facts": {"slurm.account": "acct", "slurm.partition": "gpu"}},
            # no source value: the first rule in file order that gives one
            {"facts": {"slurm.account": "acct", "slurm.partition": "gpu"}},
            {"facts": {"slurm.partition": "gpu"}},
            # nothing names anything
            {"facts": {"unix.user": "bob"}},
        ),
        rules,
    )
    assert _owners(out) == [
        ("w0", "forced", "team-acct", None, "p-force"),
        ("w1", "own", "team-acct", None, "source"),
        ("w2", "acct", "team-acct", None, "p-late"),
        ("w3", "gpu", None, None, "p-early"),
        ("w4", None, None, None, None),
    ]


def test_owner_rule_is_the_project_s_else_the_team_s_else_the_user_s() -> None:
    rules = [rule("t", "slurm.account", "team"), rule("u", "unix.user", "user")]
    out = attribute(
        _rows(
            {"facts": {"slurm.account": "a", "unix.user": "bob"}},
            {"facts": {"unix.user": "bob"}},
            {"team": "own-team", "facts": {"unix.user": "bob"}},
            {"user_name": "own-user"},
        ),
        rules,
    )
    assert _owners(out) == [
        ("w0", None, "a", "bob", "t"),
        ("w1", None, None, "bob", "u"),
        ("w2", None, "own-team", "bob", "source"),
        ("w3", None, None, "own-user", "source"),
    ]


def test_match_value_templates_and_rewrites() -> None:
    rules = [
        rule("ns", "k8s.namespace", "project", match=r"(?i)team-(?P<t>[a-z]+)-(\d+)", value="${t}/$2$$",
             values={"ml/7$": "Machine Learning"}),
        rule("label", "k8s.pod_label:app", "project", match="(.*)-svc"),  # no value: the fact's value
        rule("user", "slurm.user", "user", match="(.+)@corp", value="${1}_x"),
    ]  # fmt: skip
    out = attribute(
        _rows(
            {"facts": {"k8s.namespace": "TEAM-ml-7", "slurm.user": "ann@corp"}},
            {"facts": {"k8s.namespace": "team-cv-12", "slurm.user": "ann@elsewhere"}},
            # a regex that does not match: the rule does not apply, the next one does
            {"facts": {"k8s.namespace": "kube-system", "k8s.pod_label:app": "web-svc"}},
            {"facts": {"k8s.pod_label:app": "web"}},
        ),
        rules,
    )
    assert _owners(out) == [
        ("w0", "Machine Learning", None, "ann_x", "ns"),
        ("w1", "cv/12$", None, None, "ns"),
        ("w2", "web-svc", None, None, "label"),
        ("w3", None, None, None, None),
    ]


def test_workload_facts_beat_device_tags_on_the_same_key() -> None:
    rules = [rule("p", "cloud.tag:project", "project"), rule("t", "k8s.node_label:team", "team")]
    out = attribute(
        _rows(
            {
                "facts": {"cloud.tag:project": "from-workload"},
                "tags": {"cloud.tag:project": "from-device", "k8s.node_label:team": "infra"},
            },
            {"tags": {"cloud.tag:project": "from-device"}},
        ),
        rules,
    )
    assert _owners(out) == [
        ("w0", "from-workload", "infra", None, "p"),
        ("w1", "from-device", None, None, "p"),
    ]


def test_empty_and_overlong_values_give_way_to_the_next_candidate() -> None:
    rules = [
        rule("long", "docker.label:a", "project", value="x" * 150 + "$0"),  # 150 + fact > 200
        rule("empty", "docker.label:b", "project", match="(x?)", value="$1"),
        rule("fallback", "docker.image", "project"),
    ]
    out = attribute(
        _rows(
            {"facts": {"docker.label:a": "y" * 51, "docker.image": "img"}},
            {"facts": {"docker.label:a": "y" * 50}},
            {"project": "", "facts": {"docker.label:b": "", "docker.image": "img"}},
        ),
        rules,
    )
    assert _owners(out) == [
        ("w0", "img", None, None, "fallback"),
        ("w1", "x" * 150 + "y" * 50, None, None, "long"),
        ("w2", "img", None, None, "fallback"),  # the source's "" names nobody
    ]


def test_no_rules_records_the_source_and_keeps_every_column() -> None:
    frame = _rows({"project": "p", "key": "b"}, {"key": "a"}).with_columns(pl.lit(7).alias("extra"))
    out = attribute(frame, [])
    assert out.columns == [*frame.columns, "owner_rule"]
    assert out.select("key", "project", "extra", "owner_rule").rows() == [
        ("b", "p", 7, "source"),
        ("a", None, 7, None),
    ]
    assert attribute(frame.clear(), []).height == 0


def test_a_pathological_regex_on_a_hostile_value_is_linear_and_correct() -> None:
    # (a+)+$ backtracks exponentially in Python's re; Polars' (Rust) regex runs in linear time
    rules = [rule("p", "slurm.account", "project", match="(a+)+")]
    out = attribute(
        _rows({"facts": {"slurm.account": "a" * 299 + "b"}}, {"facts": {"slurm.account": "aaa"}}), rules
    )
    assert out["project"].to_list() == [None, "aaa"]


# --- against a reference: rules without regexes, any order, any overrides ------------------------

_KEYS = ("slurm.account", "slurm.partition", "unix.user", "cloud.tag:team")
_VALUES = ("", "a", "b", "c")
_rule = st.builds(
    lambda i, source, dim, override, value, rewrites: rule(
        f"r{i}", source, dim, override=override, value=value, values=rewrites
    ),
    st.integers(0, 10**6),
    st.sampled_from(_KEYS),
    st.sampled_from(["project", "team", "user"]),
    st.booleans(),
    st.sampled_from([None, "v", "$0!"]),
    st.dictionaries(st.sampled_from(["a", "b", "v"]), st.sampled_from(["A", "B"]), max_size=2),
)
_row = st.fixed_dictionaries(
    {
        "project": st.sampled_from([None, "", "own"]),
        "team": st.sampled_from([None, "own-team"]),
        "user_name": st.none(),
        "facts": st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=3),
        "tags": st.dictionaries(st.sampled_from(_KEYS), st.sampled_from(_VALUES), max_size=3),
    }
)


def _reference(row: dict[str, Any], rules: list[AttributionRule]) -> tuple[Any, ...]:
    facts = {**row["tags"], **row["facts"]}
    decided: dict[str, tuple[Any, Any]] = {}
    for column, dim in (("project", "project"), ("team", "team"), ("user_name", "user")):
        mine = [r for r in rules if r.dimension == dim]
        candidates: list[tuple[Any, Any]] = []
        for r in [r for r in mine if r.override]:
            candidates.append((_give(r, facts), r.name))
        candidates.append((row[column], "source"))
        for r in [r for r in mine if not r.override]:
            candidates.append((_give(r, facts), r.name))
        decided[column] = next(((v, by) for v, by in candidates if v), (None, None))
    by = next((decided[c][1] for c in ("project", "team", "user_name") if decided[c][0]), None)
    return (decided["project"][0], decided["team"][0], decided["user_name"][0], by)


def _give(r: AttributionRule, facts: dict[str, str]) -> str | None:
    if r.source not in facts:
        return None
    value = facts[r.source]
    if r.value is not None:
        value = r.value.replace("$0", value)
    return r.values.get(value, value)


@settings(max_examples=300, deadline=None)
@given(st.lists(_rule, max_size=6, unique_by=lambda r: r.name), st.lists(_row, min_size=1, max_size=8))
def test_engine_agrees_with_a_plain_reference(
    rules: list[AttributionRule], rows: list[dict[str, Any]]
) -> None:
    out = attribute(_rows(*rows), rules)
    expected = [_reference(r, rules) for r in rows]
    assert out.select("project", "team", "user_name", "owner_rule").rows() == expected


def test_rule_helper_refuses_what_the_config_refuses() -> None:
    with pytest.raises(ValueError, match="names group 1, but there is no match regex"):
        rule("x", "slurm.account", "project", value="$1")
