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


class Money(TypeDecorator[Decimal]):
    """A money amount column: NUMERIC(24, 9) on PostgreSQL, integer nano-units on SQLite."""

    impl = Numeric(24, 9, asdecimal=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(24, 9, asdecimal=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return to_nanos(Decimal(value) if not isinstance(value, float) else quantize(value))
        return quantize(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        # Aggregates such as SUM(cost * ratio) come back as floats; they are rounded to the quantum.
        if value is None:
            return None
        if dialect.name == "sqlite":
            return from_nanos(round(value)) if isinstance(value, float) else from_nanos(value)
        return quantize(value)


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
