"""Billing ingestion: GPU counts from the instance catalog, billing lines into the ledger database.

* :mod:`service.billing.catalog` — the bundled GPU instance catalog (``gpu_instances.csv``),
  ``[[instance_types]]`` overrides, :func:`~service.billing.catalog.fill_gpus`.
* :mod:`service.billing.ingest` — :func:`~service.billing.ingest.ingest_billing`: a billing
  connector's batches → ``billing_line`` / ``billing_file`` / ``rejection``, one transaction per
  billing period (or file), then the re-pricing hook.
* :mod:`service.billing.store` — the SQL of it.
* :mod:`service.billing.findings` — data-quality findings (rows imported although they break a
  rule): stored per file with its lines, replaced with them; the ``dataQuality`` query.
* :mod:`service.billing.health` — when an import that ran to its end is ``DEGRADED``.
* :mod:`service.billing.currencies` — ISO 4217 codes for the parsers.
"""
