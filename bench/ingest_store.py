"""Issue 13 point 5: one day of the synthetic fleet ingested into a fresh database, with the time
and the statements of the two store calls (``upsert_devices``, ``replace_hours``).

    .venv/bin/python bench/ingest_store.py [--scale 11] [--db pg|sqlite]

``--scale 11`` is ~1,000 GPUs at 60 s (10.8 M samples, ~26k ledger rows). Run it on two commits to
compare; the tables' checksums printed at the end must agree.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event, text

sys.path.insert(0, str(Path(__file__).parents[1]))

from connectors.synthetic import SyntheticConfig, SyntheticConnector  # noqa: E402
from service.db import make_engine, migrate  # noqa: E402
from service.ledger import ingest  # noqa: E402

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=11)
    parser.add_argument("--db", choices=["pg", "sqlite"], default="pg")
    args = parser.parse_args()
    name = f"bench_store_{uuid.uuid4().hex[:8]}"
    admin = make_engine(ADMIN, isolation_level="AUTOCOMMIT")
    folder = tempfile.TemporaryDirectory()
    if args.db == "pg":
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    else:
        url = f"sqlite:///{folder.name}/{name}.db"
    try:
        migrate(url)
        engine = make_engine(url)
        statements = [0]
        event.listen(engine, "before_cursor_execute", lambda *_: statements.__setitem__(0, statements[0] + 1))
        spent: dict[str, list[float]] = {"upsert_devices": [0.0, 0.0, 0], "replace_hours": [0.0, 0.0, 0]}

        def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*a: Any, **k: Any) -> Any:
                s0, t0, c0 = statements[0], time.perf_counter(), time.process_time()
                result = fn(*a, **k)
                spent[key][0] += time.perf_counter() - t0
                spent[key][1] += time.process_time() - c0
                spent[key][2] += statements[0] - s0
                return result

            return run

        ingest.store.upsert_devices = timed("upsert_devices", ingest.store.upsert_devices)  # type: ignore[method-assign]
        ingest.store.replace_hours = timed("replace_hours", ingest.store.replace_hours)  # type: ignore[method-assign]
        day = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
        config = SyntheticConfig(name="syn", type="synthetic", period_s=60.0, scale=args.scale)
        source = SyntheticConnector(config)
        t0 = time.perf_counter()
        result = ingest.ingest_window(engine, "syn", source, day, day + dt.timedelta(days=1))
        total = time.perf_counter() - t0
        print(f"{args.db} scale={args.scale}: {result.devices} devices, {result.samples_accepted} samples,"
              f" {result.ledger_rows} ledger rows, ingest {total:.2f} s")  # fmt: skip
        for key, (wall, cpu, count) in spent.items():
            print(f"  {key}: {wall:.3f} s wall, {cpu:.3f} s CPU, {int(count)} statements")
        with engine.connect() as conn:
            tables = (("ledger_hour", "device_id, hour_index, workload_key"), ("device", "device_id"))
            for table, order in tables:
                digest = hashlib.sha256()
                rows = conn.execute(text(f"SELECT * FROM {table} ORDER BY {order}"))
                columns = rows.keys()
                names = [c for c in columns if c != "id"]
                for row in rows.mappings():
                    digest.update(repr(tuple(row[c] for c in names)).encode())
                print(f"  {table} sha256 {digest.hexdigest()[:16]}")
        engine.dispose()
    finally:
        if args.db == "pg":
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        folder.cleanup()


if __name__ == "__main__":
    main()
