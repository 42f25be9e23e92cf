"""A small Docker Engine API client: a container's name, image and labels, over the unix socket.

Only what attribution needs (``GET /containers/<id>/json``). Docker is optional enrichment: a
socket that is missing, refuses us or answers badly is logged once and the answer is ``None``;
nothing here raises on the ingest path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ContainerDetails:
    """What the Docker Engine says of one container (``docker inspect``)."""

    container_id: str
    name: str  # without Docker's leading '/'
    image: str  # Config.Image as given to `docker run` (`nvcr.io/nvidia/pytorch:24.05-py3`)
    labels: dict[str, str] = field(default_factory=dict)  # Config.Labels


class DockerEngine:
    """Reads container details from a Docker Engine.

    ``socket``: the Engine's unix socket (rootless Docker: ``/run/user/<uid>/docker.sock``).
    ``api_version``: the path prefix; v1.43 is Docker 24+, older Engines answer 400 to it.
    ``transport``: for tests or a TCP Engine; default talks HTTP over ``socket``.
    Callers cache: this client asks the Engine every time it is called.
    """

    def __init__(
        self,
        socket: Path = Path("/var/run/docker.sock"),
        *,
        api_version: str = "v1.43",
        timeout_s: float = 2.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.socket = socket
        self._prefix = f"/{api_version}"
        self._transport, self._timeout_s = transport, timeout_s
        self._client: Any = None  # built on first use: the node agent imports httpx only if Docker runs
        self._own_socket = transport is None
        self._warned = False

    def _http(self) -> httpx.Client:
        import httpx

        if self._client is None:
            self._client = httpx.Client(
                transport=self._transport or httpx.HTTPTransport(uds=str(self.socket)),
                base_url="http://docker",  # the host is ignored over a unix socket
                timeout=self._timeout_s,
            )
        return self._client

    def inspect(self, container_id: str) -> ContainerDetails | None:
        """Name, image and labels of a container; ``None`` when Docker does not know it (a
        containerd or CRI-O container, one already removed) or cannot be asked."""
        if self._own_socket and not self.socket.exists():
            # The common case on a node without Docker. Checked first because httpcore leaves the
            # socket of a failed unix connect for the garbage collector (a ResourceWarning).
            self._warn_once("no Docker Engine socket at %s (%s): no container names or labels", "missing")
            return None
        import httpx

        try:
            response = self._http().get(f"{self._prefix}/containers/{container_id}/json")
        except httpx.HTTPError as exc:  # no socket, permission denied, timeout: not fatal
            self._warn_once("Docker Engine at %s unreachable (%s): no container names or labels", exc)
            return None
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            detail = f"{response.status_code} {response.text[:200]}"  # Docker says why in the body
            self._warn_once("Docker Engine at %s answered %s: no container names or labels", detail)
            return None
        try:
            body = response.json()
            config = body.get("Config") or {}
            return ContainerDetails(
                container_id=body.get("Id", container_id),
                name=str(body.get("Name", "")).lstrip("/"),
                image=str(config.get("Image") or ""),
                labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
            )
        except (ValueError, AttributeError) as exc:  # not the JSON we know
            self._warn_once("Docker Engine at %s sent an unreadable answer (%s)", exc)
            return None

    def _warn_once(self, message: str, detail: object) -> None:
        # A node without Docker asks on every sample: one line in the log is enough.
        if not self._warned:
            self._warned = True
            log.warning(message, self.socket, detail)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> DockerEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
