"""The configuration keys every connector has."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConnectorConfig(BaseModel):
    """Keys every ``[[connectors]]`` table has; each type extends it with its own keys.

    Unknown keys are rejected (``extra='forbid'``) so a typo is an error that names the key.
    Secrets are ``pydantic.SecretStr`` fields: masked in repr and logs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    enabled: bool = True
    interval_s: float = 300.0
    backfill_days: float = 1.0
