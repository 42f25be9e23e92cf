"""The configuration keys every connector has."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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


class FactsConnectorConfig(ConnectorConfig):
    """Keys of a facts source's table (``slurm``, ``kubernetes``: sources that say who owns
    workloads). ``describes``: the metrics sources (connector names) whose ledger rows its facts
    are about. Where two clusters number their jobs alike (``slurm:123`` on both), each cluster's
    scheduler names its own cluster's sources, and a job's facts own only that cluster's rows.
    Unset: its facts describe every source's rows with the same workload key."""

    describes: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=100)
