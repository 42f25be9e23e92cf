"""E-mail over SMTP with the standard library (smtplib + email.message.EmailMessage).

Configured by the ``[smtp]`` table (:class:`SmtpSettings`)::

    [smtp]
    host = "smtp.example.com"
    port = 587                 # submission; 465 (implicit TLS) is not supported, 25 with starttls = false
    starttls = true            # upgrade with STARTTLS before any credential is sent
    username = "ledger"        # optional; then password too (GPU_LEDGER_SMTP__PASSWORD)
    password = "…"
    from_addr = "gpu-ledger@example.com"
    timeout_s = 30
    ca_file = "/etc/ssl/private-ca.pem"   # optional: trust this CA (a private relay, tests)

Why STARTTLS is verified against the system trust store (or ``ca_file``) and never skipped: a relay
that cannot prove its name would receive the password. Logging in without STARTTLS is refused.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from service.notify import NotifyError

#: Upper bounds so that a hostile or mistaken config cannot make a send hang or balloon.
MAX_TIMEOUT_S = 300
MAX_RECIPIENTS = 100


class SmtpSettings(BaseModel):
    """The ``[smtp]`` table: where and how e-mail is sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1, max_length=253, description="SMTP relay host name or address")
    port: int = Field(default=587, ge=1, le=65535)
    starttls: bool = Field(default=True, description="upgrade the connection with STARTTLS")
    username: str | None = Field(default=None, max_length=256)
    password: SecretStr | None = Field(default=None, repr=False)
    from_addr: str = Field(min_length=3, max_length=320, description="the From: address")
    timeout_s: float = Field(default=30, gt=0, le=MAX_TIMEOUT_S)
    ca_file: Path | None = Field(default=None, description="PEM CA bundle to trust (instead of the system's)")

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if any(c in value for c in "/@ \t\r\n"):
            raise ValueError("must be a host name or address, not a URL")
        return value

    @field_validator("from_addr")
    @classmethod
    def _from(cls, value: str) -> str:
        _check_address(value)
        return value

    @model_validator(mode="after")
    def _credentials(self) -> SmtpSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.username is not None and not self.starttls:
            raise ValueError(
                "logging in without STARTTLS would send the password in clear: set starttls = true"
            )
        return self


def _check_address(address: str) -> None:
    # Header injection: a CR/LF in an address would add headers or recipients.
    if any(c in address for c in "\r\n,;") or "@" not in address or len(address) > 320:
        raise ValueError(f"not a single e-mail address: {address[:80]!r}")


def build_message(
    settings: SmtpSettings,
    to: Sequence[str],
    subject: str,
    text: str,
    html: str | None = None,
    attachments: Sequence[tuple[str, bytes, str]] = (),
) -> EmailMessage:
    """The MIME message :func:`send_email` sends (text, optional HTML alternative, attachments)."""
    if not to:
        raise NotifyError("e-mail has no recipient")
    if len(to) > MAX_RECIPIENTS:
        raise NotifyError(f"e-mail has {len(to)} recipients; at most {MAX_RECIPIENTS}")
    try:
        for address in to:
            _check_address(address)
    except ValueError as exc:
        raise NotifyError(f"e-mail recipient refused: {exc}") from None
    msg = EmailMessage()
    msg["From"] = settings.from_addr
    msg["To"] = ", ".join(to)
    # A subject is one header line: folded newlines would otherwise inject headers.
    msg["Subject"] = " ".join(subject.split())
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = make_msgid(domain=settings.from_addr.rpartition("@")[2] or None)
    msg.set_content(text)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    for filename, content, mime_type in attachments:
        maintype, sep, subtype = mime_type.partition("/")
        if not sep or not maintype or not subtype:
            raise NotifyError(f"attachment {filename!r}: MIME type {mime_type!r} is not type/subtype")
        msg.add_attachment(content, maintype=maintype, subtype=subtype, filename=filename)
    return msg


def send_email(
    settings: SmtpSettings,
    to: Sequence[str],
    subject: str,
    text: str,
    html: str | None = None,
    attachments: Sequence[tuple[str, bytes, str]] = (),
) -> None:
    """Send one e-mail to ``to`` (addresses) through the configured relay.

    ``attachments`` are ``(filename, content, MIME type)``. Raises :class:`NotifyError` naming the
    relay and what failed (connect, STARTTLS, login, refused recipients); never the password.
    """
    msg = build_message(settings, to, subject, text, html, attachments)
    where = f"SMTP {settings.host}:{settings.port}"
    try:
        with smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_s) as smtp:
            smtp.ehlo()
            if settings.starttls:
                if not smtp.has_extn("starttls"):
                    raise NotifyError(f"{where}: the server does not offer STARTTLS (starttls = true)")
                context = ssl.create_default_context(
                    cafile=str(settings.ca_file) if settings.ca_file else None
                )
                smtp.starttls(context=context)
                smtp.ehlo()
            if settings.username is not None and settings.password is not None:
                smtp.login(settings.username, settings.password.get_secret_value())
            refused = smtp.send_message(msg, from_addr=settings.from_addr, to_addrs=list(to))
    except NotifyError:
        raise
    except smtplib.SMTPAuthenticationError as exc:
        raise NotifyError(f"{where}: login as {settings.username!r} refused ({exc.smtp_code})") from None
    except smtplib.SMTPRecipientsRefused as exc:
        raise NotifyError(f"{where}: every recipient refused: {', '.join(sorted(exc.recipients))}") from None
    except smtplib.SMTPResponseException as exc:
        reason = exc.smtp_error.decode("utf-8", "replace")[:200] if isinstance(exc.smtp_error, bytes) else ""
        raise NotifyError(f"{where}: server answered {exc.smtp_code} {reason}".rstrip()) from None
    except ssl.SSLError as exc:
        raise NotifyError(f"{where}: TLS failed: {exc.reason or exc.__class__.__name__}") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise NotifyError(f"{where}: {exc.__class__.__name__}: {exc}"[:300]) from None
    if refused:
        raise NotifyError(f"{where}: recipient(s) refused: {', '.join(sorted(refused))}")
