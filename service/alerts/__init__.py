"""Alerts: rules over the ledger evaluated after each ingest (docs/alerts.md).

* :mod:`service.alerts.rules` — the ``[[alerts]]`` and ``[[alert_channels]]`` config tables;
* :mod:`service.alerts.conditions` — what each rule kind finds, in SQL over the ledger;
* :mod:`service.alerts.store` — FIRING/RESOLVED state per (rule, subject), de-duplication, the
  minimum interval between announcements, history;
* :mod:`service.alerts.delivery` — messages to webhooks (JSON, Slack) and e-mail;
* :mod:`service.alerts.engine` — one evaluation: conditions → state → delivery.
"""
