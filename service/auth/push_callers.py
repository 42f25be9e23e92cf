"""Who may push batches to ``POST /api/v1/batches`` (the token check of ``service.push``).

A caller is either a store token (or JWT) with the scope ``push:CONNECTOR`` (or ``admin``), which
may push to the ``agent`` connector CONNECTOR, or, for one release, a connector's configured
``token`` key (deprecated: a warning is logged once per connector). Refusals keep the statuses the
agents already handle: 401 without a bearer token or with a revoked/expired/unknown store token,
403 for a token no agent connector has, or one not valid for the batch's agent.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.agent_source import AgentConfig
from service.auth.audit import audit
from service.auth.authenticate import AuthFailure
from service.auth.middleware import AUTH_FAILURE_KEY
from service.auth.principal import PRINCIPAL_KEY, PUSH, Principal
from service.logging import get_logger

log = get_logger(__name__)
_warned: set[str] = set()


@dataclass(frozen=True)
class PushRefusal:
    status: int
    message: str
    field: str | None = None

    @property
    def code(self) -> str:
        return "UNAUTHENTICATED" if self.status == 401 else "FORBIDDEN"


@dataclass(frozen=True)
class PushCaller:
    """A store token's caller (``principal``), or the agent connector whose configured token was
    sent (``legacy_agent``)."""

    principal: Principal | None = None
    legacy_agent: str | None = None

    @property
    def label(self) -> str:
        """The agent to count the batch under before the body names it."""
        if self.legacy_agent is not None:
            return self.legacy_agent
        scopes = self.principal.scopes if self.principal else frozenset()
        pushes = [s[len(PUSH) :] for s in scopes if s.startswith(PUSH)]
        return pushes[0] if len(pushes) == 1 else ""

    def may_push(self, agent: str) -> bool:
        if self.principal is not None:
            return self.principal.can_push(agent)
        return agent == self.legacy_agent


def _refused(scope: Mapping[str, Any], refusal: PushRefusal, caller: str | None = None) -> PushRefusal:
    client = scope.get("client")
    audit(
        "refused",
        refusal.code,
        caller=caller,
        path=scope.get("path"),
        method=scope.get("method"),
        client=f"{client[0]}:{client[1]}" if client else None,
        reason=refusal.message,
    )
    return refusal


def _legacy_agent(token: str, agents: Iterable[AgentConfig]) -> str | None:
    """The agent connector whose configured token this is; every token is compared, in constant time."""
    found = None
    for config in agents:
        if config.token is not None and hmac.compare_digest(
            token.encode(), config.token.get_secret_value().encode()
        ):
            found = config.name
    return found


def push_caller(
    scope: Mapping[str, Any], authorization: str | None, agents: Iterable[AgentConfig]
) -> PushCaller | PushRefusal:
    """Who is pushing (checked again per batch with :meth:`PushCaller.may_push`), or why not."""
    principal = scope.get(PRINCIPAL_KEY)
    if isinstance(principal, Principal) and principal.kind != "anonymous":
        if principal.is_admin or any(s.startswith(PUSH) for s in principal.scopes):
            return PushCaller(principal=principal)
        return _refused(scope, PushRefusal(403, "token has no push:CONNECTOR scope"), principal.name)
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return _refused(scope, PushRefusal(401, "missing bearer token (Authorization: Bearer <token>)"))
    agent = _legacy_agent(token.strip(), agents)
    if agent is not None:
        if agent not in _warned:
            _warned.add(agent)
            log.warning(
                "deprecated: agent connector token",
                connector=agent,
                hint=f"create a push token (gpu-ledger tokens create --name {agent}-push "
                f"--scope push:{agent}), give it to the agents, then remove the connector's token key; "
                "it is read for one more release",
            )
        return PushCaller(legacy_agent=agent)
    failure = scope.get(AUTH_FAILURE_KEY)
    if isinstance(failure, AuthFailure) and failure.status == 401 and failure.caller is not None:
        return _refused(scope, PushRefusal(401, failure.message), failure.caller)  # revoked / expired
    return _refused(scope, PushRefusal(403, "token is not valid for any agent connector"))


def refuse_agent(scope: Mapping[str, Any], caller: PushCaller, agent: str) -> PushRefusal:
    """The batch names an agent this caller may not push to."""
    name = caller.principal.name if caller.principal else caller.legacy_agent
    return _refused(scope, PushRefusal(403, f'token is not valid for agent "{agent}"', "agent"), name)
