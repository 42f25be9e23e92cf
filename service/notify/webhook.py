"""HTTP webhooks: POST a JSON document, with a timeout, retries and exponential backoff.

Retried: connection failures, timeouts, 408, 429 (after its ``Retry-After``, capped) and 5xx.
Not retried: other answers (a 400 or 404 will not get better). Redirects are not followed (a
webhook that moved is a configuration to fix, and a redirect must not carry the payload to
another host). Errors name the URL's scheme and host only: the path and query of a webhook URL
usually are its secret (Slack's ``/services/T…/B…/…``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from service.notify import NotifyError

USER_AGENT = "gpu-ledger-alerts"
MAX_BACKOFF_S = 30.0
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class _RedactWebhookUrls(logging.Filter):
    """httpx logs every request's full URL at INFO ("HTTP Request: POST https://…"): for a webhook
    that is its secret. Records naming a URL this module posts to show :func:`safe_target` instead."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.urls and isinstance(record.args, tuple):
            record.args = tuple(safe_target(str(a)) if str(a) in self.urls else a for a in record.args)
        return True


_REDACT = _RedactWebhookUrls()
logging.getLogger("httpx").addFilter(_REDACT)


@dataclass(frozen=True)
class Delivered:
    """A webhook accepted the document (2xx) after ``attempts`` tries."""

    status: int
    attempts: int


def safe_target(url: str) -> str:
    """``https://hooks.example.com/…``: what a log line or error may show of a webhook URL."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def post_json(
    url: str,
    document: Mapping[str, Any],
    *,
    timeout_s: float = 10.0,
    retries: int = 3,
    backoff_s: float = 1.0,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Delivered:
    """POST ``document`` as JSON to ``url``; up to ``1 + retries`` attempts, waiting ``backoff_s``
    × 2^(attempt − 1) (at most :data:`MAX_BACKOFF_S`) between them. Raises :class:`NotifyError`."""
    body = orjson.dumps(document)
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    target = safe_target(url)
    _REDACT.urls.add(str(httpx.URL(url)))
    own = client is None
    http = client or httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False)
    last = ""
    try:
        for attempt in range(1, retries + 2):
            wait = min(MAX_BACKOFF_S, backoff_s * 2 ** (attempt - 1))
            try:
                response = http.post(url, content=body, headers=headers, timeout=timeout_s)
            except httpx.TimeoutException:
                last = f"no answer within {timeout_s:g} s"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}"
            else:
                if 200 <= response.status_code < 300:
                    return Delivered(response.status_code, attempt)
                last = f"HTTP {response.status_code}"
                if response.status_code not in RETRY_STATUS:
                    break
                retry_after = response.headers.get("retry-after", "")
                if retry_after.isdigit():
                    wait = min(MAX_BACKOFF_S, float(retry_after))
            if attempt <= retries:
                sleep(wait)
    finally:
        if own:
            http.close()
    raise NotifyError(f"webhook {target}: {last} (after {attempt} attempt(s))")
