"""Every SQL statement persched runs, behind one facade: `Store`.

Callers pass `now` (an `Instant` in their own time frame) in, or, where the
order of commits matters (claims, recovery), a clock that is read once the
transaction holds its write lock. Instants travel as whole microseconds
inside persched (`persched._model.instant`) and as UTC timestamps in the database, which
keep microseconds too: the round trip is exact, never rounded.

The map (docs/design.md draws it):

- `store`: `Store`, the facade: the transaction machinery (`_tx`) holding
  one object of each part below (`part.Part`), whose methods it offers.
- `jobs` / `steering` / `due`: definitions (schedule, declare, deschedule;
  pause, resume, run-now) and what the engine reads of them (the change
  counter and feed, the heap's refills, the start-up sweep).
- `claims` / `claim_batch`: the start of runs (one locking read per batch,
  the decisions over the rows it won, one write back); `completions`: the
  end of runs.
- `leases`: lease renewal and the recovery of expired runs; `members`: which
  instances share a namespace's work.
- `history`: run listings, overrun flags and retention; `views`: read-only
  queries for the dashboard, the metrics and the command line.
- `_tx`: transactions, retries, joined writes, the SQLite writer queue and
  group commit: the store's only threading, explained on top of it;
  `fork_gate`: a fork waits until no thread is inside SQLite.
- `mappers` / `_rows`: stored rows read defensively into records and plans.
- `records`: the values handed in and out (no SQL); `observer`: the hook for
  claim conflicts, missed slots and retries.
- `urls` / `db` / `options`: URLs, the engine a URL opens and the boundary of
  driver errors, SQLite's settings; `dialects`: every engine difference, its
  engine's set-up too, one module per engine.
- `schema` / `migrate` / `revision`: the tables, the migrations run on
  first use, and the revision a database is at.

Linearization points are the commits of the methods; each module's
docstring names its own.
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
