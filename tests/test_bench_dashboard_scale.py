"""bench/dashboard_scale.py: a stopped load resumed writes the days it had not, and only those.

The year at 10,000 GPUs takes longer than one sitting; ``load --resume`` continues after the last
day the group rollups hold, from the same first day. Here: 8 GPUs, 5 days in chunks of 2, stopped
after the first chunk, resumed: every day once, each day's rollups equal to its hours.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import text

from service.db import make_engine, migrate

BENCH = Path(__file__).parents[1] / "bench"


def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("dashboard_scale", BENCH / "dashboard_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.postgres
def test_resume_continues_after_the_last_loaded_day(
    fresh_pg_database: Callable[[], AbstractContextManager[str]],
) -> None:
    bench = _bench()
    first = 20_000
    with fresh_pg_database() as url:
        engine = make_engine(url)
        migrate(engine)
        assert bench.resume_point(engine) is None
        bench.load_fleet(engine, 8, first, 2, 2)  # the first chunk of a 5-day load, then stopped
        assert bench.resume_point(engine) == (first, 2)
        bench.load_fleet(engine, 8, first, 5, 2, start_offset=2)
        assert bench.resume_point(engine) == (first, 5)
        with engine.connect() as conn:
            days = conn.execute(
                text("select day_index, count(*), sum(cost) from ledger_hour group by 1 order by 1")
            ).all()
            rolled = dict(
                conn.execute(text("select day_index, sum(cost) from ledger_group_day group by 1")).all()
            )
            segments = conn.execute(text("select day_index from ledger_hour_segment order by 1")).scalars()
            assert list(segments) == [first, first + 1, first + 2, first + 3, first + 4]
        engine.dispose()
    # every day once: 8 devices × 24 hours, plus the split device-hours (second rows) of that day
    assert [d for d, _, _ in days] == [first, first + 1, first + 2, first + 3, first + 4]
    assert all(8 * 24 <= n < 2 * 8 * 24 for _, n, _ in days)
    assert {d: c for d, _, c in days} == rolled
