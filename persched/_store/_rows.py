"""Stored rows read defensively: a hand-edited value is reported on its own row.

One value SQLAlchemy cannot convert would fail a whole query (every job of a
listing, every claim of a batch). So the driver's raw values are selected
(`raw_columns`) and `read_row` converts them one by one, replacing what it
cannot read by a placeholder named in `StoredRow.problems`: the caller decides
for that row alone. The row itself is never changed here.
"""

from __future__ import annotations

import functools
import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from sqlalchemy import BigInteger, Boolean, Float, Integer, String, type_coerce
from sqlalchemy.types import NullType

from .schema import UTCDateTime

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from sqlalchemy import Column, ColumnElement, Table

__all__ = ["StoredRow", "raw_columns", "read_row", "read_rows"]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the placeholder of an unreadable instant


class _Unreadable(Exception):
    """One value that cannot be read; the message says why."""


class StoredRow:
    """A row's values as the column types give them, placeholders for the unreadable; `problems` says why.

    The values are the instance's ``__dict__``, so a column is a plain attribute, not a ``__getattr__`` call.
    """

    __slots__ = ("__dict__", "problems")

    def __init__(self, values: dict[str, Any], problems: dict[str, str]) -> None:
        self.__dict__ = values
        self.problems = problems

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - a column's value, as on a SQLAlchemy Row
        raise AttributeError(name)  # reached only for a name that is not a column of the row

    @property
    def value_of(self) -> Callable[[str], Any]:
        """A column's value by name (a C-level lookup), for the mappers over `persched._model.models.OPTIONS`."""
        return self.__dict__.__getitem__

    def get(self, name: str) -> Any:  # noqa: ANN401 - a column's value, as on a SQLAlchemy Row
        """A column's value, or None when the row was selected without that column (the claims' narrower set)."""
        return self.__dict__.get(name)

    def describe(self) -> str:
        """The problems in one line: ``"next_run_at: 'x' is not ...; generation: ..."``."""
        return "; ".join(f"{column}: {reason}" for column, reason in self.problems.items())


def raw_columns(columns: Iterable[Column[Any]]) -> list[ColumnElement[Any]]:
    """`columns`, selected without SQLAlchemy's conversion (the driver's values, for `read_row`)."""
    return [type_coerce(column, NullType()).label(column.name) for column in columns]


def read_row(columns: Iterable[Column[Any]], raw: Mapping[Any, Any]) -> StoredRow:
    """Convert the raw values of `columns` (a row selected with `raw_columns`)."""
    readers = _readers(tuple(columns))
    return readers.read([raw[name] for name in readers.names], {})


def read_rows(
    columns: Iterable[Column[Any]], rows: Iterable[Sequence[Any]], instants: dict[Any, datetime] | None = None
) -> list[StoredRow]:
    """`read_row` of each of `rows`, by position (selected with `raw_columns(columns)`, in that order).

    `instants`: the instants read so far, by raw value, for callers that read rows one call at a time.
    """
    read = _readers(tuple(columns)).read
    known: dict[Any, datetime] = {} if instants is None else instants
    return [read(raw, known) for raw in rows]


class _Plan(NamedTuple):
    """What a row of some types of values needs: the positions of its instants, and its other values' readers."""

    instants: tuple[int, ...]
    others: tuple[tuple[int, Callable[[object], Any]], ...]


_PLANS_KEPT: Final = 1_024  # kinds of rows (their values' types) whose plan is kept, per column list
_INSTANTS_KEPT: Final = 65_536  # instants a read keeps by raw value (a few MiB): rows of all different ones pass by


class _Readers:
    """How the rows of one column list are read.

    For each tuple of value types met, a `_Plan` says which values need their reader; the rest are
    what their column gives already. A reader that refuses a value sends the row the careful way
    (`_stored`), which names every problem.
    """

    __slots__ = ("_plans", "columns", "names")

    def __init__(self, columns: tuple[Column[Any], ...]) -> None:
        self.columns = tuple((column, column.name, _reader(column)) for column in columns)
        self.names = tuple(column.name for column in columns)
        self._plans: dict[tuple[type, ...], _Plan] = {}

    def read(self, raw: Sequence[Any], instants: dict[Any, datetime]) -> StoredRow:
        """One row's values, read (`_stored`); `instants`: those read before, by raw value."""
        kinds = tuple(map(type, raw))
        plan = self._plans.get(kinds)
        if plan is None:
            plan = self._plan(kinds)
            if len(self._plans) < _PLANS_KEPT:
                self._plans[kinds] = plan
        values = list(raw)
        try:
            for i in plan.instants:
                value = values[i]
                found = instants.get(value)
                if found is None:
                    found = _instant(value)
                    if len(instants) < _INSTANTS_KEPT:
                        instants[value] = found
                values[i] = found
            for i, reader in plan.others:
                values[i] = reader(values[i])
        except _Unreadable:
            return _stored(self.columns, raw)
        return StoredRow(dict(zip(self.names, values, strict=True)), {})

    def _plan(self, kinds: tuple[type, ...]) -> _Plan:
        """What a row of these `kinds` of values needs (the values not named are returned as they are)."""
        needed = [
            (i, column, reader)
            for i, ((column, _, reader), kind) in enumerate(zip(self.columns, kinds, strict=True))
            if not _as_it_is(column, kind)
        ]
        # An instant as the drivers give it (text, a datetime) is read through the lookup; anything else
        # (a NULL, a number written by hand) is the reader's to refuse.
        instants = tuple(i for i, column, _ in needed if _holds_instants(column) and kinds[i] in (str, datetime))
        others = tuple((i, reader) for i, _, reader in needed if i not in instants)
        return _Plan(instants, others)


