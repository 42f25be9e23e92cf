"""The ``reporting`` schema for BI tools: its read-only role and who may use it.

The views themselves are created by migration 0008 (docs/reporting.md lists them); this package
only grants and revokes BI logins' membership of the role.
"""

#: The read-only group role the views are granted to (migration 0008 creates it if absent). Here,
#: not in ``access``, so the CLI's help names it without importing SQLAlchemy into every
#: ``gpu-ledger`` process (the agent's footprint).
DEFAULT_ROLE = "gpu_ledger_reporting"
