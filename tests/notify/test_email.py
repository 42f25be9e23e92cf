"""send_email against a real SMTP server (aiosmtpd): plain, STARTTLS with a trustme CA, login,
and every failure as a NotifyError that names the relay and never the password."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from smtpserver import free_port, smtp_server

from service.notify import NotifyError
from service.notify.email import SmtpSettings, build_message, send_email
from service.settings import ConfigError, load_settings

PASSWORD = "s3cret-pw"  # noqa: S105  (a test secret that must never show up in an error)


def test_plain_send_with_html_and_attachment(tmp_path: Path) -> None:
    with smtp_server(tmp_path) as server:
        settings = SmtpSettings(
            host=server.host, port=server.port, starttls=False, from_addr="ledger@example.com"
        )
        send_email(
            settings,
            ["a@example.com", "b@example.com"],
            "Report\r\nBcc: evil@example.com",
            "total 12.34 USD",
            html="<p>total <b>12.34</b> USD</p>",
            attachments=[("report.csv", b"project,cost\nml,12.34\n", "text/csv")],
        )
    [got] = server.received
    assert got.mail_from == "ledger@example.com"
    assert got.rcpt_tos == ["a@example.com", "b@example.com"]
    assert not got.tls
    msg = got.message
    # The CR/LF in the subject is folded into one line: no header was injected.
    assert msg["Subject"] == "Report Bcc: evil@example.com"
    assert msg["Bcc"] is None
    assert msg.get_body(("plain",)).get_content().strip() == "total 12.34 USD"  # type: ignore[union-attr]
    assert "<b>12.34</b>" in msg.get_body(("html",)).get_content()  # type: ignore[union-attr]
    [attachment] = list(msg.iter_attachments())
    assert attachment.get_filename() == "report.csv"
    assert attachment.get_content_type() == "text/csv"
    assert attachment.get_payload(decode=True) == b"project,cost\nml,12.34\n"


def test_starttls_and_login_with_trusted_ca(tmp_path: Path) -> None:
    with smtp_server(tmp_path, starttls=True, user=("ledger", PASSWORD)) as server:
        settings = SmtpSettings(
            host=server.host,
            port=server.port,
            username="ledger",
            password=SecretStr(PASSWORD),
            from_addr="ledger@example.com",
            ca_file=Path(server.ca_file or ""),
        )
        send_email(settings, ["owner@example.com"], "Alert", "job idle")
    [got] = server.received
    assert got.tls
    assert got.login == "ledger"
    assert got.message["Subject"] == "Alert"


def test_untrusted_certificate_is_refused_before_login(tmp_path: Path) -> None:
    with smtp_server(tmp_path, starttls=True, user=("ledger", PASSWORD)) as server:
        other_ca = tmp_path / "other.pem"
        import trustme

        trustme.CA().cert_pem.write_to_path(str(other_ca))
        settings = SmtpSettings(
            host=server.host, port=server.port, username="ledger", password=SecretStr(PASSWORD),
            from_addr="ledger@example.com", ca_file=other_ca,
        )  # fmt: skip
        with pytest.raises(NotifyError, match="TLS failed") as info:
            send_email(settings, ["owner@example.com"], "Alert", "job idle")
    assert PASSWORD not in str(info.value)
    assert server.received == []


def test_wrong_password_names_user_not_password(tmp_path: Path) -> None:
    with smtp_server(tmp_path, starttls=True, user=("ledger", PASSWORD)) as server:
        settings = SmtpSettings(
            host=server.host, port=server.port, username="ledger", password=SecretStr("wrong-pw"),
            from_addr="ledger@example.com", ca_file=Path(server.ca_file or ""),
        )  # fmt: skip
        with pytest.raises(NotifyError, match=r"login as 'ledger' refused \(535\)") as info:
            send_email(settings, ["owner@example.com"], "Alert", "job idle")
    assert "wrong-pw" not in str(info.value)
    assert server.received == []


def test_server_without_starttls_is_refused(tmp_path: Path) -> None:
    with smtp_server(tmp_path) as server:
        settings = SmtpSettings(host=server.host, port=server.port, from_addr="ledger@example.com")
        with pytest.raises(NotifyError, match="does not offer STARTTLS"):
            send_email(settings, ["owner@example.com"], "Alert", "job idle")
    assert server.received == []


def test_nothing_listening_is_a_notify_error() -> None:
    settings = SmtpSettings(
        host="127.0.0.1", port=free_port(), starttls=False, from_addr="ledger@example.com", timeout_s=2
    )
    with pytest.raises(NotifyError, match=r"SMTP 127\.0\.0\.1:\d+: ConnectionRefusedError"):
        send_email(settings, ["owner@example.com"], "Alert", "job idle")


@pytest.mark.parametrize(
    "to",
    [[], ["not-an-address"], ["a@example.com\r\nRCPT TO:<x@evil>"], ["a@x.com, b@y.com"], ["a@x.com"] * 101],
)
def test_bad_recipients_refused_before_connecting(to: list[str]) -> None:
    settings = SmtpSettings(
        host="127.0.0.1", port=free_port(), starttls=False, from_addr="ledger@example.com"
    )
    with pytest.raises(NotifyError):
        build_message(settings, to, "s", "t")


def test_bad_attachment_type() -> None:
    settings = SmtpSettings(host="h", from_addr="ledger@example.com")
    with pytest.raises(NotifyError, match="not type/subtype"):
        build_message(settings, ["a@example.com"], "s", "t", attachments=[("x", b"", "csv")])


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"host": "h", "from_addr": "f@x", "username": "u"}, "username and password go together"),
        ({"host": "h", "from_addr": "f@x", "username": "u", "password": "p", "starttls": False}, "in clear"),
        ({"host": "smtp://h", "from_addr": "f@x"}, "not a URL"),
        ({"host": "h", "from_addr": "f@x\nBcc: y@z"}, "single e-mail address"),
        ({"host": "h", "from_addr": "f@x", "timeout_s": 10_000}, "less than or equal"),
        ({"host": "h", "from_addr": "f@x", "port": 0}, "greater than or equal"),
    ],
)
def test_settings_refuse_bad_tables(table: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        SmtpSettings.model_validate(table)


def test_smtp_table_from_config_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        textwrap.dedent(
            """
            [smtp]
            host = "smtp.example.com"
            username = "ledger"
            password = "from-file"
            from_addr = "ledger@example.com"
            """
        )
    )
    monkeypatch.setenv("GPU_LEDGER_SMTP__PASSWORD", PASSWORD)
    settings = load_settings(config)
    assert settings.smtp is not None
    assert settings.smtp.port == 587 and settings.smtp.starttls and settings.smtp.timeout_s == 30
    assert settings.smtp.password is not None and settings.smtp.password.get_secret_value() == PASSWORD
    assert PASSWORD not in repr(settings) and "from-file" not in repr(settings)


def test_no_smtp_table_means_none(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("log_level = 'INFO'\n")
    assert load_settings(config).smtp is None


def test_bad_smtp_table_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[smtp]\nhost = "h"\n')
    with pytest.raises(ConfigError, match=r"\[smtp\]: key \"from_addr\""):
        load_settings(config)