def _holds_instants(column: Column[Any]) -> bool:
    """True if `column` holds instants (`UTCDateTime`)."""
    return isinstance(column.type, UTCDateTime)


def _as_it_is(column: Column[Any], kind: type) -> bool:
    """True if every value of type `kind` is what `column`'s reader would return for it, unchanged."""
    if kind is type(None):
        return bool(column.nullable)
    column_type = column.type
    if isinstance(column_type, UTCDateTime):
        return False
    if isinstance(column_type, Boolean):
        return kind is bool
    if isinstance(column_type, (Integer, BigInteger)):
        return kind is int
    if isinstance(column_type, Float):
        return False  # a float must be finite, an int becomes a float
    return isinstance(column_type, String) and kind is str


def _stored(readers: Sequence[tuple[Column[Any], str, Any]], raw: Sequence[Any]) -> StoredRow:
    """One row's values read by `readers`, in order; a value that cannot be read is a problem."""
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for (column, name, reader), value in zip(readers, raw, strict=True):
        if value is None:
            values[name] = None
            if not column.nullable:
                problems[name] = "is NULL"
                values[name] = _placeholder(column)
            continue
        try:
            values[name] = reader(value)
        except _Unreadable as exc:
            problems[name] = str(exc)
            values[name] = _placeholder(column)
    return StoredRow(values, problems)


@functools.cache
def _readers(columns: tuple[Column[Any], ...]) -> _Readers:
    """How rows of `columns` are read, made once per column list (the claims read rows by the hundred)."""
    return _Readers(columns)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _instant(value: object) -> datetime:
    if isinstance(value, datetime):  # PostgreSQL's timestamptz (aware)
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    if isinstance(value, str):  # SQLite: naive UTC text, compared as text by the claims
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise _Unreadable(f"{_shown(value)} is not a timestamp (naive UTC 'YYYY-MM-DD HH:MM:SS.ffffff')") from None
        if parsed.tzinfo is not None:
            # SQL compares these as text: an offset would sort it at the wrong instant.
            raise _Unreadable(f"{_shown(value)} has a UTC offset; write naive UTC 'YYYY-MM-DD HH:MM:SS.ffffff'")
        return parsed.replace(tzinfo=timezone.utc)
    raise _Unreadable(f"{_shown(value)} is not a timestamp")


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Unreadable(f"{_shown(value)} is not a whole number")
    return value


def _real(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Unreadable(f"{_shown(value)} is not a number")
    if not math.isfinite(value):
        raise _Unreadable(f"{_shown(value)} is not a finite number")
    return float(value)


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):  # SQLite keeps booleans as 0 / 1
        return bool(value)
    raise _Unreadable(f"{_shown(value)} is not a boolean (0 or 1)")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Unreadable(f"{_shown(value)} is not text")
    return value


def _reader(column: Column[Any]) -> Callable[[object], Any]:
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return _instant
    if isinstance(kind, Boolean):
        return _flag
    if isinstance(kind, (Integer, BigInteger)):
        return _integer
    if isinstance(kind, Float):
        return _real
    if isinstance(kind, String):  # Text too
        return _text
    raise TypeError(f"no reader for column {column.name} of type {kind!r}")  # pragma: no cover - a schema change


def _placeholder(column: Column[Any]) -> Any:  # noqa: ANN401 - a value of the column's type
    if column.nullable:
        return None
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return EPOCH
    if isinstance(kind, Boolean):
        return False
    if isinstance(kind, (Integer, BigInteger)):
        return 0
    if isinstance(kind, Float):
        return 0.0
    return ""


def readable(table: Table, names: Iterable[str] | None = None) -> tuple[list[Column[Any]], list[ColumnElement[Any]]]:
    """The columns of `table` (all, or `names`) and their raw selection, for `read_row`."""
    columns = list(table.c) if names is None else [table.c[name] for name in names]
    return columns, raw_columns(columns)
