"""The audit log: one structured ``audit`` line per token created or revoked, per refused request
(401/403) and per call of an admin caller.

Fields: ``action`` (``token.create``, ``token.revoke``, ``refused``, ``admin.call``), ``outcome``
(``ok`` or the error code), ``caller`` (token name, JWT subject, ``anonymous``, or ``None`` when the
credential named nobody), ``caller_kind``, ``scopes``, ``path``, ``method``, ``client`` (peer
address), ``reason``; token commands add ``name`` (the token acted on). Secrets are never passed
here. (The logger masks any field whose name says ``token``, hence ``name`` and ``caller``.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.logging import get_logger

log = get_logger("gpu_ledger.audit")

EVENT = "audit"


def audit(action: str, outcome: str, *, scopes: Iterable[str] | None = None, **fields: Any) -> None:
    """Write one audit line (``scopes`` sorted, space-separated; ``None`` fields left out)."""
    if scopes is not None:
        fields["scopes"] = " ".join(sorted(scopes))
    log.info(EVENT, action=action, outcome=outcome, **{k: v for k, v in fields.items() if v is not None})
