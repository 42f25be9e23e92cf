"""``MappingRule``: one ``[[attribution.rules]]`` table, validated by pydantic.

The rule itself (its regexes, references and matching) is ``connectors.attribution.Rule``, which
loads no pydantic, so the node agent can use it with its own key checks (issue 13: the agent
stays under 60 MB); this model is its front for callers that validate with pydantic, and the
agent's checks are kept equal to it by tests/agent/test_agent_config_parity.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from connectors.attribution import Rule


class MappingRule(BaseModel):
    """One ``[[attribution.rules]]`` table, validated by pydantic: the keys, their meaning and
    the errors are ``connectors.attribution.Rule``'s (a ``ValueError`` of it becomes a
    ``ValidationError`` here); unknown keys are errors that name them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    container_name: str | None = None
    image: str | None = None
    namespace: str | None = None
    pod: str | None = None
    label: dict[str, str] = {}
    unix_user: str | None = None
    command: str | None = None
    project: str | None = None
    team: str | None = None
    user: str | None = None

    _rule: Rule = PrivateAttr()

    @model_validator(mode="after")
    def _compile(self) -> MappingRule:
        self._rule = Rule(**self.model_dump())  # its ValueError names the key
        return self

    def match(self, facts: Mapping[str, str | None]) -> tuple[list[str | None], dict[str, str]] | None:
        """The numbered and named groups when every match key matches ``facts``, else None."""
        return self._rule.match(facts)

    def render(
        self, key: str, groups: tuple[list[str | None], dict[str, str]], labels: Mapping[str, str]
    ) -> str | None:
        """The value this rule sets for ``key`` (project/team/user), or None."""
        return self._rule.render(key, groups, labels)
