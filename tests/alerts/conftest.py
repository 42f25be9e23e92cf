from ledger_rows import put  # noqa: F401  (fixture)
