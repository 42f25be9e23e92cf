"""Attribution rules (``[[attribution]]``): who owns a ledger row, from the facts sources report.

:mod:`.rules` is the config model and its validation, :mod:`.engine` applies rules to rows
(:func:`attribute`), docs/attribution.md describes both.
"""

from service.attribution.engine import FACTS_DTYPE, OWNER_COLUMNS, attribute, facts_series
from service.attribution.rules import (
    FACT_KEYS,
    FACT_PREFIXES,
    SOURCE_RULE,
    AttributionConfigError,
    AttributionRule,
    check_rules,
)

__all__ = [
    "FACTS_DTYPE",
    "FACT_KEYS",
    "FACT_PREFIXES",
    "OWNER_COLUMNS",
    "SOURCE_RULE",
    "AttributionConfigError",
    "AttributionRule",
    "attribute",
    "check_rules",
    "facts_series",
]
