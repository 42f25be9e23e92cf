"""Where billing export files are: each store lists :class:`~connectors.billing_driver.ExportFile`\\ s
for the driver (a listing problem of one file is yielded as its ``BillingFileError``)."""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from connectors.billing_driver import ExportFile
from connectors.billing_io import BLOCK_BYTES, check_explicit
from connectors.sdk import BillingFileError


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


# ---- keyed stores: a local tree or an S3 prefix, both listed as keys (a manifest names keys)


class LocalTree:
    """A local file or directory tree as keys (paths relative to the directory, ``/``-separated)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.root = self.path if self.path.is_dir() else self.path.parent

    @property
    def explicit(self) -> bool:
        """``path`` names one file (it must then be an export by its name)."""
        return self.path.is_file()

    def keys(self) -> list[str]:
        if self.path.is_file():
            return [self.path.name]
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())

    def open(self, key: str) -> contextlib.AbstractContextManager[Path]:
        return _as_is(self.root / key)

    def raw(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except OSError as exc:
            raise BillingFileError(self.label(key), f"cannot read: {exc.strerror or exc}") from None

    def label(self, key: str) -> str:
        return str(self.root / key)

    def resolve(self, name: str, keys: set[str]) -> str | None:
        """A manifest names bucket keys (or s3:// URIs); locally the tree is a copy of some prefix
        of the bucket, so the name is matched by its longest suffix that is a local key."""
        name = re.sub(r"^s3://[^/]+/", "", name)
        parts = name.split("/")
        return next(("/".join(parts[i:]) for i in range(len(parts)) if "/".join(parts[i:]) in keys), None)


class S3Prefix:
    """The objects under ``s3://bucket/prefix`` as keys. ``client()`` gives the boto3 S3 client;
    ``errors()`` the exception classes it raises; ``mapped(exc, what)`` the connector error each
    becomes (an S3 error is the source's, not a file's: it ends the read)."""

    explicit = False

    def __init__(
        self,
        uri: str,
        client: Callable[[], Any],
        errors: Callable[[], tuple[type[Exception], ...]],
        mapped: Callable[[Exception, str], Exception],
    ) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.bucket, self.prefix = bucket, prefix
        self._client, self._errors, self._mapped = client, errors, mapped

    def keys(self) -> list[str]:
        out: list[str] = []
        client = self._client()
        try:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                out.extend(item["Key"] for item in page.get("Contents", []))
        except self._errors() as exc:
            raise self._mapped(exc, f"s3:ListObjectsV2 s3://{self.bucket}/{self.prefix}") from exc
        return sorted(out)

    def raw(self, key: str) -> bytes:
        client = self._client()
        try:
            body = client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return body.read()
            finally:
                body.close()
        except self._errors() as exc:
            raise self._mapped(exc, f"s3:GetObject {self.label(key)}") from exc

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[Path]:
        """The object copied to a temporary file, block by block (never whole in memory), for as
        long as the file is being read; removed afterwards. Every S3 error happens here, before
        the file's first batch."""
        with tempfile.TemporaryDirectory(prefix="gpu-ledger-s3-") as folder:
            path = Path(folder) / "export"
            client = self._client()
            try:
                body = client.get_object(Bucket=self.bucket, Key=key)["Body"]
                try:
                    with path.open("wb") as out:
                        for piece in body.iter_chunks(BLOCK_BYTES):
                            out.write(piece)
                finally:
                    body.close()
            except self._errors() as exc:
                raise self._mapped(exc, f"s3:GetObject {self.label(key)}") from exc
            except OSError as exc:
                raise BillingFileError(
                    self.label(key), f"cannot copy to a temporary file: {exc.strerror or exc}"
                ) from None
            yield path

    def label(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def resolve(self, name: str, keys: set[str]) -> str | None:
        if name.startswith("s3://"):
            bucket, _, name = name.removeprefix("s3://").partition("/")
            if bucket != self.bucket:
                return None
        return name if name in keys else None
