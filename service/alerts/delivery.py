"""Announcements to channels: the generic JSON document, the Slack message, the e-mail.

A failed send is returned as such (the outbox retries it at a later evaluation and shows it on the
history row), logged without the URL, and never raised into the ingest that triggered the
evaluation. Within one evaluation a channel that failed (after its own quick retries) is not tried
again, and sending stops after :data:`BUDGET_S` seconds: a receiver that is down must not hold up
the connector's next run for long. What was not tried stays in the outbox.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from service.alerts.outbox import Outcome, Send
from service.alerts.rules import AlertChannel, EmailChannel
from service.alerts.store import FIRING, Announcement
from service.logging import get_logger
from service.notify import NotifyError
from service.notify.email import SmtpSettings, send_email
from service.notify.webhook import post_json, safe_target

log = get_logger(__name__)

BUDGET_S = 120.0
SCHEMA_VERSION = 1


def decimal_text(value: Any) -> str | None:
    """``Decimal`` as plain text without trailing zeros ("3", "2.5", "1200"): the same in every
    channel and in the API, whether the value was just computed or read back from a column."""
    return None if value is None else format(value.normalize(), "f")


def document(a: Announcement) -> dict[str, Any]:
    """The generic webhook document (docs/alerts.md): numbers as decimal strings, times ISO 8601 UTC."""
    return {
        "version": SCHEMA_VERSION,
        "source": "gpu-ledger",
        "rule": a.rule,
        "kind": a.kind,
        "state": a.state,
        "subjectKey": a.subject_key,
        "subject": a.subject,
        "project": a.project,
        "team": a.team,
        "value": decimal_text(a.value),
        "unit": a.unit,
        "threshold": decimal_text(a.threshold),
        "message": a.message,
        "since": a.since.isoformat(),
        "at": a.at.isoformat(),
    }


def headline(a: Announcement) -> str:
    return f"[{a.state}] {a.rule}: {a.subject}"


def slack_message(a: Announcement) -> dict[str, Any]:
    """A Slack incoming-webhook message: ``text`` (notifications, fallbacks) and one section block."""
    icon = ":red_circle:" if a.state == FIRING else ":white_check_mark:"
    text = f"{icon} {headline(a)}\n{a.message}"
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}]}


def email_text(a: Announcement) -> str:
    lines = [a.message, "", f"rule: {a.rule} ({a.kind})", f"state: {a.state} since {a.since.isoformat()}"]
    if a.value is not None:
        threshold = decimal_text(a.threshold)
        lines.append(f"value: {decimal_text(a.value)} {a.unit} (threshold {threshold} {a.unit})")
    if a.project or a.team:
        lines.append(f"project: {a.project or '-'}, team: {a.team or '-'}")
    return "\n".join(lines) + "\n"


def deliver(
    sends: Sequence[Send],
    channels: Mapping[str, AlertChannel],
    smtp: SmtpSettings | None,
    *,
    post: Callable[..., object] = post_json,
    mail: Callable[..., None] = send_email,
    clock: Callable[[], float] = time.monotonic,
) -> list[Outcome]:
    """Send each claimed row (service/alerts/outbox.py) to its channel, in order; how each went."""
    deadline = clock() + BUDGET_S
    down: dict[str, str] = {}
    outcomes = []
    for send in sends:
        a, name = send.announcement, send.channel
        if name in down:
            outcomes.append(Outcome(a.event_id, name, sent=False, tried=False, error=down[name]))
            continue
        if clock() > deadline:
            outcomes.append(Outcome(a.event_id, name, sent=False, tried=False))
            continue
        channel = channels[name]
        try:
            if isinstance(channel, EmailChannel):
                if smtp is None:  # refused by the config check; kept for a config built in code
                    raise NotifyError("no [smtp] table")
                mail(smtp, list(channel.to), headline(a), email_text(a))
            else:
                doc = slack_message(a) if channel.type == "slack" else document(a)
                post(
                    channel.url.get_secret_value(), doc, timeout_s=channel.timeout_s, retries=channel.retries
                )
        except NotifyError as exc:
            down[name] = str(exc)
            outcomes.append(Outcome(a.event_id, name, sent=False, error=str(exc)))
            target = "" if isinstance(channel, EmailChannel) else safe_target(channel.url.get_secret_value())
            log.warning("alert delivery failed", channel=name, target=target, error=str(exc))
        else:
            outcomes.append(Outcome(a.event_id, name, sent=True))
    return outcomes
