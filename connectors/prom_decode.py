"""A Prometheus ``matrix`` answer (``/api/v1/query`` of a range selector) → label sets and arrays.

A day of one field for 1,000 GPUs at 60 s is 1.44 M ``[1727740800.123,"42"]`` pairs, ~26 MB of
JSON. Decoding that into Python lists (stdlib ``json`` or orjson) makes three objects per sample
and then costs as much again to turn into arrays. So the answer Prometheus writes is cut at its
fixed framing instead: each series is ``{"metric":{…},"values":[[t,"v"],…]}``; the label object
is decoded with orjson (one small dict per series) and every series' pairs are rewritten in one
pass to ``t,v`` lines (``bytes.replace``/``translate``, in C) that Polars' CSV reader parses into
two Float64 columns in native code. Seconds become milliseconds by ``round(t × 1000)``, exact for
millisecond timestamps (Prometheus' resolution).

The cut is safe: inside a JSON string every ``"`` is escaped (``\\"``), so the byte sequences
``{"metric":`` and ``,"values":[`` can only be the framing, and the pairs hold no strings but
numbers. Any answer that is not in that shape (another server's spacing or key order, native
histograms, an error), or whose pairs do not parse into as many numbers as it has pairs, is
decoded the slow, general way with orjson.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import polars as pl

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_SERIES = b'{"metric":'
_VALUES = b',"values":['
_PAIR_SCHEMA = {"t": pl.Float64, "v": pl.Float64}


class MatrixError(ValueError):
    """The answer is not a successful matrix (the message says what it is instead)."""


@dataclass(frozen=True, slots=True)
class Matrix:
    """Series ``i`` has labels ``labels[i]`` and samples ``ts_ms[offsets[i]:offsets[i + 1]]``."""

    labels: list[dict[str, str]]
    offsets: np.ndarray  # int64, len(labels) + 1
    ts_ms: np.ndarray  # int64
    values: np.ndarray  # float64

    @property
    def samples(self) -> int:
        return int(self.ts_ms.size)


def decode_matrix(body: bytes) -> Matrix:
    """The series of a successful ``matrix`` answer; :class:`MatrixError` for anything else."""
    fast = _framed(body) if body.startswith(_HEAD) else None
    return fast if fast is not None else _general(body)


def _framed(body: bytes) -> Matrix | None:
    labels: list[dict[str, str]] = []
    sections: list[bytes] = []
    counts: list[int] = []
    rest = body[len(_HEAD) :]
    if not rest.startswith((_SERIES, b"]")):
        return None  # not a list of series as Prometheus writes it
    for part in rest.split(_SERIES)[1:]:
        cut = part.find(_VALUES)
        end = part.find(b"]]", cut)
        if cut < 0 or end < 0:
            return None  # a histogram series, or not Prometheus' own framing
        try:
            metric = orjson.loads(part[:cut])
        except orjson.JSONDecodeError:
            return None
        pairs = part[cut + len(_VALUES) : end + 1]  # [t,"v"],…,[t,"v"]
        labels.append(metric)
        sections.append(pairs)
        counts.append(pairs.count(b"[") if pairs else 0)
    if not labels:
        empty = np.zeros(0, dtype=np.int64)
        return Matrix([], np.zeros(1, dtype=np.int64), empty, np.zeros(0, dtype=np.float64))
    text = b"\n".join(sections).replace(b"],[", b"\n").translate(None, b'[]"')
    try:
        frame = pl.read_csv(io.BytesIO(text), has_header=False, schema=_PAIR_SCHEMA)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    if frame.height != sum(counts) or frame.null_count().sum_horizontal().item():
        return None
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ts_ms = np.round(frame["t"].to_numpy() * 1000.0).astype(np.int64)
    return Matrix(labels, offsets, ts_ms, frame["v"].to_numpy())


def _general(body: bytes) -> Matrix:
    try:
        answer: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MatrixError(f"not JSON: {exc}") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = (
            answer if not isinstance(answer, dict) else f"{answer.get('errorType')}: {answer.get('error')}"
        )
        raise MatrixError(str(error)[:300])
    data = answer.get("data")
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "matrix"
        or not isinstance(data.get("result"), list)
    ):
        raise MatrixError(f"not a matrix: {str(data)[:200]}")
    labels: list[dict[str, str]] = []
    ts_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    for item in data["result"]:
        if not isinstance(item, dict):
            raise MatrixError(f"not a series: {str(item)[:200]}")
        metric, pairs = item.get("metric"), item.get("values", [])
        if not isinstance(metric, dict) or not isinstance(pairs, list):
            raise MatrixError(f"not a series: {str(item)[:200]}")
        try:
            ts = np.array([p[0] for p in pairs], dtype=np.float64)
            values = np.array([p[1] for p in pairs], dtype=np.float64)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise MatrixError(f"unreadable samples: {exc}") from None
        labels.append({str(k): str(v) for k, v in metric.items()})
        ts_parts.append(np.round(ts * 1000.0).astype(np.int64))
        value_parts.append(values)
    offsets = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum([p.size for p in ts_parts], out=offsets[1:])
    if not labels:
        return Matrix([], offsets, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    return Matrix(labels, offsets, np.concatenate(ts_parts), np.concatenate(value_parts))
