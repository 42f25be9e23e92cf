"""A third-party plugin whose optional SDK is not installed."""

import gpu_ledger_test_sdk_that_does_not_exist  # noqa: F401


class Connector:  # never reached
    pass
