"""Ledger analytics: aggregate queries in SQL (GROUP BY in the database), money in ``Decimal``.

Knows nothing of GraphQL or HTTP: each query takes a SQLAlchemy ``Connection`` and a
:class:`~service.analytics.query.LedgerQuery` and returns small dataclasses; errors a caller can fix
are :class:`~service.analytics.errors.QueryError` with a stable ``code``.
"""
