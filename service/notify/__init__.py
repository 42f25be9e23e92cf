"""Outbound notifications: e-mail over SMTP (:mod:`service.notify.email`) and HTTP webhooks
(:mod:`service.notify.webhook`). Senders know nothing of alerts or reports: they take a message
and its destination and either deliver it or raise a :class:`NotifyError` whose text is safe to
log (no password, no webhook URL)."""

from __future__ import annotations


class NotifyError(RuntimeError):
    """A notification could not be delivered; the message names the destination's host, never a
    secret (SMTP password, webhook URL path or query, which often carry a token)."""
