"""HTTP/1.1 over a plain socket, for what httpx won't do: keep sending a body while reading the
answer that refused it, and count how much of the body the server let through."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed_s: float  # from the first byte sent to the whole answer read
    sent_b: int  # body bytes the socket accepted before the server closed or answered

    def json(self) -> Any:
        return json.loads(self.body)


def chunked(parts: Iterable[bytes]) -> Iterable[bytes]:
    """``parts`` in HTTP/1.1 chunked transfer coding."""
    for part in parts:
        yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
    yield b"0\r\n\r\n"


def post(
    base: str, path: str, body: Iterable[bytes], headers: dict[str, str], timeout_s: float = 10
) -> Answer:
    """POST ``body`` (an iterable of raw byte blocks, sent as they come) and read the answer
    while sending; sending stops at the answer or when the server closes its side."""
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=timeout_s)
    head = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}"] + [f"{k}: {v}" for k, v in headers.items()]
    answered = threading.Event()
    sent_b = 0

    def send() -> None:
        nonlocal sent_b
        try:
            for block in body:
                if answered.is_set():
                    return
                sock.sendall(block)
                sent_b += len(block)
        except OSError:  # the server closed the connection: it stopped reading, as it should
            return

    started = time.perf_counter()
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while True:
            try:
                got = sock.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            data += got
            if _complete(data):
                break
    finally:
        elapsed_s = time.perf_counter() - started
        answered.set()
        sock.close()
        sender.join(timeout_s)
    head_b, _, payload = data.partition(b"\r\n\r\n")
    lines = head_b.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return Answer(
        int(lines[0].split()[1]), {k.lower(): v for k, v in fields.items()}, payload, elapsed_s, sent_b
    )


def _complete(data: bytes) -> bool:
    head, sep, payload = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b": ")
        if name.lower() == b"content-length":
            return len(payload) >= int(value)
    return False
