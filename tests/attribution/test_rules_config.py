"""``[[attribution]]`` tables through the real config loader: good rules load, every hostile or
mistaken rule is refused with a message naming the file, the rule and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import ConfigError, load_settings

GOOD = """
[[attribution]]
name = "team-from-ns-label"
source = "k8s.namespace_label:team"
dimension = "team"
match = "(?i)ml-(?P<rest>.*)"
value = "${rest}"
values = { research = "Research" }

[[attribution]]
name = "project.from_cloud-tag"
source = "cloud.tag:CostCenter"
dimension = "project"
override = true
"""


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_settings(path)


def test_good_rules_load_in_file_order(tmp_path: Path) -> None:
    settings = _load(tmp_path, GOOD)
    rules = settings.attribution  # type: ignore[attr-defined]
    assert [(r.name, r.column, r.override) for r in rules] == [
        ("team-from-ns-label", "team", False),
        ("project.from_cloud-tag", "project", True),
    ]
    assert _load(tmp_path, "").attribution == []  # type: ignore[attr-defined]


def _table(**keys: object) -> str:
    base = {"name": "r1", "source": "slurm.account", "dimension": "project", **keys}
    lines = [
        f"{k} = {v}" if isinstance(v, bool | dict) or k == "values" else f"{k} = {_q(v)}"
        for k, v in base.items()
    ]
    return "[[attribution]]\n" + "\n".join(lines) + "\n"


def _q(value: object) -> str:
    return "'''" + str(value) + "'''"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            _table(match="ml-(.*"),
            'key "match": Value error, not a valid regex: regex error: regex parse error:',
        ),
        (
            _table(match="(?<=x)y"),
            'key "match": Value error, not a valid regex',
        ),  # lookbehind: not in this engine
        (_table(match="a{1000000}"), 'key "match": Value error, not a valid regex'),  # too big to compile
        (_table(match="x" * 1001), 'key "match": String should have at most 1000 characters'),
        (
            _table(match="(a)(b)", value="$3"),
            'key "value": Value error, $3 names group 3, but has 2 group(s)',
        ),
        (_table(value="$1"), 'key "value": Value error, $1 names group 1, but there is no match regex'),
        (
            _table(match="(a)", value="$1x"),
            "$1x names a group called '1x'; write ${1}x for group 1 followed by text",
        ),
        (_table(match="(?P<a>x)", value="${b}"), "${b} names no group of the match regex (named groups: a)"),
        (_table(dimension="cost_center"), "key \"dimension\": Input should be 'project', 'team' or 'user'"),
        (
            _table(source="k8s.namespace_lable:team"),
            "key \"source\": Value error, unknown fact key 'k8s.namespace_lable:team'",
        ),
        (_table(source="cloud.tag:"), 'key "source": Value error, unknown fact key'),
        (_table(name="source"), "'source' is reserved"),
        (_table(name="a b"), 'key "name": Value error, use 1 to 100 letters'),
        (_table(name="x" * 101), 'key "name": Value error, use 1 to 100 letters'),
        (
            _table(values='{ a = "" }'),
            "key \"values\": Value error, rewrite of 'a': the new value must have 1 to 200",
        ),
        (_table(override="yes"), 'key "override": Input should be a valid boolean'),
        (_table(colour="red"), 'key "colour": unknown key'),
        ('[[attribution]]\nname = "r1"\n', 'key "source": Field required; key "dimension": Field required'),
    ],
)
def test_mistaken_rules_are_refused_naming_rule_and_key(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, table)
    text = str(exc.value)
    assert text.startswith(f'{tmp_path / "c.toml"}: [[attribution]] #1 name="'), text
    assert message in text, text


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"c\.toml: \[\[attribution\]\] names must be unique: r1 more than once"
    ):
        _load(tmp_path, _table() + _table(dimension="team"))


def test_not_an_array_of_tables(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"'attribution' must be an array of tables \(\[\[attribution\]\]\)"
    ):
        _load(tmp_path, 'attribution = "x"\n')


def test_too_many_rules(tmp_path: Path) -> None:
    text = "".join(_table(name=f"r{i}") for i in range(1001))
    with pytest.raises(ConfigError, match="at most 1000 rules, got 1001"):
        _load(tmp_path, text)
