"""The file formats of an export and how a frame is written in each (polars writes all three;
pyarrow is not needed).

* ``arrow``: an Arrow IPC *stream* (``application/vnd.apache.arrow.stream``), uncompressed by
  default, in Arrow's oldest compatible types (``large_string`` rather than string views) so that
  pyarrow, pandas, DuckDB and Arrow readers without compression codecs (arrow-js) read it. On
  request its buffers are LZ4- or zstd-compressed as the IPC format defines (polars and pyarrow
  read them): about 6× fewer bytes for usage by device and hour. Every text column is dictionary-encoded
  (:func:`dictionary_encoded`): an answer repeats a few devices, metrics and labels over many
  rows, and a dictionary column is written, sent and read several times faster than the text.
* ``parquet``: Parquet, zstd-compressed; money as DECIMAL(38, 9), instants as UTC timestamps.
* ``csv``: a header line, then one line per row; instants as ``2025-09-01T00:00:00Z``, money with
  its 9 decimals, floats shortest-exact, null as an empty field, booleans ``true``/``false``.
"""

from __future__ import annotations

from enum import Enum
from typing import BinaryIO, Literal

import numpy as np
import polars as pl

#: Buffer compressions of an Arrow stream (the IPC format's own, LZ4 frame or zstd per buffer).
IpcCompression = Literal["uncompressed", "lz4", "zstd"]
ARROW_COMPRESSIONS: tuple[IpcCompression, ...] = ("uncompressed", "lz4", "zstd")


class Format(Enum):
    """An export's file format (value = its file extension)."""

    ARROW = "arrow"
    PARQUET = "parquet"
    CSV = "csv"

    @property
    def media_type(self) -> str:
        return _MEDIA_TYPES[self]

    def write(
        self, frame: pl.DataFrame, sink: BinaryIO, *, compression: IpcCompression = "uncompressed"
    ) -> None:
        """Write ``frame`` to ``sink`` in this format (``compression``: the Arrow stream's buffers,
        :data:`ARROW_COMPRESSIONS`; the other formats have their own)."""
        if self is Format.ARROW:
            frame = dictionary_encoded(frame)
            frame.write_ipc_stream(sink, compression=compression, compat_level=pl.CompatLevel.oldest())
        elif self is Format.PARQUET:
            frame.write_parquet(sink, compression="zstd")
        else:
            frame.write_csv(sink, datetime_format="%Y-%m-%dT%H:%M:%SZ")

    @classmethod
    def named(cls, extension: str) -> Format | None:
        """The format of a file extension (``parquet``), or None."""
        return next((f for f in cls if f.value == extension), None)


def dictionary_encoded(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each String or Enum column as an Enum of exactly its distinct values in
    sorted order (an Arrow dictionary of ``large_string`` values; the codes sort as the text does;
    nulls stay null).

    An Enum's categories belong to its dtype: unlike polars' Categorical, whose categories are
    process-wide and only grow, nothing outlives the frame in a long-running server. An Enum
    column (the day segments' device ids) is recoded only where its dictionary holds a value no
    row has — a dictionary must not name devices the caller's scope or filter left out — or is
    not sorted.
    """
    encoded = [
        _exact_enum(frame[name])
        for name, dtype in frame.schema.items()
        if dtype == pl.String or isinstance(dtype, pl.Enum)
    ]
    return frame.with_columns(encoded) if encoded else frame


def upper_case(column: pl.Series) -> pl.Series:
    """``column`` (text or an Enum) in upper case; an Enum stays one, upper-cased value by value
    (its rows are not touched) where that keeps its values distinct."""
    dtype = column.dtype
    if isinstance(dtype, pl.Enum):
        upper = dtype.categories.str.to_uppercase()
        if upper.n_unique() == upper.len():
            return column.to_physical().cat.to(pl.Enum(upper)).alias(column.name)
        column = column.cast(pl.String)
    return column.str.to_uppercase()


def _exact_enum(column: pl.Series) -> pl.Series:
    dtype = column.dtype
    if isinstance(dtype, pl.Enum):
        categories = dtype.categories
        used = column.to_physical().drop_nulls().unique()
        if used.len() == categories.len() and categories.is_sorted():
            return column
        if categories.is_sorted():
            # keep the used values, in order: each code moves down past the unused ones
            kept = used.sort()
            recode = np.zeros(categories.len(), dtype=np.uint32)
            recode[kept.to_numpy()] = np.arange(kept.len(), dtype=np.uint32)
            codes = pl.Series(column.name, recode).gather(column.to_physical())  # null stays null
            return codes.cat.to(pl.Enum(categories.gather(kept)))
        column = column.cast(pl.String)
    return column.cast(pl.Enum(column.drop_nulls().unique().sort()))


_MEDIA_TYPES = {
    Format.ARROW: "application/vnd.apache.arrow.stream",
    Format.PARQUET: "application/vnd.apache.parquet",
    Format.CSV: "text/csv; charset=utf-8",
}
