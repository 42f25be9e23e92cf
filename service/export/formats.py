"""The file formats of an export and how a frame is written in each (polars writes all three;
pyarrow is not needed).

* ``arrow``: an Arrow IPC *stream* (``application/vnd.apache.arrow.stream``), uncompressed, in
  Arrow's oldest compatible types (``large_string`` rather than string views) so that pyarrow,
  pandas and DuckDB of any recent version read it. Every text column is dictionary-encoded
  (:func:`dictionary_encoded`): an answer repeats a few devices, metrics and labels over many
  rows, and a dictionary column is written, sent and read several times faster than the text.
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
            frame = dictionary_encoded(frame)
            frame.write_ipc_stream(sink, compression="uncompressed", compat_level=pl.CompatLevel.oldest())
        elif self is Format.PARQUET:
            frame.write_parquet(sink, compression="zstd")
        else:
            frame.write_csv(sink, datetime_format="%Y-%m-%dT%H:%M:%SZ")

    @classmethod
    def named(cls, extension: str) -> Format | None:
        """The format of a file extension (``parquet``), or None."""
        return next((f for f in cls if f.value == extension), None)


def dictionary_encoded(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each String column as an Enum of its distinct values in sorted order (an
    Arrow dictionary of ``large_string`` values; the codes sort as the text does; nulls stay null).

    An Enum's categories belong to its dtype: unlike polars' Categorical, whose categories are
    process-wide and only grow, nothing outlives the frame in a long-running server.
    """
    encoded = [
        frame[name].cast(pl.Enum(frame[name].drop_nulls().unique().sort()))
        for name, dtype in frame.schema.items()
        if dtype == pl.String
    ]
    return frame.with_columns(encoded) if encoded else frame


_MEDIA_TYPES = {
    Format.ARROW: "application/vnd.apache.arrow.stream",
    Format.PARQUET: "application/vnd.apache.parquet",
    Format.CSV: "text/csv; charset=utf-8",
}
