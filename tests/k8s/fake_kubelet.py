"""A fake kubelet: an in-process gRPC server of the real pod-resources v1 service (the vendored
``api.proto``'s generated servicer) on a unix socket, answering what the test sets.

``answer``: a ``ListPodResourcesResponse``, or raw ``bytes`` sent as the answer (garbage on the
wire), or ``"hang"`` (the call waits until the server stops: the client's deadline passes), or a
``grpc.StatusCode`` to abort with.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from connectors.podresources import api_pb2


def pod(namespace: str, name: str, *containers: tuple[str, dict[str, list[str]]]) -> api_pb2.PodResources:
    """A pod of ``(container, {resource_name: [device ids]})``, as the kubelet reports it."""
    return api_pb2.PodResources(
        namespace=namespace,
        name=name,
        containers=[
            api_pb2.ContainerResources(
                name=c,
                devices=[
                    api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devices.items()
                ],
            )
            for c, devices in containers
        ],
    )


class FakeKubelet:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.answer: Any = api_pb2.ListPodResourcesResponse()
        self.calls = 0
        self._release = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                    # bytes go out as they are: the test's garbage reaches the client's decoder
                    response_serializer=lambda r: r if isinstance(r, bytes) else r.SerializeToString(),
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket}")

    def _list(self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext) -> Any:
        self.calls += 1
        answer = self.answer
        if answer == "hang":
            self._release.wait()
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet stopping")
        if isinstance(answer, grpc.StatusCode):
            context.abort(answer, "the fake kubelet refuses")
        return answer

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._release.set()
        self._server.stop(grace=None)


@contextmanager
def fake_kubelet() -> Iterator[FakeKubelet]:
    """A running fake kubelet on a socket in a short temporary folder (unix paths: ≤ 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kubelet-") as folder:
        kubelet = FakeKubelet(Path(folder) / "kubelet.sock")
        kubelet.start()
        try:
            yield kubelet
        finally:
            kubelet.stop()
