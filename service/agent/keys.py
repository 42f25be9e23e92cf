"""Checks of the agent's TOML tables, key by key, with pydantic's rules and messages, without pydantic.

The agent runs on every GPU node under a 60 MB memory budget (issue 13); pydantic (its Rust core,
its modules and the schemas it builds per model) was ~20 MB of the agent's 65 MB on the H200. The
agent's config has a dozen keys of six kinds, so it checks them here: the same coercions as
pydantic's lax mode for the values TOML can hold (``"5"`` and ``true`` are numbers, ``9400.0`` is
an integer, ``"yes"`` a boolean, no number is a string) and the same bounds, in the same order,
with the same messages, so ``key "period_s": Input should be greater than 0`` reads as before.
tests/agent/test_agent_config_parity.py holds every key of every table to its pydantic model
(the service's ``NvmlConfig`` and ``MappingRule``, the agent's former ``AgentSettings``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["str", "float", "int", "bool", "path", "dict", "str_dict", "list", "literal"]
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}
_I64 = 2**63
_DECIMAL_ZEROS = re.compile(r"(.*\d)\.0+")


class Missing:
    """No default: the key is required."""


REQUIRED = Missing()


@dataclass(frozen=True)
class Key:
    """One key of a table: its kind, default (``factory`` for one computed when missing), bounds."""

    kind: Kind
    default: Any = REQUIRED
    factory: Callable[[], Any] | None = None
    gt: int | float | None = None
    ge: int | float | None = None
    le: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    choices: tuple[str, ...] = ()

    def missing(self) -> Any:
        if self.factory is not None:
            return self.factory()
        return self.default


class Secret:
    """A secret string: masked in repr and in the agent's log lines, like pydantic's ``SecretStr``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "SecretStr('**********')" if self._value else "SecretStr('')"

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Problem(ValueError):
    """One value that does not pass: pydantic's message for it."""


def _plural(n: int) -> str:
    return f"{n} character" if n == 1 else f"{n} characters"


def _bounds(key: Key, value: float) -> float:
    # pydantic-core checks le, lt, ge, gt in this order (NaN fails the first one given).
    if key.le is not None and not value <= key.le:
        raise Problem(f"Input should be less than or equal to {key.le}")
    if key.ge is not None and not value >= key.ge:
        raise Problem(f"Input should be greater than or equal to {key.ge}")
    if key.gt is not None and not value > key.gt:
        raise Problem(f"Input should be greater than {key.gt}")
    return value


def _number_text(value: str) -> str | None:
    text = value.strip()
    return text if text.isascii() and text else None


def as_float(key: Key, value: Any) -> float:
    if isinstance(value, bool | int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(_number_text(value) or "-")
        except ValueError:
            raise Problem("Input should be a valid number, unable to parse string as a number") from None
    else:
        raise Problem("Input should be a valid number")
    return _bounds(key, number)


def as_int(key: Key, value: Any) -> int:
    if isinstance(value, bool | int):
        number = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise Problem("Input should be a finite number")
        if value != int(value):
            raise Problem("Input should be a valid integer, got a number with a fractional part")
        if abs(value) >= _I64:
            raise Problem("Unable to parse input string as an integer, exceeded maximum size")
        number = int(value)
    elif isinstance(value, str):
        text = _number_text(value) or "-"
        if whole := _DECIMAL_ZEROS.fullmatch(text):  # "5.00" is 5, as pydantic reads it
            text = whole.group(1)
        try:
            number = int(text)
        except ValueError:
            raise Problem("Input should be a valid integer, unable to parse string as an integer") from None
    else:
        raise Problem("Input should be a valid integer")
    return int(_bounds(key, number))


def as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    integral = isinstance(value, float) and value.is_integer() and abs(value) < _I64  # read as an int
    if isinstance(value, int | str) or integral:
        raise Problem("Input should be a valid boolean, unable to interpret input")
    raise Problem("Input should be a valid boolean")


def as_str(key: Key, value: Any) -> str:
    if not isinstance(value, str):
        raise Problem("Input should be a valid string")
    if key.min_length is not None and len(value) < key.min_length:
        raise Problem(f"String should have at least {_plural(key.min_length)}")
    if key.max_length is not None and len(value) > key.max_length:
        raise Problem(f"String should have at most {_plural(key.max_length)}")
    if key.pattern is not None and re.search(key.pattern, value) is None:
        raise Problem(f"String should match pattern '{key.pattern}'")
    return value


def as_literal(key: Key, value: Any) -> str:
    if value not in key.choices or not isinstance(value, str):
        *head, last = (repr(c) for c in key.choices)
        raise Problem(f"Input should be {', '.join(head)} or {last}" if head else f"Input should be {last}")
    return value


def check_value(key: Key, value: Any, where: str) -> tuple[Any, list[tuple[str, str]]]:
    """``(value as the field holds it, [(key, message), …])`` for one given value."""
    try:
        if value is None and key.default is None:  # an optional key set to None (not from TOML)
            return None, []
        if key.kind == "float":
            return as_float(key, value), []
        if key.kind == "int":
            return as_int(key, value), []
        if key.kind == "bool":
            return as_bool(value), []
        if key.kind == "str":
            return (value if isinstance(value, Secret) else as_str(key, value)), []
        if key.kind == "literal":
            return as_literal(key, value), []
        if key.kind == "path":
            if isinstance(value, Path):
                return value, []
            if not isinstance(value, str):
                raise Problem("Input is not a valid path for <class 'pathlib.Path'>")
            return Path(value), []
        if key.kind in ("dict", "str_dict"):
            if not isinstance(value, Mapping):
                raise Problem("Input should be a valid dictionary")
            if key.kind == "dict":
                return dict(value), []
            not_text = [k for k, v in value.items() if not isinstance(v, str)]
            return dict(value), [(f"{where}.{k}", "Input should be a valid string") for k in not_text]
        if key.kind == "list":
            if not isinstance(value, list | tuple):
                raise Problem("Input should be a valid list")
            return list(value), []
    except Problem as exc:
        return None, [(where, str(exc))]
    raise AssertionError(key.kind)


def check_table(
    table: Mapping[str, Any], keys: Mapping[str, Key], prefix: str = ""
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Every key of ``keys`` from ``table`` (defaults for the missing ones) and the problems, in
    pydantic's order: the keys as declared, then the unknown ones as written."""
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for name, key in keys.items():
        if name not in table:
            if isinstance(key.default, Missing) and key.factory is None:
                problems.append((prefix + name, "Field required"))
            else:
                values[name] = key.missing()
            continue
        values[name], bad = check_value(key, table[name], prefix + name)
        problems += bad
    problems += [(prefix + str(name), "unknown key") for name in table if name not in keys]
    return values, problems


def describe(problems: list[tuple[str, str]]) -> str:
    """``key "a.b": message; …`` as the service's config errors read."""
    return "; ".join(f'key "{k}": {m}' for k, m in problems)
