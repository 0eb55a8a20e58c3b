"""Every SQL statement persched runs, behind one facade: `Store`.

`Store` is the transaction machinery (`_tx`) composed with one part per kind
of row (`part.Part`); `records` holds the values handed in and out, with no
SQL. Callers pass `now` in, or a clock read once the write lock is held where
the order of commits matters. Instants are whole microseconds inside persched
(`persched._model.instant`) and exact UTC timestamps in the database. Each
public method is one transaction and linearizes at its commit. The map of the
modules: docs/explanation/store.md, "The map".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .records import (
    MAX_ERROR_TEXT,
    ChangeNote,
    Claim,
    ClaimEntry,
    ClaimMiss,
    Completion,
    Correction,
    OpenRun,
    Recovery,
    RunNowAnswer,
    RunNowVerdict,
    Stranded,
    Upserted,
    bound_error_text,
)

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "MAX_ERROR_TEXT",
    "ChangeNote",
    "Claim",
    "ClaimEntry",
    "ClaimMiss",
    "Completion",
    "Correction",
    "OpenRun",
    "Recovery",
    "RunNowAnswer",
    "RunNowVerdict",
    "Store",
    "Stranded",
    "Upserted",
    "bound_error_text",
]


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562
    # `Store`, and SQLAlchemy with it, is imported on first use: the records need no statement.
    if name == "Store":
        from .store import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
