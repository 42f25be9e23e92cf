"""Short garbage-collector pauses while a large document is validated.

A full collection walks every tracked object of the process and stops every thread meanwhile,
the event loop included. Validating a document of a few thousand tokens allocates hundreds of
thousands of objects (graphql-core's overlapping-fields check) and so triggers full collections;
with the ~600k objects a loaded process holds (modules, schema, SQLAlchemy, Polars), each took
100–300 ms, and ``/healthz`` stalled that long. Objects that exist when the app starts live about
as long as it does: :func:`freeze_startup_heap` takes them out of every collection until
:func:`thaw_heap` at shutdown gives them back (so nothing is leaked when a process, a test
session for one, starts many apps).
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Move every object the collector tracks now to the permanent generation (``gc.freeze``)."""
    gc.freeze()


def thaw_heap() -> None:
    """Give the frozen objects back to the oldest generation (``gc.unfreeze``)."""
    gc.unfreeze()
