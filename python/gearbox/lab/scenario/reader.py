"""Strict reading of TOML tables: typed getters that name the file and the field on
error, and refusal of any field that was not read.

Why our own validation and not a schema library: the rule of the house is that bad
input gets an error naming the file and the field (``demo.toml: path[0].schedule[1].
loss_rate: must be in [0, 1], got 2``), and that a misspelt field is refused, never
ignored. ``tomllib`` + dataclasses + the small ``Table`` reader below do exactly that
with the standard library; pydantic would add a dependency and its own error wording.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from gearbox.lab.scenario.vocabulary import KNOBS


class ScenarioError(ValueError):
    """A scenario that cannot run as written; the message names the file and the field."""

    def __init__(self, source: str, field_path: str, message: str) -> None:
        self.source = source
        self.field_path = field_path
        self.message = message
        where = f"{source}: {field_path}: " if field_path else f"{source}: "
        super().__init__(where + message)


MISSING = object()


class Table:
    """A TOML table being read: typed getters that name the field on error, and `done()`
    to refuse whatever was not read (unknown fields)."""

    def __init__(self, data: Any, path: str, source: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(source, path, f"must be a table, got {kind_of(data)}")
        self.data: dict[str, Any] = data
        self.path = path
        self.source = source
        self.known: list[str] = []

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, message: str) -> ScenarioError:
        return ScenarioError(self.source, self.sub(key) if key else self.path, message)

    def has(self, key: str) -> bool:
        self.known.append(key)
        return key in self.data

    def raw(self, key: str, default: Any = MISSING) -> Any:
        self.known.append(key)
        if key in self.data:
            return self.data[key]
        if default is MISSING:
            raise self.error(key, "is required")
        return default

    def str(self, key: str, default: Any = MISSING, choices: Iterable[str] | None = None) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {kind_of(v)}")
        if choices is not None and v not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def bool(self, key: str, default: Any = MISSING) -> Any:
        v = self.raw(key, default)
        if key in self.data and not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {kind_of(v)}")
        return v

    def int(self, key: str, default: Any = MISSING, lo: int | None = None, hi: int | None = None) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(key, f"must be an integer, got {kind_of(v)}")
        if lo is not None and v < lo:
            raise self.error(key, f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise self.error(key, f"must be <= {hi}, got {v}")
        return v

    def float(self, key: str, default: Any = MISSING, positive: bool = False) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        return _number(self.error, key, v, 0.0 if positive else -math.inf, math.inf, not positive)

    def strs(self, key: str, default: Any = MISSING) -> Any:
        v = self.raw(key, default)
        if key not in self.data:
            return v
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, "must be a list of strings")
        return list(v)

    def table(self, key: str) -> Table | None:
        v = self.raw(key, None)
        return None if v is None else Table(v, self.sub(key), self.source)

    def tables(self, key: str) -> list[Table]:
        v = self.raw(key, [])
        if isinstance(v, dict):
            v = [v]
        if not isinstance(v, list):
            raise self.error(key, f"must be an array of tables ([[{self.sub(key)}]]), got {kind_of(v)}")
        return [Table(x, f"{self.sub(key)}[{i}]", self.source) for i, x in enumerate(v)]

    def done(self) -> None:
        unknown = [k for k in self.data if k not in self.known]
        if unknown:
            expected = ", ".join(sorted(set(self.known)))
            raise self.error(unknown[0], f"unknown field `{unknown[0]}` (expected one of: {expected})")


def kind_of(v: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}.get(type(v), type(v).__name__)


def _number(
    err: Callable[[str, str], ScenarioError], key: str, v: Any, lo: float, hi: float, lo_inclusive: bool
) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise err(key, f"must be a number, got {kind_of(v)}")
    v = float(v)
    if not math.isfinite(v):
        raise err(key, f"must be finite, got {v}")
    if math.isfinite(lo) and math.isfinite(hi) and not (lo < v <= hi or (v == lo and lo_inclusive)):
        raise err(key, f"must be in {'[' if lo_inclusive else '('}{lo:g}, {hi:g}], got {v:g}")
    if v < lo or (v == lo and not lo_inclusive):
        raise err(key, f"must be {'>=' if lo_inclusive else '>'} {lo:g}, got {v:g}")
    if v > hi:
        raise err(key, f"must be <= {hi:g}, got {v:g}")
    return v


def check_knob(err: Callable[[str, str], ScenarioError], key: str, v: Any) -> float | int:
    """Checks one value of a path property (a grid value, a sampled range end, an override)."""
    kind, lo, hi, lo_inclusive = KNOBS[key]
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise err(key, f"must be an integer, got {kind_of(v)}")
        if v <= lo:
            raise err(key, f"must be > {lo:g}, got {v}")
        return v
    return _number(err, key, v, lo, hi, lo_inclusive)
