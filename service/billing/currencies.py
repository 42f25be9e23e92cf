"""ISO 4217 currency codes: the connector SDK's (``connectors.sdk.currencies``), re-exported here for
the service's imports and older plugins."""

from connectors.sdk.currencies import ACTIVE as ACTIVE
from connectors.sdk.currencies import BILLING_CURRENCIES as BILLING_CURRENCIES
from connectors.sdk.currencies import WITHDRAWN_RECENTLY as WITHDRAWN_RECENTLY
