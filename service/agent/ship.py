"""Sending spooled batches to the service, oldest first, with backoff.

What each answer means for a batch (meltano-style error classes):

* 2xx (a ``{"duplicate": true}`` replay included) — the service has it: delete the spool file.
* 400, 413, 422 — the batch itself is bad and will never be accepted: move it to ``rejected/``
  and go on with the next (one bad batch must not block the node forever). Nothing is deleted:
  the file and a ``.reason`` stay there for a person, and each one is logged at error level.
* 409 — the service holds *other* content under this batch id (two nodes share an ``agent_id``,
  or the spool lost ``NEXT_SEQ``): retrying can never succeed, so the batch is quarantined in
  ``rejected/`` the same way, with its own error line saying what to fix.
* 401, 403 — wrong token or name: a configuration problem. Keep everything, back off.
* 408, 429, 5xx, connection errors, timeouts — back off and retry the same batch.

Backoff is exponential with full jitter, capped: ``uniform(0, min(cap, base × 2^(n-1)))`` after
the n-th consecutive failure, so a fleet of agents does not hammer a service that comes back.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from service.agent.log import get_logger
from service.agent.spool import Spool

log = get_logger(__name__)

REJECT_STATUSES = frozenset({400, 409, 413, 422})


def backoff_delay_s(failures: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure: full jitter, capped."""
    return rng.uniform(0.0, min(cap_s, base_s * 2 ** max(0, failures - 1)))


@dataclass(slots=True)
class ShipResult:
    shipped: int = 0  # acknowledged and deleted (duplicates included)
    duplicates: int = 0
    rejected: int = 0  # quarantined
    failed: bool = False  # stopped on a retriable or auth failure; back off


class Client(Protocol):
    """What the Shipper needs of an HTTP client: ``service.agent.http.HttpClient`` in the agent,
    an ``httpx.Client`` (or Starlette's TestClient) in tests."""

    def post(self, url: str, *, content: str, headers: dict[str, str]) -> Any: ...

    def close(self) -> None: ...


def _is_transport_error(exc: Exception) -> bool:
    """No HTTP answer came: the standard library's errors, or httpx's when the client is httpx
    (then httpx is loaded; the agent's own client never loads it)."""
    if isinstance(exc, OSError | http.client.HTTPException):
        return True
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.HTTPError)


class Shipper:
    """POSTs spooled batches to ``url`` with ``Authorization: Bearer <token>``."""

    def __init__(
        self,
        client: Client,
        url: str,
        token: str,
        *,
        base_s: float = 1.0,
        cap_s: float = 300.0,
        rng: random.Random | None = None,
    ):
        self.client, self.url = client, url
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.base_s, self.cap_s = base_s, cap_s
        self.rng = rng or random.Random()
        self.failures = 0  # consecutive

    def next_delay_s(self) -> float:
        return backoff_delay_s(self.failures, self.base_s, self.cap_s, self.rng)

    def ship(self, spool: Spool, *, keep_going: Callable[[], bool] = lambda: True) -> ShipResult:
        """Ship pending batches in order until none is left, one fails, or ``keep_going()`` is
        false (checked after each batch: the caller's next sampling tick is due)."""
        result = ShipResult()
        for path in spool.pending():
            outcome = self._post(spool, path)
            if outcome == "retry":
                self.failures += 1
                result.failed = True
                return result
            self.failures = 0
            if outcome == "rejected":
                result.rejected += 1
            else:
                result.shipped += 1
                result.duplicates += outcome == "duplicate"
            if not keep_going():
                break
        return result

    def _post(self, spool: Spool, path: Path) -> str:
        body = json.dumps(spool.payload(path), separators=(",", ":"), allow_nan=False)
        try:
            response = self.client.post(self.url, content=body, headers=self._headers)
        except Exception as exc:
            if not _is_transport_error(exc):
                raise
            log.warning(
                "ship failed: service unreachable", batch=path.name, error=f"{type(exc).__name__}: {exc}"
            )
            return "retry"
        if response.is_success:
            duplicate = bool(_json(response).get("duplicate"))
            spool.delete(path)
            return "duplicate" if duplicate else "shipped"
        if response.status_code in REJECT_STATUSES:
            reason = f"HTTP {response.status_code}: {response.text[:2000]}"
            target = spool.quarantine(path, reason)
            log.error(
                "batch rejected by the service; quarantined", batch=path.name, to=str(target), reason=reason
            )
            if response.status_code == 409:
                log.error(
                    "batch id reused: the service stored other content under it; give every node its "
                    "own agent_id, and never delete the spool's NEXT_SEQ",
                    batch=path.name,
                )
            return "rejected"
        level = log.error if response.status_code in (401, 403) else log.warning
        level("ship failed", batch=path.name, status=response.status_code, body=response.text[:500])
        return "retry"


def _json(response: Any) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
