"""The agent's loop: sample every ``period_s``, seal a batch every ``ship_every_s``, ship spooled
batches in order, back off when the service is away — on one thread and one clock.

One thread on purpose: the clock and the sleep are constructor parameters, so a test runs hours of
agent time in a second, and kills and restarts the service at exact agent times. Shipping never
starves sampling: after each POST the shipper stops when the next tick is due; a POST that hangs
delays one tick by at most ``request_timeout_s`` (the reading keeps its true timestamp).
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable

from service.agent.config import AgentSettings
from service.agent.exporter import DcgmExporter
from service.agent.log import get_logger
from service.agent.sampler import Sampler
from service.agent.ship import Shipper
from service.agent.spool import Spool
from service.timeutil import to_ms

log = get_logger(__name__)
Clock = Callable[[], dt.datetime]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Agent:
    """Samples, spools, ships and exports for one node (see the module docstring).

    ``sleep(seconds)`` waits (default: until ``stop`` is set or the time is up); ``clock`` is now.
    """

    def __init__(
        self,
        settings: AgentSettings,
        *,
        sampler: Sampler,
        spool: Spool,
        shipper: Shipper,
        exporter: DcgmExporter | None = None,
        clock: Clock = _utc_now,
        sleep: Callable[[float], object] | None = None,
    ):
        self.settings, self.sampler, self.spool, self.shipper = settings, sampler, spool, shipper
        self.exporter, self.clock = exporter, clock
        self.stop_event = threading.Event()
        self._sleep = sleep or self.stop_event.wait
        self.ticks = self.tick_errors = 0

    def _now_s(self) -> float:
        return to_ms(self.clock()) / 1000

    def tick(self) -> None:
        """One reading of every device: spooled (durably) first, then exported."""
        try:
            batch = self.sampler.sample()
        except Exception:  # noqa: BLE001  (a failed reading must not stop the node's accounting)
            self.tick_errors += 1
            log.warning("sampling failed; trying again next period", exc_info=True)
            return
        self.spool.append(batch)
        self.ticks += 1
        if self.exporter is not None:
            self.exporter.update(batch)

    def run(self, until: dt.datetime | None = None) -> None:
        """Run until ``stop_event`` is set (or the clock reaches ``until``), then seal the open
        batch and try once to ship what is spooled; anything unsent waits for the next start."""
        period, every = self.settings.period_s, self.settings.ship_every_s
        end_s = math.inf if until is None else to_ms(until) / 1000
        next_sample = self._now_s()
        next_seal = next_sample + every
        next_ship = next_sample  # batches left by the previous run go first
        while not self.stop_event.is_set():
            now = self._now_s()
            if now >= end_s:
                break
            if now >= next_sample:
                self.tick()
                next_sample += period * (math.floor((now - next_sample) / period) + 1)  # skip missed
            if now >= next_seal:
                self.spool.seal()
                next_seal += every * (math.floor((now - next_seal) / every) + 1)
                if self.shipper.failures == 0:  # backing off: a new batch doesn't cut the wait short
                    next_ship = min(next_ship, now)
            if now >= next_ship:
                next_ship = self._ship(next_sample, next_seal)
            wake = min(next_sample, next_seal, next_ship, end_s)
            delay = wake - self._now_s()
            if delay > 0:
                self._sleep(delay)
        self.spool.seal()
        self.shipper.ship(self.spool)

    def _ship(self, next_sample: float, next_seal: float) -> float:
        """Ship until done, failed, or the next tick is due; when to try next."""
        if not self.spool.pending():
            return math.inf
        result = self.shipper.ship(self.spool, keep_going=lambda: self._now_s() < next_sample)
        if result.failed:
            delay = self.shipper.next_delay_s()
            log.info("service unavailable; batches stay spooled", retry_in_s=round(delay, 1),
                     pending=len(self.spool.pending()))  # fmt: skip
            return self._now_s() + delay
        return next_sample if self.spool.pending() else math.inf
