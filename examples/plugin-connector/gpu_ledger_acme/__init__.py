"""An example third-party GPU Ledger connector (see README.md)."""
