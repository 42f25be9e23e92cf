"""One evaluation of every alert rule: conditions → state and outbox (one transaction) → delivery.

Run after each ingest by the scheduler (:meth:`AlertEngine.after_run`); it never raises into the
ingest: a rule whose figures cannot be computed (an FX rate missing) is skipped with its error
(its alerts keep their state); a failed send stays in the outbox (service/alerts/outbox.py) and is
retried by a later evaluation, its state shown on the history row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from service.alerts import outbox, store
from service.alerts.conditions import Finding, find
from service.alerts.delivery import deliver
from service.alerts.rules import AlertChannel, AlertRule
from service.analytics.errors import QueryError
from service.ledger import version as ledger_version
from service.logging import get_logger
from service.notify.email import SmtpSettings, send_email
from service.notify.webhook import post_json
from service.timeutil import UTC

if TYPE_CHECKING:
    from service.settings import Settings

log = get_logger(__name__)


def utc_now() -> dt.datetime:
    return dt.datetime.now(UTC)


@dataclass(frozen=True)
class AlertConfig:
    """The rules, their channels and the SMTP relay: ``[[alerts]]``, ``[[alert_channels]]``, ``[smtp]``."""

    rules: tuple[AlertRule, ...] = ()
    channels: tuple[AlertChannel, ...] = ()
    smtp: SmtpSettings | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertConfig:
        return cls(tuple(settings.alerts), tuple(settings.alert_channels), settings.smtp)


@dataclass
class Evaluation:
    """What one evaluation did."""

    at: dt.datetime
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    announced: list[store.Announcement] = field(default_factory=list)
    deliveries: list[outbox.Outcome] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class AlertEngine:
    """Evaluates ``config``'s rules over ``engine``'s ledger; ``post`` and ``mail`` send (tests may
    pass their own), ``clock`` gives now."""

    def __init__(
        self,
        engine: Engine,
        config: AlertConfig,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        post: Callable[..., object] = post_json,
        mail: Callable[..., None] = send_email,
    ) -> None:
        self.engine, self.config, self.clock = engine, config, clock
        self.post, self.mail = post, mail
        self.channels: dict[str, AlertChannel] = {c.name: c for c in config.channels}
        self.give_up_after = {c.name: dt.timedelta(hours=c.give_up_after_h) for c in config.channels}
        self.channels_of: dict[str, Sequence[str]] = {r.name: tuple(r.channels) for r in config.rules}
        self.infos = [
            store.RuleInfo(r.name, r.kind, dt.timedelta(hours=r.min_interval_h))
            for r in config.rules
            if r.enabled
        ]

    def evaluate(self, now: dt.datetime | None = None) -> Evaluation:
        """Evaluate every enabled rule at ``now`` (default: the clock), then send what is due: this
        evaluation's announcements and the earlier ones still in the outbox."""
        result = Evaluation(at=now or self.clock())
        with self.engine.begin() as conn:
            store.take_turn(conn, result.at)  # first: evaluators of other processes wait here
            for rule in self.config.rules:
                if not rule.enabled:
                    continue
                try:
                    result.findings[rule.name] = find(conn, rule, result.at)
                except QueryError as exc:  # e.g. MISSING_FX_RATE: this rule's alerts keep their state
                    result.errors[rule.name] = str(exc)
                    log.warning("alert rule not evaluated", rule=rule.name, error=str(exc))
            result.announced = store.apply(conn, self.infos, result.findings, result.at)
            outbox.enqueue(conn, result.announced, self.channels_of, result.at)
            # this and earlier evaluations' due sends
            sends = outbox.claim(conn, result.at, self.give_up_after)
            ledger_version.bump(conn)  # last: the `alerts` answer changed
        if sends:
            result.deliveries = deliver(
                sends, self.channels, self.config.smtp, post=self.post, mail=self.mail
            )
            with self.engine.begin() as conn:
                outbox.settle(conn, result.deliveries, result.at, self.give_up_after)
                ledger_version.bump(conn)
        return result

    def after_run(self, now: dt.datetime | None = None) -> None:
        """The scheduler's hook after each connector run: evaluate, log, never raise."""
        try:
            result = self.evaluate(now)
        except Exception:  # noqa: BLE001  (alerts must never break ingestion)
            log.error("alert evaluation failed", exc_info=True)
            return
        if result.announced:
            log.info(
                "alerts announced",
                announced=len(result.announced),
                firing=sum(a.state == store.FIRING for a in result.announced),
            )


def alert_hook(engine: Engine, settings: Settings) -> Callable[[dt.datetime], None] | None:
    """The scheduler's ``after_run`` for ``settings``' rules (None: no rule configured)."""
    if not settings.alerts:
        return None
    return AlertEngine(engine, AlertConfig.from_settings(settings)).after_run
