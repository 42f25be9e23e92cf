"""A wheel carries the dashboard: every file the page loads matches a package-data pattern of
pyproject.toml (setuptools' own glob rules: ``*`` stays inside one folder), and the vendored uPlot
files are the ones their SHA256SUMS name."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

from service.web import dashboard

ROOT = Path(__file__).resolve().parents[2]


def test_every_dashboard_file_is_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    web = dashboard.WEB_DIR
    shipped = {p for pattern in patterns["service.web"] for p in web.glob(pattern) if p.is_file()}
    wanted = {web / "index.html"} | {
        p for folder in ("dashboard", "vendor") for p in (web / "static" / folder).rglob("*") if p.is_file()
    }
    assert wanted - shipped == set()


def test_vendored_files_match_their_checksums() -> None:
    folder = dashboard.STATIC_DIR / "vendor" / "uplot"
    sums = dict(reversed(line.split("  ", 1)) for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {p.name for p in folder.iterdir()} - {"SHA256SUMS"}
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert (folder / "VERSION").read_text().startswith("uplot@1.6.32 ")
