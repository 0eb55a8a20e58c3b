"""`Store`: the transaction machinery of one namespace, composed with the parts that write and read it.

How a part reaches the machinery, and how the store offers its methods as its own: `persched._store.part`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._model.models import DEFAULT_NAMESPACE
from ._tx import RETRY_ATTEMPTS, Transactions
from .cancels import CancelsStore
from .claims import ClaimsStore
from .completions import CompletionsStore
from .due import DueStore
from .history import HistoryStore
from .jobs import JobsStore
from .leases import LeasesStore
from .members import MembersStore
from .part import offered
from .steering import SteeringStore

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["Store"]


class Store(Transactions):
    """The persched tables of one namespace behind one engine."""

    def __init__(
        self, engine: Engine, url: str, *, retry_attempts: int = RETRY_ATTEMPTS, namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        super().__init__(engine, url, retry_attempts=retry_attempts, namespace=namespace)
        self._jobs = JobsStore(self)
        self._steering = SteeringStore(self)
        self._due = DueStore(self)
        self._claims = ClaimsStore(self)
        self._completions = CompletionsStore(self)
        self._leases = LeasesStore(self)
        self._history = HistoryStore(self)
        self._members = MembersStore(self)
        self._cancels = CancelsStore(self)

    # definitions
    upsert_job = offered("_jobs", JobsStore.upsert_job)
    declare_jobs = offered("_jobs", JobsStore.declare_jobs)
    deschedule_job = offered("_jobs", JobsStore.deschedule_job)
    get_job = offered("_jobs", JobsStore.get_job)
    get_job_as = offered("_jobs", JobsStore.get_job_as)
    list_jobs = offered("_jobs", JobsStore.list_jobs)
    list_jobs_as = offered("_jobs", JobsStore.list_jobs_as)
    job_known = offered("_jobs", JobsStore.job_known)
    _prune_declared = offered("_jobs", JobsStore._prune_declared)
    pause_job = offered("_steering", SteeringStore.pause_job)
    pause_all_jobs = offered("_steering", SteeringStore.pause_all_jobs)
    resume_job = offered("_steering", SteeringStore.resume_job)
    resume_all_jobs = offered("_steering", SteeringStore.resume_all_jobs)
    pause_ends = offered("_steering", SteeringStore.pause_ends)
    request_run_now = offered("_steering", SteeringStore.request_run_now)
    # what the engine reads of them
    change_seq = offered("_due", DueStore.change_seq)
    changes_since = offered("_due", DueStore.changes_since)
    changes_made_elsewhere = offered("_due", DueStore.changes_made_elsewhere)
    load_due = offered("_due", DueStore.load_due)
    sweep = offered("_due", DueStore.sweep)
    # runs: start, end, leases
    dispatch = offered("_claims", ClaimsStore.dispatch)
    claim_runs = offered("_claims", ClaimsStore.claim_runs)
    claim_overdue = offered("_claims", ClaimsStore.claim_overdue)
    finish_runs = offered("_completions", CompletionsStore.finish_runs)
    renew_leases = offered("_leases", LeasesStore.renew_leases)
    open_runs = offered("_leases", LeasesStore.open_runs)
    recover_run = offered("_leases", LeasesStore.recover_run)
    stranded_jobs = offered("_leases", LeasesStore.stranded_jobs)
    free_stranded_job = offered("_leases", LeasesStore.free_stranded_job)
    # history
    list_runs = offered("_history", HistoryStore.list_runs)
    list_runs_as = offered("_history", HistoryStore.list_runs_as)
    runs_in_flight = offered("_history", HistoryStore.runs_in_flight)
    runs_in_flight_as = offered("_history", HistoryStore.runs_in_flight_as)
    get_run = offered("_history", HistoryStore.get_run)
    mark_overran = offered("_history", HistoryStore.mark_overran)
    prune_runs = offered("_history", HistoryStore.prune_runs)
    jobs_over_run_limit = offered("_history", HistoryStore.jobs_over_run_limit)
    # instances sharing the namespace, cancels
    server_time = offered("_members", MembersStore.server_time)
    beat_membership = offered("_members", MembersStore.beat_membership)
    forget_member = offered("_members", MembersStore.forget_member)
    leave_membership = offered("_members", MembersStore.leave_membership)
    member_ids = offered("_members", MembersStore.member_ids)
    request_cancel = offered("_cancels", CancelsStore.request_cancel)
    cancel_requests = offered("_cancels", CancelsStore.cancel_requests)
