"""Which container holds which GPU on this node: the kubelet's pod-resources API v1.

gRPC over the kubelet's unix socket (``/var/lib/kubelet/pod-resources/kubelet.sock``): ``List``
answers every pod of the node with its containers and, per container, the devices the device
plugins allocated to it — ``resource_name`` ``nvidia.com/gpu`` (or ``nvidia.com/mig-1g.10gb``,
``nvidia.com/gpu.shared``, …) with ``device_ids`` the GPU or MIG UUIDs, the ids NVML reports. With
the NVIDIA device plugin's time-slicing a GPU is advertised as replicas ``<uuid>::<n>``; the
replica suffix is dropped, so a time-sliced GPU is held by several containers.

Read every ``every_s`` at most (the answer is kept in between) with a ``timeout_s`` deadline. A
missing socket, a kubelet that does not answer in time, refuses, or answers bytes that are no
``ListPodResourcesResponse`` leaves nothing known — processes are then keyed by pod UID, as
without this API — and is logged once, until it recovers (logged too). gRPC and protobuf are
imported on first use: only the ``k8s`` extra installs them, and the node agent loads them only
when ``pod_resources_socket`` is set (issue 13's 60 MB).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
#: The kubelet's own limit for this API's answers (pkg/kubelet/apis/podresources: 16 MiB).
MAX_MESSAGE_B = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PodContainer:
    """A container of a pod, as the kubelet names it."""

    namespace: str
    pod: str
    container: str


class PodResources:
    """``holders(device_id)``: the containers the kubelet allocated that device to (module docstring).

    ``socket``: the kubelet's pod-resources socket. ``clock``: monotonic seconds. Used from one
    thread (the agent's sampling loop).
    """

    def __init__(
        self,
        socket: Path = DEFAULT_SOCKET,
        *,
        timeout_s: float = 2.0,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket, self.timeout_s, self.every_s, self._clock = socket, timeout_s, every_s, clock
        self._channel: Any = None
        self._stub: Any = None
        self._request: Any = None
        self._held: dict[str, tuple[PodContainer, ...]] = {}
        self._read_at = float("-inf")
        self._failing: str | None = None  # the failure last logged; None while answers come

    def holders(self, device_id: str) -> tuple[PodContainer, ...]:
        """The containers holding ``device_id`` (a GPU or MIG UUID) now; () when none or unknown."""
        self._refresh()
        return self._held.get(device_id, ())

    def allocations(self) -> Mapping[str, tuple[PodContainer, ...]]:
        """Every allocated device id → its holders, as last read."""
        self._refresh()
        return self._held

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._stub = None

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._read_at < self.every_s:
            return
        self._read_at = now
        try:
            held = self._list()
        except Exception as exc:  # noqa: BLE001  (grpc.RpcError, OSError, a decoding error: never fatal)
            self._held = {}
            self._failed(_describe(exc))
            return
        if self._failing is not None:
            log.info("pod-resources: %s answers again", self.socket)
            self._failing = None
        self._held = held

    def _failed(self, why: str) -> None:
        if self._failing is None:  # once per outage: the agent samples every few seconds
            log.warning(
                "pod-resources: %s: %s; pods are keyed by their UID until it answers", self.socket, why
            )
        self._failing = why

    def _list(self) -> dict[str, tuple[PodContainer, ...]]:
        if not self.socket.exists():
            raise FileNotFoundError(
                f"no socket at {self.socket} (is the kubelet's pod-resources folder mounted?)"
            )
        if self._stub is None:
            import grpc  # the `k8s` extra; loaded only when this feature is on

            from connectors.podresources import api_pb2

            options = [("grpc.max_receive_message_length", MAX_MESSAGE_B)]
            self._channel = grpc.insecure_channel(f"unix://{self.socket}", options=options)
            method = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name["List"]
            # The generated stub's decoder raises on a bad answer, which gRPC logs with a traceback
            # on every call; this one hands gRPC None, which it reports as INTERNAL, logged here once.
            self._stub = self._channel.unary_unary(
                f"/{method.containing_service.full_name}/{method.name}",
                request_serializer=api_pb2.ListPodResourcesRequest.SerializeToString,
                response_deserializer=_decoder(api_pb2.ListPodResourcesResponse),
                _registered_method=True,
            )
            self._request = api_pb2.ListPodResourcesRequest()
        answer = self._stub(self._request, timeout=self.timeout_s)
        held: dict[str, list[PodContainer]] = {}
        for pod in answer.pod_resources:
            for container in pod.containers:
                holder = PodContainer(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    for device_id in devices.device_ids:
                        uuid = device_id.split("::", 1)[0]  # time-slicing replica `<uuid>::<n>`
                        if holder not in held.setdefault(uuid, []):
                            held[uuid].append(holder)
        return {uuid: tuple(holders) for uuid, holders in held.items()}


def _decoder(message: Any) -> Callable[[bytes], Any]:
    """``message.FromString``, or None for bytes that are no such message."""
    from google.protobuf.message import DecodeError

    def decode(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except DecodeError:
            return None

    return decode


def _describe(exc: Exception) -> str:
    """One line for a failed ``List``: gRPC's status and details, else the exception."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"List failed: {code()} {details()}"
    return f"{type(exc).__name__}: {exc}"
