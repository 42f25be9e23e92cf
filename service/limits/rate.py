"""Per-caller request rate: a token bucket per caller, in this process's memory.

Each caller may send ``burst`` requests at once, then ``per_minute`` a minute. The buckets live in
one process: N replicas behind a load balancer give a caller N times the rate. Buckets that have
refilled completely carry no information and are dropped once there are many, so a scanner with
many addresses cannot grow the table without bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: Above this many buckets, full ones are forgotten (they would allow a burst anyway).
PRUNE_AT = 10_000


@dataclass
class _Bucket:
    tokens: float
    at_s: float


class RateLimiter:
    """``take(caller)`` → 0.0 when the request may go ahead, else seconds until it may.

    Called from the event loop only (no lock needed). ``per_minute == 0`` disables it.
    """

    def __init__(self, per_minute: int, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute, self.burst, self.clock = per_minute, burst, clock
        self.rate_per_s = per_minute / 60.0
        self._buckets: dict[str, _Bucket] = {}

    def take(self, caller: str) -> float:
        if self.per_minute == 0:
            return 0.0
        now = self.clock()
        bucket = self._buckets.get(caller)
        if bucket is None:
            if len(self._buckets) >= PRUNE_AT:
                self._prune(now)
            bucket = self._buckets[caller] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at_s) * self.rate_per_s)
        bucket.at_s = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate_per_s

    def _prune(self, now: float) -> None:
        full = [
            k for k, b in self._buckets.items() if b.tokens + (now - b.at_s) * self.rate_per_s >= self.burst
        ]
        for key in full:
            del self._buckets[key]
