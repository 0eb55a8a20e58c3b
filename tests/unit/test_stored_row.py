"""`StoredRow.get`: a column the select left out reads as None; attribute access still refuses it."""

from __future__ import annotations

import pytest

from persched._store._rows import StoredRow


def test_get_reads_a_selected_column_and_none_for_one_left_out() -> None:
    row = StoredRow({"job_id": "a", "retry_attempt": 2}, {})
    assert row.get("retry_attempt") == 2
    assert row.get("retry_for") is None
    with pytest.raises(AttributeError, match="retry_for"):
        _ = row.retry_for
