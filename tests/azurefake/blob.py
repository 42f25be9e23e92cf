"""An HTTPS fake of Azure Blob Storage (List Blobs, Get Blob) on 127.0.0.1, for the real
``azure-storage-blob`` client.

Path-style URLs as Azurite serves them: ``https://127.0.0.1:<port>/<account>/<container>``. Only
what a reader of export files calls is implemented:

* List Blobs ``GET /<account>/<container>?restype=container&comp=list&prefix=…&marker=…``: the
  ``EnumerationResults`` XML of the REST API, ``page_size`` blobs a page and an opaque
  ``NextMarker`` while more remain (the real service pages at 5,000).
* Get Blob ``GET /<account>/<container>/<blob>``: the bytes, ``206`` with ``Content-Range`` when the
  client sends ``x-ms-range`` (it always does for the first chunk and needs the total size from
  it), with ``Content-Length``, ``Content-Type``, ``ETag``, ``Last-Modified`` and ``x-ms-blob-type``.
* Errors in the service's shape: an ``<Error><Code>…`` XML body and the ``x-ms-error-code``
  header, which the SDK maps to its exceptions (``ContainerNotFound``/``BlobNotFound`` 404s); a
  test injects others with ``fail(request) -> (status, code) | None``.

TLS with a trustme certificate (azure-core's bearer-token policy refuses ``http://``); clients
verify it with ``ca_path`` (``connection_verify``). Requests are recorded as
:class:`azurefake.server.Request` (reused, not changed).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import trustme
from azurefake.server import Request

ACCOUNT = "acct"


@dataclass(slots=True)
class StoredBlob:
    data: bytes
    last_modified: dt.datetime
    content_type: str = "text/csv"

    @property
    def etag(self) -> str:
        return '"0x' + hashlib.sha1(self.data).hexdigest()[:15].upper() + '"'


@dataclass(slots=True)
class FakeBlobService:
    url: str  # the account URL: https://127.0.0.1:<port>/<account>
    ca_path: str
    containers: dict[str, dict[str, StoredBlob]]
    page_size: int = 3
    fail: Callable[[Request], tuple[int, str] | None] | None = None
    requests: list[Request] = field(default_factory=list)

    def container_url(self, container: str) -> str:
        return f"{self.url}/{container}"

    def put(self, container: str, name: str, data: bytes, last_modified: dt.datetime) -> None:
        self.containers.setdefault(container, {})[name] = StoredBlob(data, last_modified)


@contextmanager
def fake_blob_service(tmp_path: Path, page_size: int = 3) -> Iterator[FakeBlobService]:
    """Serve an empty Blob service over HTTPS on a free port of 127.0.0.1 until the block ends."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_path = tmp_path / "fake-blob-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    service = FakeBlobService(url="", ca_path=str(ca_path), containers={}, page_size=page_size)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            split = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=unquote(split.path),
                query=parse_qs(split.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=None,
            )
            service.requests.append(request)
            failure = service.fail(request) if service.fail is not None else None
            if failure is not None:
                self._error(*failure)
                return
            account, _, rest = request.path.lstrip("/").partition("/")
            container, _, blob = rest.partition("/")
            blobs = service.containers.get(container) if account == ACCOUNT else None
            if blobs is None:
                self._error(404, "ContainerNotFound")
            elif not blob and request.query.get("comp") == ["list"]:
                self._list(request, container, blobs)
            elif blob in blobs:
                self._blob(request, blobs[blob])
            else:
                self._error(404, "BlobNotFound" if blob else "InvalidQueryParameterValue")

        def _list(self, request: Request, container: str, blobs: dict[str, StoredBlob]) -> None:
            prefix = request.query.get("prefix", [""])[0]
            marker = request.query.get("marker", [""])[0]
            after = base64.urlsafe_b64decode(marker).decode() if marker else ""
            names = sorted(n for n in blobs if n.startswith(prefix) and n >= after)
            page, more = names[: service.page_size], names[service.page_size :]
            items = "".join(
                f"<Blob><Name>{escape(n)}</Name><Properties>"
                f"<Creation-Time>{_http_date(blobs[n].last_modified)}</Creation-Time>"
                f"<Last-Modified>{_http_date(blobs[n].last_modified)}</Last-Modified>"
                f"<Etag>{blobs[n].etag.strip(chr(34))}</Etag>"
                f"<Content-Length>{len(blobs[n].data)}</Content-Length>"
                f"<Content-Type>{blobs[n].content_type}</Content-Type>"
                "<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true"
                "</AccessTierInferred><LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>"
                "<ServerEncrypted>true</ServerEncrypted></Properties><OrMetadata /></Blob>"
                for n in page
            )
            next_marker = base64.urlsafe_b64encode(more[0].encode()).decode() if more else ""
            body = (
                '<?xml version="1.0" encoding="utf-8"?>'
                f'<EnumerationResults ServiceEndpoint="{service.url}/" ContainerName="{escape(container)}">'
                f"<Prefix>{escape(prefix)}</Prefix>"
                + (f"<Marker>{marker}</Marker>" if marker else "")
                + f"<Blobs>{items}</Blobs><NextMarker>{next_marker}</NextMarker></EnumerationResults>"
            ).encode()
            self._send(200, body, {"Content-Type": "application/xml"})

        def _blob(self, request: Request, blob: StoredBlob) -> None:
            headers = {
                "Content-Type": blob.content_type,
                "ETag": blob.etag,
                "Last-Modified": _http_date(blob.last_modified),
                "x-ms-creation-time": _http_date(blob.last_modified),
                "x-ms-blob-type": "BlockBlob",
                "x-ms-server-encrypted": "true",
                "Accept-Ranges": "bytes",
            }
            size = len(blob.data)
            wanted = request.headers.get("x-ms-range") or request.headers.get("range")
            if wanted and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", wanted)):
                first = int(m[1])
                last = min(int(m[2]) if m[2] else size - 1, size - 1)
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
                self._send(206, blob.data[first : last + 1], headers)
            else:
                self._send(200, blob.data, headers)

        def _error(self, status: int, code: str) -> None:
            body = (
                '<?xml version="1.0" encoding="utf-8"?><Error>'
                f"<Code>{code}</Code><Message>{code} (fake)\nRequestId:00000000-0000-0000-0000-000000000000\n"
                "Time:2025-10-02T03:00:00.0000000Z</Message></Error>"
            ).encode()
            self._send(status, body, {"Content-Type": "application/xml", "x-ms-error-code": code})

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-ms-request-id", "00000000-0000-0000-0000-000000000000")
            self.send_header("x-ms-version", "2025-11-05")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    service.url = f"https://127.0.0.1:{server.server_address[1]}/{ACCOUNT}"
    # A short poll interval: shutdown() waits for the next poll, 0.5 s by default.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="fake-blob", daemon=True)
    thread.start()
    try:
        yield service
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _http_date(when: dt.datetime) -> str:
    return format_datetime(when.astimezone(dt.UTC), usegmt=True)
