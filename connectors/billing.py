"""Kept for the imports of older plugins and of this release's modules: the billing contract now
lives in the SDK (``connectors.sdk.billing``; import from ``connectors.sdk`` in new code).
"""

from connectors.sdk.billing import BILLING_SCHEMA as BILLING_SCHEMA
from connectors.sdk.billing import MONEY as MONEY
from connectors.sdk.billing import UTC_TIME as UTC_TIME
from connectors.sdk.billing import BillingBatch as BillingBatch
from connectors.sdk.billing import BillingConfig as BillingConfig
from connectors.sdk.billing import BillingFileError as BillingFileError
from connectors.sdk.billing import BillingSource as BillingSource
from connectors.sdk.billing import ChargeCategory as ChargeCategory
from connectors.sdk.billing import PricingModel as PricingModel
from connectors.sdk.billing import RefusedRow as RefusedRow
from connectors.sdk.billing import conform as conform
from connectors.sdk.billing import empty_lines as empty_lines
