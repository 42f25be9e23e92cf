"""The ``reporting`` schema for BI tools: its read-only role and who may use it.

The views themselves are created by migration 0008 (docs/reporting.md lists them); this package
only grants and revokes BI logins' membership of the role.
"""
