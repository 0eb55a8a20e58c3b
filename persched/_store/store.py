"""`Store`: the parts of the store, composed into its one facade."""

from __future__ import annotations

from .cancels import CancelsStore
from .claims import ClaimsStore
from .history import HistoryStore
from .jobs import JobsStore
from .leases import LeasesStore
from .members import MembersStore

__all__ = ["Store"]


class Store(JobsStore, ClaimsStore, LeasesStore, HistoryStore, MembersStore, CancelsStore):
    """The persched tables of one namespace behind one engine (see `_tx.Transactions` for its arguments).

    Each part is a module of this package; they share the transaction
    machinery of `_tx` and nothing else.
    """
