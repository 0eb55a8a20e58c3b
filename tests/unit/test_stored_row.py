"""Stored rows read defensively (`persched._store._rows`).

`StoredRow.get`: a column the select left out reads as None; attribute access still refuses it.
`read_rows` reads a row by the types of its values (a plan per kind of row) and an instant once per raw
value: whatever a hand edit left in a column, it gives what the careful way, value by value, gives;
and a row's JSON reads as ``json.loads`` reads it.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from typing import Any, Final

import pytest

from persched._store import _rows as rows_module
from persched._store._rows import StoredRow, _readers, _stored, read_rows
from persched._store.mappers import JOB_COLUMNS, OWN_JOB_COLUMNS, _json_loads

PARIS: Final = timezone(timedelta(hours=1))
# Values a driver may return for a column of each kind, a hand edit included.
ODD_VALUES: Final[tuple[object, ...]] = (
    None,
    "garbage",
    "",
    "2026-03-01 04:05:06.123456",
    "2026-03-01 04:05:06",
    "2026-03-01 04:05:06.123456+02:00",
    "2026-03-01",
    datetime(2026, 3, 1, 4, 5, 6, 123456),
    datetime(2026, 3, 1, 4, 5, 6, 123456, tzinfo=timezone.utc),
    datetime(2026, 3, 1, 5, 5, 6, 123456, tzinfo=PARIS),
    0,
    1,
    2,
    -7,
    True,
    False,
    0.0,
    60.5,
    1.0,
    math.inf,
    math.nan,
    b"bytes",
)


def a_row() -> list[Any]:
    """A raw row of `JOB_COLUMNS` as SQLite returns one persched wrote."""
    values: dict[str, Any] = {column.name: None for column in JOB_COLUMNS}
    values.update(
        job_id="j",
        target="tests.support.jobs:record",
        args="[1]",
        kwargs="{}",
        interval_seconds=60.0,
        timezone="UTC",
        recurrence="fixed_rate",
        misfire="coalesce",
        grace_seconds=1.0,
        overlap="forbid",
        jitter_seconds=0.0,
        on_overrun="warn",
        executor="thread",
        stop_grace_seconds=5.0,
        retries=0,
        retry_delay_seconds=10.0,
        retry_backoff=2.0,
        retry_lost=0,
        first_run_at="2026-03-01 04:05:06.123456",
        next_run_at="2026-03-01 04:06:06.123456",
        paused=0,
        generation=1,
        state="scheduled",
        run_count=0,
        error_count=0,
        failure_streak=0,
        created_at="2026-03-01 04:05:06.123456",
        updated_at="2026-03-01 04:05:06.123456",
        change_seq=3,
        namespace="default",
        declared=1,
    )
    return [values[column.name] for column in JOB_COLUMNS]


def careful(raw: list[Any]) -> StoredRow:
    """The row read value by value, as before any plan."""
    return _stored(_readers(tuple(JOB_COLUMNS)).columns, raw)


def typed(row: StoredRow) -> tuple[list[tuple[str, type, str]], dict[str, str]]:
    """A read row's values with their types (1 == 1.0 == True; NaN != NaN), and its problems."""
    return [(name, type(value), repr(value)) for name, value in vars(row).items()], row.problems


def test_get_reads_a_selected_column_and_none_for_one_left_out() -> None:
    row = StoredRow({"job_id": "a", "retry_attempt": 2}, {})
    assert row.get("retry_attempt") == 2
    assert row.get("retry_for") is None
    with pytest.raises(AttributeError, match="retry_for"):
        _ = row.retry_for


@pytest.mark.parametrize("column", [column.name for column in JOB_COLUMNS])
def test_a_row_reads_as_value_by_value_whatever_one_column_holds(column: str) -> None:
    index = [c.name for c in JOB_COLUMNS].index(column)
    rows = []
    for value in ODD_VALUES:
        raw = a_row()
        raw[index] = value
        rows.append(raw)
    rows += rows  # read twice in one call: an instant read before is looked up, never another one's
    assert [typed(row) for row in read_rows(JOB_COLUMNS, rows)] == [typed(careful(raw)) for raw in rows]
    read_alone = [typed(read_rows(JOB_COLUMNS, [raw])[0]) for raw in rows]
    assert read_alone == [typed(careful(raw)) for raw in rows]
    assert not read_rows(JOB_COLUMNS, [a_row()])[0].problems  # an unreadable row's plan is no other row's


def test_rows_read_in_several_calls_may_share_their_instants() -> None:
    instants: dict[Any, datetime] = {}
    own = [c.name for c in OWN_JOB_COLUMNS]
    first = read_rows(OWN_JOB_COLUMNS, [[a_row()[[c.name for c in JOB_COLUMNS].index(n)] for n in own]], instants)
    assert first[0].created_at == datetime(2026, 3, 1, 4, 5, 6, 123456, tzinfo=timezone.utc)
    assert "2026-03-01 04:05:06.123456" in instants
    again = read_rows(OWN_JOB_COLUMNS, [[a_row()[[c.name for c in JOB_COLUMNS].index(n)] for n in own]], instants)
    assert typed(again[0]) == typed(first[0])


@pytest.mark.parametrize(
    "text",
    ["[1]", '{"a":[1,{"b":null}]}', " [1]", "[1] ", "\n{}\t", "[1]x", "[1] x", "", "  ", "garbage", "[", '"s"', "NaN"],
)
def test_args_read_as_json_loads_reads_them(text: str) -> None:
    def outcome(load: Any) -> tuple[str, object]:  # noqa: ANN401 - a loader
        try:
            return "value", load(text)
        except ValueError as exc:
            return type(exc).__name__, str(exc)

    assert outcome(_json_loads) == outcome(json.loads)


def test_a_read_keeps_at_most_so_many_instants_and_reads_the_others_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rows_module, "_INSTANTS_KEPT", 1)
    created = [c.name for c in JOB_COLUMNS].index("created_at")
    rows = []
    for second in range(5):
        raw = a_row()
        raw[created] = f"2026-03-01 04:05:0{second}.123456"
        rows.append(raw)
    instants: dict[Any, datetime] = {}
    read = read_rows(JOB_COLUMNS, rows, instants)
    assert [row.created_at.second for row in read] == [0, 1, 2, 3, 4]
    assert len(instants) == 1
