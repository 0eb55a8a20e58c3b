"""Every SQL statement persched runs, behind one facade: `Store`.

Callers pass `now` (an `Instant` in their own time frame) in, or, where the
order of commits matters (claims, recovery), a clock that is read once the
transaction holds its write lock. Instants travel as whole microseconds
inside persched (`_instant`) and as UTC timestamps in the database, which
keep microseconds too: the round trip is exact, never rounded.

The map (docs/design.md draws it):

- `_tx`: transactions, retries, joined writes, the SQLite writer queue and
  group commit: the store's only threading, explained on top of it.
- `jobs`: definitions (schedule, deschedule, pause, resume, run-now), the
  change counter, and start-up's read of every scheduled job.
- `claims`: the start (one conditional UPDATE per batch) and the end of runs.
- `leases`: lease renewal and the recovery of expired runs.
- `history`: run listings and retention.
- `mappers` / `_rows`: stored rows read defensively into records and plans.
- `records`: the values handed in and out (no SQL).
- `dialects`: every engine difference, one module per engine.

Linearization points (SPEC §2) are the commits of the methods; each
module's docstring names its own.
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
    # `Store` (and SQLAlchemy with it) is imported on first use: the records above
    # serve the workers and the dispatcher without loading any statement.
    if name == "Store":
        from .store import Store

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
