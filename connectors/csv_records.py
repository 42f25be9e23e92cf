"""RFC 4180 records of a CSV chunk, with the physical line each starts on — before Polars parses it.

Polars' CSV reader is fast but cannot be trusted with what a broken export holds: a quoted field
holding a newline is split into two rows when a chunk is read in parallel, a blank line becomes a
row of nulls, one unbalanced quote fails the whole read with no line number, and a long row is
silently truncated. So every chunk is first cut into records here, with a few columnar Polars
string passes over its lines (quotes counted per line; separators counted outside quoted fields),
and a Python step only per line that needs one (a quote left open at its end, a wrong field
count) — a well-formed chunk costs no Python per line at all, and one regex pass per line (every
line one record of the header's fields, :func:`_all_records`) before the staged ones, which run
only for a chunk where some line fails it:

* a line with an even number of quotes is a record alone; it is refused when its quoting is not
  RFC 4180 (a quote inside an unquoted field, text after a closing quote), or when it has more or
  fewer fields than the header (naming the first missing column);
* a line with an odd number of quotes opens a quoted field that holds a newline. The record runs
  to the next line with an odd number of quotes and is kept when, parsed whole (``csv`` module,
  strict), it is one record of exactly the header's fields and at most :data:`MAX_RECORD_BYTES`
  long. Otherwise the opening quote is unbalanced — or the file ends inside the field (truncated):
  **that line alone is refused and reading resynchronises on the next line**, so the good records
  after a stray quote still land (the lines of a field cut by truncation are then refused one by
  one, each for its own shape);
* blank lines are no records (skipped, not counted);
* a record one field short is read with its last field empty: exports written by tools that drop
  a trailing empty field (a CUR of 131 columns whose records hold 130) lose no row for it.

Multi-line records (rare) are parsed here, never by Polars: the chunk Polars reads holds
single-line records only. Everything is numbered by physical line, the header being line 1 (a
record spanning lines 7–8 is "line 7"), and the outcome of a chunk does not depend on where the
stream was cut: a record left open at the end of a chunk is carried to the next one.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field

import polars as pl

from connectors.sdk import RefusedRow

#: The longest record with a quoted newline (bytes, first line to last): a quote left open for
#: longer is unbalanced. Bounds what a stray quote can make the reader hold.
MAX_RECORD_BYTES = 1 << 20
_QUOTED = r'"(?:[^"]|"")*"'
_MARK = "\x00"
_REPLACED = "\ufffd"  # a quoted field, once replaced (separators inside it are not counted)


@dataclass(slots=True)
class Records:
    """A chunk cut into records: ``body`` (single-line records, as in the file, one per line) and
    ``lines`` (their physical line numbers), ``multi`` (records spanning lines: first line and
    fields), ``refused`` (lines that are no record), ``keys`` (``sha1:`` of each record's raw
    bytes, by line, when asked), ``consumed`` (bytes of the chunk taken; the rest starts a record
    that the next chunk must complete) and the ``newlines`` they hold (where the next chunk's
    line numbers start)."""

    body: bytes
    lines: list[int]
    multi: list[tuple[int, list[str]]] = field(default_factory=list)
    refused: list[RefusedRow] = field(default_factory=list)
    keys: dict[int, str] | None = None
    consumed: int = 0
    undecodable: set[int] = field(default_factory=set)  # records holding bytes that are not UTF-8
    newlines: int = 0


def _raw(line: bytes) -> str:
    return line.decode("utf-8", errors="backslashreplace")[:2000]


def _key(raw: bytes) -> str:
    return "sha1:" + hashlib.sha1(raw).hexdigest()


def scan(
    chunk: bytes,
    first_line: int,
    columns: list[str],
    file: str,
    *,
    separator: str = ",",
    final: bool,
    keys: bool = False,
) -> Records:
    """Cut ``chunk`` (whole lines, the first one numbered ``first_line``) into records of
    ``len(columns)`` fields. ``final``: the stream ends with this chunk (a field still open at its
    end is truncated); else a record still open at the end is left for the next chunk."""
    newlines = chunk.count(b"\n")
    count = newlines + (0 if not chunk or chunk.endswith(b"\n") else 1)  # lines
    width = len(columns)
    decoded = chunk.decode("utf-8", errors="replace")
    # Staged, each regex pass once: quoted fields become one mark (their separators, quotes and
    # newlines no longer count); a quote left after that is an odd or misplaced one.
    lines = pl.DataFrame({"s": decoded.split("\n")[:count]}, schema={"s": pl.String})
    if "\r" in decoded:
        lines = lines.select(pl.col("s").str.strip_suffix("\r"))
    if _all_records(lines, width, separator):
        raw = chunk.split(b"\n")[:count] if keys else []
        return _whole_chunk(chunk, first_line, count, raw, decoded, keys, newlines)
    marked = lines.select(pl.col("s").str.replace_all(_QUOTED, _MARK).alias("m"))
    not_sep = f"[^{_class(separator)}]"
    shapes = pl.concat([lines, marked], how="horizontal").select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("i"),
        (pl.col("s").str.len_bytes() == 0).alias("blank"),
        pl.col("m").str.contains(f'"|{not_sep}{_MARK}|{_MARK}{not_sep}').alias("quoting"),
        (pl.col("m").str.count_matches(separator, literal=True) + 1).alias("fields"),
    )
    odd_lines = shapes.filter(
        pl.col("blank") | pl.col("quoting") | ~pl.col("fields").is_in([width, width - 1])
    )
    del lines, marked, shapes
    # the lines as bytes only where a line needs a look of its own (or its key): a well-formed
    # chunk without keys is passed on whole
    raw = chunk.split(b"\n")[:count] if keys or not odd_lines.is_empty() else []
    special = [
        (i, blank, raw[i].count(b'"') % 2 == 1 if quoting else False, quoting, fields)
        for i, blank, quoting, fields in odd_lines.iter_rows()
    ]
    if not special:
        return _whole_chunk(chunk, first_line, count, raw, decoded, keys, newlines)
    out = Records(body=b"", lines=[], keys={} if keys else None, consumed=len(chunk))
    bad_bytes = _undecodable_lines(chunk) if _REPLACED in decoded else set()
    starts: dict[int, int] = {}  # line index inside a multi-line record → its first line index
    dropped: set[int] = set()
    stop = len(raw)  # lines from here on are left for the next chunk
    odd = [row[0] for row in special if row[2]]
    k = 0
    while k < len(odd):
        o = odd[k]
        if o in dropped:  # inside a record already taken
            k += 1
            continue
        verdict = _multi(raw, o, odd[k + 1] if k + 1 < len(odd) else None, width, separator, final)
        if verdict == "pending":
            stop = o
            break
        if isinstance(verdict, list):
            j = odd[k + 1]
            out.multi.append((first_line + o, verdict))
            if keys and out.keys is not None:
                out.keys[first_line + o] = _key(b"\n".join(r.rstrip(b"\r") for r in raw[o : j + 1]))
            dropped.update(range(o, j + 1))
            starts.update((n, o) for n in range(o, j + 1))
            k += 2
            continue
        out.refused.append(RefusedRow(file, first_line + o, None, verdict, _raw(raw[o])))
        dropped.add(o)
        k += 1
    for i, blank, is_odd, misquoted, fields in special:  # misquoted: once odd lines are taken
        if i >= stop or i in dropped or is_odd:
            continue
        dropped.add(i)
        line = first_line + i
        if blank:
            continue
        if misquoted:
            reason = "a quote inside a field that is not quoted as RFC 4180 writes it (an unbalanced quote?)"
            out.refused.append(RefusedRow(file, line, None, reason, _raw(raw[i])))
        elif fields > width:
            reason = f"the record has {fields} fields, more than the header's {width}"
            out.refused.append(RefusedRow(file, line, None, reason, _raw(raw[i])))
        else:
            missing = columns[fields]
            reason = f"the record has fewer fields than the header (truncated?): no value from {missing!r} on"
            out.refused.append(RefusedRow(file, line, missing, reason, _raw(raw[i])))
    kept = [i for i in range(stop) if i not in dropped]
    out.body = b"".join(raw[i] + b"\n" for i in kept)
    out.lines = [first_line + i for i in kept]
    if keys and out.keys is not None:
        out.keys.update((first_line + i, _key(raw[i].rstrip(b"\r"))) for i in kept)
    keep = set(kept)
    out.undecodable = {first_line + starts.get(i, i) for i in bad_bytes if i in keep or i in starts}
    out.consumed = sum(len(r) + 1 for r in raw[:stop]) if stop < len(raw) else len(chunk)
    out.newlines = stop if stop < len(raw) else newlines
    return out


def _whole_chunk(
    chunk: bytes, first_line: int, count: int, raw: list[bytes], decoded: str, keys: bool, newlines: int
) -> Records:
    """A chunk whose every line is a record alone, passed on whole."""
    bad_bytes = _undecodable_lines(chunk) if _REPLACED in decoded else set()
    return Records(
        body=chunk,
        lines=list(range(first_line, first_line + count)),
        keys={first_line + i: _key(r.rstrip(b"\r")) for i, r in enumerate(raw)} if keys else None,
        consumed=len(chunk),
        undecodable={first_line + i for i in bad_bytes},
        newlines=newlines,
    )


def _all_records(lines: pl.DataFrame, width: int, separator: str) -> bool:
    """Whether every line is one well-formed record of ``width`` or ``width - 1`` fields: one regex
    pass per line (an unquoted field holds no quote or separator, a quoted one is RFC 4180's),
    half the cost of the staged passes below, which then run only where a line fails it. Such a
    line is none the staged passes would single out: each quoted field is replaced whole, no quote
    is left and each mark sits between separators, and the separators counted are the fields'."""
    if width < 3 or lines.is_empty():  # a blank line would match a record of one or two fields
        return False
    sep = _class(separator)
    # no NUL outside quotes: the staged passes mark quoted fields with one, and refuse a line where
    # a NUL of the file's own sits next to a field's text
    field = f'(?:[^"{sep}\x00]*|"(?:[^"]|"")*")'
    record = f"^{field}(?:{re.escape(separator)}{field}){{{width - 2},{width - 1}}}$"
    try:
        return bool(lines.select(pl.col("s").str.contains(record).all()).item())
    except pl.exceptions.ComputeError:  # a header too wide for the regex's size limit
        return False


def _undecodable_lines(chunk: bytes) -> set[int]:
    """0-based lines of ``chunk`` holding bytes that are not UTF-8 (one step per bad sequence)."""
    bad: set[int] = set()
    pos = 0
    while True:
        try:
            chunk[pos:].decode("utf-8")
            return bad
        except UnicodeDecodeError as exc:
            at = pos + exc.start
            bad.add(chunk.count(b"\n", 0, at))
            pos = at + max(1, exc.end - exc.start)


def _class(separator: str) -> str:
    return "\\" + separator if separator in "\\]^-[" else separator


def _multi(raw: list[bytes], o: int, j: int | None, width: int, sep: str, final: bool) -> list[str] | str:
    """The fields of the record opened on line ``o`` and closed on line ``j`` (the next line with an
    odd number of quotes), "pending" when the chunk ends before it may close, or why line ``o`` is
    no record."""
    size = 0
    last = len(raw) - 1 if j is None else j
    for n in range(o, last + 1):
        size += len(raw[n]) + 1
        if size > MAX_RECORD_BYTES:
            return (
                f"an unbalanced quote: the quoted field opened on this line is not closed within"
                f" {MAX_RECORD_BYTES} bytes"
            )
    if j is None:
        if not final:
            return "pending"
        return "the file ends inside a quoted field opened on this line (truncated, or an unbalanced quote)"
    text = b"\n".join(raw[o : j + 1]).decode("utf-8", errors="replace").removesuffix("\r")
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True))
    except csv.Error as exc:
        return f"an unbalanced quote: the quoted field opened on this line closes into no record ({exc})"
    if len(records) == 1 and len(records[0]) == width - 1:
        return [*records[0], ""]  # the trailing empty field left out (see scan)
    if len(records) != 1 or len(records[0]) != width:
        fields = sum(len(r) for r in records)
        return (
            f"an unbalanced quote: the quoted field opened on this line runs to line +{j - o} and makes"
            f" {fields} fields, not the header's {width}"
        )
    return records[0]
