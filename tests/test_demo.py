"""The --demo configuration and its catch-up load (with an in-test stand-in for ingest_window)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine
from sqlmodel import select

from service.bootstrap import sync_config
from service.db import session_scope
from service.demo import load_demo, with_demo
from service.models import ConnectorState, GpuRate
from service.settings import Settings

UTC = dt.UTC


def test_demo_only_without_connectors() -> None:
    demo = with_demo(Settings())
    assert [(c.name, c.type) for c in demo.connectors] == [("demo", "synthetic")]
    assert demo.sites[0].name == "dc1"
    rates = {c.instance_type: c.rate_per_gpu_hour for c in demo.rate_cards}
    assert rates == {
        "p5.48xlarge": Decimal("6.88"),
        "g5.12xlarge": Decimal("1.418"),
        "a3-highgpu-8g": Decimal("11.03125"),
        "Standard_ND96isr_H100_v5": Decimal("12.29"),
    }
    assert with_demo(demo) is demo  # has connectors: left alone


def test_demo_loads_30_days_then_tops_up(engine: Engine) -> None:
    settings = with_demo(Settings())
    sync_config(engine, settings)
    with session_scope(engine) as session:
        assert len(session.exec(select(GpuRate)).all()) == 4
    calls: list[tuple[dt.datetime, dt.datetime]] = []

    def ingest(
        engine: Engine, name: str, connector: Any, start: dt.datetime, end: dt.datetime, **kw: Any
    ) -> None:
        assert kw["on_chunk"] is None and kw["sites"] == settings.sites
        calls.append((start, end))
        with session_scope(engine) as session:
            state = session.get(ConnectorState, name)
            assert state is not None
            state.watermark = end
            session.add(state)

    now = dt.datetime(2025, 9, 30, 10, 20, tzinfo=UTC)
    load_demo(engine, settings, ingest=ingest, now=now)
    load_demo(engine, settings, ingest=ingest, now=now + dt.timedelta(hours=3))
    assert calls[0] == (dt.datetime(2025, 8, 31, 10, tzinfo=UTC), dt.datetime(2025, 9, 30, 11, tzinfo=UTC))
    assert calls[1][1] == dt.datetime(2025, 9, 30, 14, tzinfo=UTC)
    assert calls[1][0] >= dt.datetime(2025, 9, 30, 8, tzinfo=UTC)  # from the watermark, not 30 days back
