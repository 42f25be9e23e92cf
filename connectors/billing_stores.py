"""Where billing export files are: each store lists :class:`~connectors.billing_driver.ExportFile`\\ s
for the driver (a listing problem of one file is yielded as its ``BillingFileError``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from connectors.billing import BillingFileError
from connectors.billing_driver import ExportFile
from connectors.billing_io import check_explicit


@contextlib.contextmanager
def _as_is(path: Path) -> Iterator[Path]:
    yield path


def local_file(path: Path) -> ExportFile:
    """A local file, read where it is."""
    return ExportFile(str(path), lambda: _as_is(path))


def local_export_files(
    path: str, listed: tuple[str, ...], suffixes: tuple[str, ...], source: str
) -> Iterator[ExportFile | BillingFileError]:
    """``path`` — one file, or a directory read recursively for names ending in ``listed`` (in
    name order). A file named explicitly must be an export by its name (``suffixes``, optionally
    ``.gz``) or a ``.zip`` of one (``source`` names the export in the refusal); a missing path is
    the error of its one file."""
    root = Path(path)
    if root.is_file():
        try:
            check_explicit(root, suffixes, source)
        except BillingFileError as error:
            yield error
            return
        yield local_file(root)
        return
    if not root.is_dir():
        yield BillingFileError(path, "no such file or directory")
        return
    for found in sorted(p for p in root.rglob("*") if p.is_file() and p.name.lower().endswith(listed)):
        yield local_file(found)
