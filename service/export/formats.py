"""The file formats of an export and how a frame is written in each (polars writes all three;
pyarrow is not needed).

* ``arrow``: an Arrow IPC *stream* (``application/vnd.apache.arrow.stream``), uncompressed, in
  Arrow's oldest compatible types (``large_string`` rather than string views) so that pyarrow,
  pandas and DuckDB of any recent version read it.
* ``parquet``: Parquet, zstd-compressed; money as DECIMAL(38, 9), instants as UTC timestamps.
* ``csv``: a header line, then one line per row; instants as ``2025-09-01T00:00:00Z``, money with
  its 9 decimals, floats shortest-exact, null as an empty field, booleans ``true``/``false``.
"""

from __future__ import annotations

from enum import Enum
from typing import BinaryIO

import polars as pl


class Format(Enum):
    """An export's file format (value = its file extension)."""

    ARROW = "arrow"
    PARQUET = "parquet"
    CSV = "csv"

    @property
    def media_type(self) -> str:
        return _MEDIA_TYPES[self]

    def write(self, frame: pl.DataFrame, sink: BinaryIO) -> None:
        """Write ``frame`` to ``sink`` in this format."""
        if self is Format.ARROW:
            frame.write_ipc_stream(sink, compression="uncompressed", compat_level=pl.CompatLevel.oldest())
        elif self is Format.PARQUET:
            frame.write_parquet(sink, compression="zstd")
        else:
            frame.write_csv(sink, datetime_format="%Y-%m-%dT%H:%M:%SZ")

    @classmethod
    def named(cls, extension: str) -> Format | None:
        """The format of a file extension (``parquet``), or None."""
        return next((f for f in cls if f.value == extension), None)


_MEDIA_TYPES = {
    Format.ARROW: "application/vnd.apache.arrow.stream",
    Format.PARQUET: "application/vnd.apache.parquet",
    Format.CSV: "text/csv; charset=utf-8",
}
