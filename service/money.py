"""Money: exact decimals in code, exact storage in every database we support.

PostgreSQL stores money as NUMERIC(24, 9). SQLite has no decimal type (its NUMERIC affinity turns
4.1 into a binary float), so there the same column holds an integer number of nano-units, which
SQLite sums exactly. Either way Python only ever sees ``Decimal`` quantized to 1e-9.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from sqlalchemy import BigInteger, Numeric
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

NANO = Decimal("0.000000001")
NANOS_PER_UNIT = 1_000_000_000


def quantize(amount: Decimal | int | float | str) -> Decimal:
    """An amount rounded half-even to the 1e-9 quantum the ledger keeps."""
    if isinstance(amount, float):
        amount = repr(amount)
    return Decimal(amount).quantize(NANO, rounding=ROUND_HALF_EVEN)


def to_nanos(amount: Decimal) -> int:
    return int(quantize(amount).scaleb(9))


def from_nanos(nanos: int) -> Decimal:
    return (Decimal(int(nanos)) * NANO).quantize(NANO)


class ExactDecimal(TypeDecorator[Decimal]):
    """An exact decimal column with ``scale`` decimal places: NUMERIC(24, scale) on PostgreSQL,
    an integer count of 10^-scale units on SQLite (which would otherwise store a binary float)."""

    impl = Numeric(24, 9, asdecimal=True)
    cache_ok = True

    def __init__(self, scale: int = 9) -> None:
        super().__init__()
        self.scale = scale
        self.quantum = Decimal(1).scaleb(-scale)

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(24, self.scale, asdecimal=True))

    def _exact(self, value: Any) -> Decimal:
        if isinstance(value, float):
            value = repr(value)
        return Decimal(value).quantize(self.quantum, rounding=ROUND_HALF_EVEN)

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        exact = self._exact(value)
        return int(exact.scaleb(self.scale)) if dialect.name == "sqlite" else exact

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        # Aggregates such as SUM(cost * ratio) come back as floats; they are rounded to the quantum.
        if value is None:
            return None
        if dialect.name == "sqlite":
            units = round(value) if isinstance(value, float) else int(value)
            return (Decimal(units) * self.quantum).quantize(self.quantum)
        return self._exact(value)


class Money(ExactDecimal):
    """A money amount column: exact to 1e-9 (see ExactDecimal)."""

    cache_ok = True

    def __init__(self) -> None:
        super().__init__(scale=9)


class Quantity(ExactDecimal):
    """A usage quantity (hours, GPU-hours), exact to 1e-9 on every database."""

    cache_ok = True

    def __init__(self) -> None:
        super().__init__(scale=9)


class FxRateType(ExactDecimal):
    """An exchange rate, exact to 1e-12 on every database."""

    cache_ok = True

    def __init__(self) -> None:
        super().__init__(scale=12)


def allocate(total: Decimal, weights: Sequence[Decimal | float | int]) -> list[Decimal]:
    """Split ``total`` over ``weights`` in 1e-9 quanta so the parts add up to ``total`` exactly.

    Largest-remainder method: each part gets its floor share, the leftover quanta go to the
    largest remainders. All-zero weights split evenly.
    """
    if not weights:
        return []
    total_nanos = to_nanos(total)
    exact = [Decimal(str(w)) if isinstance(w, float) else Decimal(w) for w in weights]
    if any(w < 0 for w in exact):
        raise ValueError("weights must not be negative")
    weight_sum = sum(exact, Decimal(0))
    if weight_sum == 0:
        exact = [Decimal(1)] * len(weights)
        weight_sum = Decimal(len(weights))
    shares = [Decimal(total_nanos) * w / weight_sum for w in exact]
    floors = [int(s.to_integral_value(rounding="ROUND_FLOOR")) for s in shares]
    leftover = total_nanos - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (shares[i] - floors[i], -i), reverse=True)
    for i in order[: abs(leftover)]:
        floors[i] += 1 if leftover > 0 else -1
    return [from_nanos(n) for n in floors]
