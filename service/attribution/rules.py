"""``[[attribution]]``: rules that name a ledger row's owner from the facts its sources report.

A rule reads one fact (``source``: a fact key, :data:`FACT_KEYS`), optionally keeps only values its
``match`` regex matches whole and turns them into ``value`` (a template of the match's groups), then
rewrites the result through ``values``, and gives it to one ledger dimension (project, team or
user). docs/attribution.md describes the precedence; :mod:`service.attribution.engine` applies them.

    [[attribution]]
    name = "team-from-ns-label"          # unique, [A-Za-z0-9_.-]{1,100}; recorded on each ledger row
    source = "k8s.namespace_label:team"  # a fact key
    dimension = "team"                   # project | team | user
    match = "(?i)ml-(.*)"                # optional: full match on the fact's value
    value = "$1"                         # optional template ($1, ${1}, ${name}, $$ = "$")
    values = { research = "Research" }   # optional: exact rewrites of the result
    override = false                     # true: the rule beats what the source itself named

Regexes use the syntax of the Rust ``regex`` crate (what Polars runs): linear time whatever the
input, so no fact value can make a rule slow. Every mistake a rule can hold — a bad regex, a template
naming a group the regex does not have, an unknown dimension or fact key, a duplicate name — is
refused when the config loads, naming the rule and the key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

#: Fact keys sources report (device tags and workload facts), exactly as connectors spell them.
FACT_KEYS: tuple[str, ...] = (
    "k8s.namespace",
    "k8s.pod",
    "k8s.container",
    "docker.image",
    "slurm.job",
    "slurm.account",
    "slurm.partition",
    "slurm.user",
    "slurm.qos",
    "unix.user",
)
#: Fact keys with a name after the colon (the tag or label key, as its system spells it). ``ext.``
#: is for third-party connectors' own facts (``ext.<anything>``).
FACT_PREFIXES: tuple[str, ...] = (
    "cloud.tag:",
    "cloud.project_label:",
    "k8s.pod_label:",
    "k8s.namespace_label:",
    "k8s.node_label:",
    "docker.label:",
    "ext.",
)
#: Rule dimension → ledger column.
DIMENSION_COLUMNS: dict[str, str] = {"project": "project", "team": "team", "user": "user_name"}
#: Longest value a rule may give: the ledger's project/team/user_name columns.
MAX_VALUE_CHARS = 200
MAX_PATTERN_CHARS = 1000
MAX_REWRITES = 10_000
MAX_RULES = 1000
#: What ``owner_rule`` records when the connector itself named the owner.
SOURCE_RULE = "source"

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# Rust regex replacement syntax: $$ | ${name} | $name (longest run of [_0-9A-Za-z]) | a lone $.
_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([_0-9A-Za-z]+))")


class AttributionConfigError(ValueError):
    """The ``[[attribution]]`` rules are wrong; the message names the rule and the key."""


def is_fact_key(key: str) -> bool:
    return key in FACT_KEYS or any(key.startswith(p) and len(key) > len(p) for p in FACT_PREFIXES)


def anchored(pattern: str) -> str:
    """``pattern`` as a full match (its own alternations stay inside)."""
    return f"^(?:{pattern})$"


class AttributionRule(BaseModel):
    """One ``[[attribution]]`` table (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(max_length=400)
    dimension: Literal["project", "team", "user"]
    match: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN_CHARS)
    value: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN_CHARS)
    values: dict[str, str] = Field(default_factory=dict, max_length=MAX_REWRITES)
    override: StrictBool = False  # a TOML boolean, not "yes"

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME.fullmatch(name) or name == SOURCE_RULE:
            raise ValueError(
                "use 1 to 100 letters, digits, '_', '.' and '-' ('source' is reserved: it records "
                "that the connector itself named the owner)"
            )
        return name

    @field_validator("source")
    @classmethod
    def _source(cls, key: str) -> str:
        if not is_fact_key(key):
            raise ValueError(
                f"unknown fact key {key!r}: use one of {', '.join(FACT_KEYS)}, or a prefix "
                f"{', '.join(p + '<key>' for p in FACT_PREFIXES)}"
            )
        return key

    @field_validator("match")
    @classmethod
    def _match(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            _groups(pattern)  # raises with the regex engine's own message
        return pattern

    @field_validator("value")
    @classmethod
    def _value(cls, template: str | None, info: ValidationInfo) -> str | None:
        if template is None:
            return None
        if "match" not in info.data:  # the regex was refused: that is the error to report
            return template
        pattern = info.data["match"]
        numbered, named = _groups(pattern) if pattern is not None else (0, frozenset())
        for ref in _REFERENCE.finditer(template):
            if ref.group(1):
                continue
            braced, bare = ref.group(2), ref.group(3)
            name = braced if braced is not None else bare
            if name.isdigit():
                if int(name) > numbered:
                    has = f"has {numbered} group(s)" if pattern is not None else "there is no match regex"
                    raise ValueError(f"${name} names group {name}, but {has}")
            elif name not in named:
                if bare is not None and bare[0].isdigit():
                    digits = re.match(r"\d+", bare).group()  # type: ignore[union-attr]
                    raise ValueError(
                        f"${bare} names a group called {bare!r}; write ${{{digits}}}{bare[len(digits) :]} "
                        f"for group {digits} followed by text"
                    )
                known = ", ".join(sorted(named)) or "none"
                raise ValueError(f"${{{name}}} names no group of the match regex (named groups: {known})")
        return template

    @field_validator("values")
    @classmethod
    def _values(cls, rewrites: dict[str, str]) -> dict[str, str]:
        for old, new in rewrites.items():
            if not 1 <= len(new) <= MAX_VALUE_CHARS:
                raise ValueError(
                    f"rewrite of {old!r}: the new value must have 1 to {MAX_VALUE_CHARS} characters"
                )
        return rewrites

    @property
    def column(self) -> str:
        """The ledger column this rule names."""
        return DIMENSION_COLUMNS[self.dimension]


def _groups(pattern: str) -> tuple[int, frozenset[str]]:
    """(number of capture groups, names of the named ones) of ``pattern`` by Polars' own regex
    engine, so what is accepted here is exactly what runs; a bad regex raises ValueError."""
    try:
        pl.Series([""]).str.contains(pattern)  # the error names the pattern as written
        fields = pl.Series([""]).str.extract_groups(anchored(pattern)).struct.fields
    except pl.exceptions.PolarsError as exc:
        message = str(exc).split("\n\nThis error occurred", 1)[0].strip()
        raise ValueError(f"not a valid regex: {message}") from None
    return len(fields), frozenset(f for f in fields if not f.isdigit())


def check_rules(rules: Sequence[AttributionRule]) -> None:
    """What one table cannot say about itself: names are unique, and there are not too many."""
    if len(rules) > MAX_RULES:
        raise AttributionConfigError(f"[[attribution]]: at most {MAX_RULES} rules, got {len(rules)}")
    names = [r.name for r in rules]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise AttributionConfigError(
            f"[[attribution]] names must be unique: {', '.join(twice)} more than once"
        )
