"""post_json against a real local HTTP server: retries with backoff on 5xx/429/timeouts, none on
other answers, no redirects followed, errors that show the host but never the URL's path."""

from __future__ import annotations

import socket

import pytest
from alerts.receiver import http_receiver
from smtpserver import free_port

from service.notify import NotifyError
from service.notify.webhook import Delivered, post_json

SECRET = "/services/T0/B0/s3cret"


def test_retries_server_errors_with_doubling_backoff() -> None:
    sleeps: list[float] = []
    with http_receiver() as hooks:
        hooks.script = [500, 503]
        result = post_json(hooks.base + SECRET, {"a": 1}, retries=3, backoff_s=1.0, sleep=sleeps.append)
    assert result == Delivered(200, 3)
    assert sleeps == [1.0, 2.0]
    assert hooks.posts == [(SECRET, {"a": 1})]


def test_gives_up_after_the_retries_and_hides_the_path() -> None:
    sleeps: list[float] = []
    with http_receiver() as hooks:
        hooks.script = [502, 502, 502, 502]
        with pytest.raises(NotifyError) as info:
            post_json(hooks.base + SECRET, {}, retries=2, backoff_s=0.5, sleep=sleeps.append)
    assert str(info.value) == f"webhook {hooks.base}/…: HTTP 502 (after 3 attempt(s))"
    assert sleeps == [0.5, 1.0] and hooks.attempts == 3


def test_client_errors_are_not_retried() -> None:
    with http_receiver() as hooks:
        hooks.script = [404]
        with pytest.raises(NotifyError, match=r"HTTP 404 \(after 1 attempt\(s\)\)") as info:
            post_json(hooks.base + SECRET, {}, retries=3, sleep=lambda s: None)
    assert hooks.attempts == 1 and "s3cret" not in str(info.value)


def test_429_waits_retry_after_capped() -> None:
    sleeps: list[float] = []
    with http_receiver() as hooks:
        hooks.script = [429, 429]
        hooks.headers = {"Retry-After": "7"}
        post_json(hooks.base, {}, retries=2, sleep=sleeps.append)
        hooks.script, hooks.headers = [429], {"Retry-After": "86400"}
        post_json(hooks.base, {}, retries=1, sleep=sleeps.append)
    assert sleeps == [7.0, 7.0, 30.0]


def test_redirects_are_not_followed() -> None:
    with http_receiver() as hooks:
        hooks.script = [302]
        hooks.headers = {"Location": "file:///etc/passwd"}
        with pytest.raises(NotifyError, match="HTTP 302"):
            post_json(hooks.base, {}, retries=0)
    assert hooks.attempts == 1


def test_nothing_listening() -> None:
    port = free_port()
    with pytest.raises(NotifyError, match=rf"webhook http://127\.0\.0\.1:{port}/…: ConnectError \(after 2"):
        post_json(f"http://127.0.0.1:{port}{SECRET}", {}, retries=1, sleep=lambda s: None)


def test_a_receiver_that_never_answers_times_out() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog), never answers
        listener.bind(("127.0.0.1", free_port()))
        listener.listen(4)
        port = listener.getsockname()[1]
        with pytest.raises(NotifyError, match=r"no answer within 0\.3 s \(after 1 attempt"):
            post_json(f"http://127.0.0.1:{port}/", {}, timeout_s=0.3, retries=0)


def test_httpx_request_log_shows_the_host_not_the_path(caplog: pytest.LogCaptureFixture) -> None:
    with http_receiver() as hooks, caplog.at_level("INFO", logger="httpx"):
        post_json(hooks.base + SECRET, {}, retries=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines == [f'HTTP Request: POST {hooks.base}/… "HTTP/1.0 200 OK"']
