"""Errors and config value types shared by the pricing modules."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field

from service.timeutil import as_utc


class PricingError(Exception):
    """Pricing could not produce an exact amount; the message says what to fix."""


class PricingConfigError(PricingError):
    """The operator's pricing configuration is inconsistent (fail at start, fix the config)."""


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


Environment = Literal["onprem", "aws", "gcp", "azure"]
# ISO 4217 code; " usd" is read as "USD".
Currency = Annotated[str, BeforeValidator(_upper), Field(pattern=r"^[A-Z]{3}$")]
# Timezone-aware, normalized to UTC; a naive datetime is refused.
UtcDatetime = Annotated[AwareDatetime, AfterValidator(as_utc)]
