"""A local fake Kubernetes API server: list and watch of pods, namespaces and nodes over HTTP, in the
API's JSON shapes, for the official ``kubernetes`` client to talk to.

* ``GET /api/v1/{pods,namespaces,nodes}``: a ``…List`` (``metadata.resourceVersion``; ``limit`` and
  ``continue`` paging); ``fieldSelector`` ``spec.nodeName=`` / ``metadata.name=`` honoured.
* ``…?watch=true&resourceVersion=N``: a chunked stream of ``{"type", "object"}`` lines — every
  change after N, then new ones as the test makes them, until ``timeoutSeconds``, ``close_watches()``
  or ``stop()``. A version older than ``compact()`` left gets the real ``ERROR`` event (a ``Status``
  with ``code`` 410, reason ``Expired``), as the API server sends it.
* ``refuse = 403`` answers every request with that ``Status``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

KINDS = {"pods": "Pod", "namespaces": "Namespace", "nodes": "Node"}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


class FakeKubeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, resource, type, object)
        self.version = 1000
        self.compacted = 0  # watches from a version below this get 410
        self.refuse: int | None = None
        self.garbage: bytes | None = None  # a list answer's body instead of the list
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._changed = threading.Condition()
        self._epoch = 0  # close_watches() bumps it: open streams end
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- what tests do ---------------------------------------------------------------------

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        """Create or change an object (ADDED / MODIFIED to watchers)."""
        with self._changed:
            self.version += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.version)
            key = _key(obj)
            kind = "MODIFIED" if key in self.objects[resource] else "ADDED"
            self.objects[resource][key] = obj
            self.events.append((self.version, resource, kind, obj))
            self._changed.notify_all()

    def inject(self, resource: str, line: str) -> None:
        """A raw line in the resource's watch streams (not JSON, not an event: a broken proxy)."""
        with self._changed:
            self.version += 1
            self.events.append((self.version, resource, "RAW", {"line": line}))
            self._changed.notify_all()

    def delete(self, resource: str, obj: dict[str, Any]) -> None:
        with self._changed:
            self.version += 1
            gone = self.objects[resource].pop(_key(obj))
            gone["metadata"]["resourceVersion"] = str(self.version)
            self.events.append((self.version, resource, "DELETED", gone))
            self._changed.notify_all()

    def forget(self, resource: str, obj: dict[str, Any]) -> None:
        """Remove an object without a watch event: a deletion whose event a compaction took, which
        only a new list shows."""
        with self._changed:
            self.objects[resource].pop(_key(obj))

    def compact(self) -> None:
        """Forget every version before now (the store moves on one version, as a compaction
        does): a watch from any version seen so far gets 410 Gone."""
        with self._changed:
            self.version += 1
            self.compacted = self.version

    def close_watches(self) -> None:
        with self._changed:
            self._epoch += 1
            self._changed.notify_all()

    def lists(self, resource: str) -> int:
        return sum(1 for path, q in self.requests if path.endswith(resource) and q.get("watch") != "true")

    def kubeconfig(self, folder: Path) -> Path:
        path = folder / "kubeconfig"
        path.write_text(json.dumps({  # JSON is YAML: the client reads it as a kubeconfig
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "agent", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
        }))  # fmt: skip
        return path

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.close_watches()
        self._server.shutdown()
        self._server.server_close()

    # -- the server ------------------------------------------------------------------------

    def _select(self, resource: str, obj: dict[str, Any], selector: str) -> bool:
        for term in filter(None, selector.split(",")):
            path, _, want = term.partition("=")
            value: Any = obj
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value != want:
                return False
        return True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                api.requests.append((url.path, query))
                resource = url.path.removeprefix("/api/v1/")
                if api.refuse is not None:
                    self._send(api.refuse, status(api.refuse, "Forbidden", f"{resource} is forbidden"))
                    return
                if resource not in KINDS:
                    self._send(
                        404, status(404, "NotFound", "the server could not find the requested resource")
                    )
                    return
                if query.get("watch") == "true":
                    self._watch(resource, query)
                else:
                    self._list(resource, query)

            def _list(self, resource: str, query: dict[str, str]) -> None:
                if api.garbage is not None:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(api.garbage)))
                    self.end_headers()
                    self.wfile.write(api.garbage)
                    return
                with api._changed:
                    items = [o for o in api.objects[resource].values()
                             if api._select(resource, o, query.get("fieldSelector", ""))]  # fmt: skip
                    version = str(api.version)
                start = int(query.get("continue") or 0)
                limit = int(query.get("limit") or 0) or len(items)
                page = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
                        for o in items[start : start + limit]]  # fmt: skip
                meta: dict[str, Any] = {"resourceVersion": version}
                if start + limit < len(items):
                    meta["continue"] = str(start + limit)
                self._send(200, {"kind": f"{KINDS[resource]}List", "apiVersion": "v1", "metadata": meta,
                                 "items": page})  # fmt: skip

            def _chunk(self, body: dict[str, Any]) -> None:
                self._raw(json.dumps(body).encode() + b"\n")

            def _raw(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _watch(self, resource: str, query: dict[str, str]) -> None:
                since = int(query.get("resourceVersion") or 0)
                deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
                selector = query.get("fieldSelector", "")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    with api._changed:
                        epoch = api._epoch
                        if since < api.compacted:
                            message = f"too old resource version: {since} ({api.compacted})"
                            self._chunk({"type": "ERROR", "object": status(410, "Expired", message)})
                        else:
                            while api._epoch == epoch and time.monotonic() < deadline:
                                for version, res, kind, obj in api.events:
                                    if version <= since or res != resource:
                                        continue
                                    if kind == "RAW":
                                        self._raw(obj["line"].encode() + b"\n")
                                    elif api._select(res, obj, selector):
                                        self._chunk({"type": kind, "object": obj})
                                since = api.version
                                api._changed.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                # else the connection stays open for the client's next request, as the API server's does

        return Handler


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


@contextmanager
def fake_kube_api() -> Iterator[FakeKubeApi]:
    api = FakeKubeApi()
    api.start()
    try:
        yield api
    finally:
        api.stop()
