"""billing_driver.Duplicates: repeated line keys across a file's chunks, against a plain dict of
every key seen (the sorted runs it keeps instead must give the same first lines)."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.billing_driver import Duplicates
from connectors.sdk import RefusedRow


class Reader:
    def duplicate(self, line: int, first: int, key: str) -> RefusedRow:
        return RefusedRow("f.csv", line, "id", f"repeat of line {first}", key)


def _expected(chunks: list[list[str]]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    first: dict[str, int] = {}
    kept: list[list[int]] = []
    refused: list[tuple[int, int]] = []
    line = 2
    for chunk in chunks:
        kept.append([])
        for key in chunk:
            if key in first:
                refused.append((line, first[key]))
            else:
                first[key] = line
                kept[-1].append(line)
            line += 1
    return kept, refused


def _run(chunks: list[list[str]]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    seen = Duplicates()
    kept: list[list[int]] = []
    refused: list[tuple[int, int]] = []
    line = 2
    for chunk in chunks:
        frame = pl.DataFrame(
            {"line_no": list(range(line, line + len(chunk))), "line_key": chunk},
            schema={"line_no": pl.Int64, "line_key": pl.String},
        )
        line += len(chunk)
        rows, bad = seen.refuse(frame, Reader())  # type: ignore[arg-type]
        assert rows.columns == ["line_no", "line_key"]
        kept.append(rows["line_no"].to_list())
        refused += [(r.line, int(r.reason.rsplit(" ", 1)[1])) for r in bad]  # type: ignore[misc]
    return kept, sorted(refused)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60).map(lambda i: f"k{i}"), max_size=25), min_size=1, max_size=30))
def test_same_as_a_dict_of_every_key_seen(chunks: list[list[str]]) -> None:
    kept, refused = _expected(chunks)
    assert _run(chunks) == (kept, sorted(refused))


def test_many_chunks_keep_their_first_lines() -> None:
    """200 chunks (runs merged many times): every key of chunk i is repeated in chunk i + 100."""
    chunks = [[f"a{i}-{j}" for j in range(50)] for i in range(100)]
    chunks += [[f"a{i}-{j}" for j in range(50)] for i in range(100)]
    kept, refused = _run(chunks)
    assert [len(k) for k in kept] == [50] * 100 + [0] * 100
    assert refused == [(2 + 5000 + n, 2 + n) for n in range(5000)]
