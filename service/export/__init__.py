"""Columnar exports of the analytic answers: Arrow IPC, Parquet and CSV (issue 13, point 1).

The same questions as the GraphQL API (``usage``, ``cost``, ``idleWaste``, ``effectiveCost``),
asked with the same arguments, answered with the same numbers under the same access scope, but
built column-wise (:mod:`service.analytics.columnar`) and written by polars, for answers too big
to resolve field by field.

* :mod:`service.export.arguments` — the arguments as text (a query string, CLI options) checked
  into an :class:`~service.export.arguments.ExportArgs`; every refusal names its parameter.
* :mod:`service.export.questions` — the registry of questions (open: ``register`` adds one) and
  :func:`~service.export.questions.export_frame`.
* :mod:`service.export.formats` — the file formats and their writers.

No HTTP here: ``GET /export/{question}.{format}`` is :mod:`service.api.export`; the command is
``gpu-ledger export`` (:mod:`service.cli_export`).
"""

# Questions registered outside questions.py register on import: the package imports them, so every
# reader of the registry (the endpoint, the CLI, the metrics' route labels) sees them.
from service.export import focus as focus  # noqa: E402
