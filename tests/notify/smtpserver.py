"""A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps what it received, optionally with
STARTTLS (a trustme certificate) and AUTH LOGIN/PLAIN against one user."""

from __future__ import annotations

import email
import email.policy
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

#: Helper H4's port range; a test takes the first free one.
PORTS = range(18400, 18450)


def free_port(ports: range = PORTS) -> int:
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports}")


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    login: str | None


@dataclass
class SmtpServer:
    host: str
    port: int
    ca_file: str | None
    received: list[Received] = field(default_factory=list)


class _Handler:
    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_DATA(self, _server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        login = (
            session.auth_data.decode()
            if session.authenticated and isinstance(session.auth_data, bytes)
            else None
        )
        self.server.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), message, session.ssl is not None, login)
        )
        return "250 OK"


@contextmanager
def smtp_server(
    tmp_path: Any, *, starttls: bool = False, user: tuple[str, str] | None = None
) -> Iterator[SmtpServer]:
    """Serve SMTP on a free port of this helper's range; ``starttls`` offers (and requires)
    STARTTLS with a certificate for 127.0.0.1 from a fresh trustme CA written to ``ca_file``."""
    kwargs: dict[str, Any] = {}
    ca_file = None
    if starttls:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        ca_file = str(tmp_path / "smtp-ca.pem")
        ca.cert_pem.write_to_path(ca_file)
        kwargs.update(tls_context=context, require_starttls=True)
    if user is not None:

        def authenticator(
            _server: Any, _session: Any, _envelope: Any, _mechanism: str, data: Any
        ) -> AuthResult:
            ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == user
            return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)

        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=starttls)
    server = SmtpServer("127.0.0.1", free_port(), ca_file)
    controller = Controller(_Handler(server), hostname="127.0.0.1", port=server.port, **kwargs)
    controller.start()
    try:
        yield server
    finally:
        controller.stop()
