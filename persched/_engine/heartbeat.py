"""Lease renewal, recovery of runs whose owner stopped renewing, change pick-up.

Threads
-------
One ``persched-heartbeat`` thread per scheduler wakes every
`heartbeat_seconds` (on the scheduler's clock) and, outside any lock:

1. renews the leases of the runs in flight here, and only those (a slow
   but alive run is never recovered, while an open run of this
   instance that no worker holds lapses like any other);
2. reads every open run (outcome NULL) that is not in flight here, and notes
   the lease value it sees together with the *monotonic* time it first saw
   that value. A run whose lease value has not changed for `lease_seconds`
   of this thread's monotonic time is recovered: marked "lost", its job back
   on its grid (`Store.recover_run`, conditional on the observed value).

3. reads the job rows that no recovery would ever move on (stranded: a
   ``running`` row with no open run, or a state that is not a job state: only
   a hand edit leaves one) and frees each one that stood unchanged for
   `lease_seconds` the same way (`Store.free_stranded_job`, conditional on
   the row as seen): back on its grid, or paused, with a record saying why.

Expiry is measured by observation on the local monotonic clock, not by
comparing the stored ``lease_until`` with the local wall clock: a wall clock
stepped forward, or skewed against the owner's, cannot fake a death
(docs/multi.md, "Clock skew"). The price: a fresh instance waits one full lease before
it recovers what a dead instance left behind.

Every `pickup_seconds` the same thread also reads the change counter
(``persched_changes``) and queues the jobs that other instances, or the
command line, scheduled or replaced since it last looked: one
indexed read per second by default. It reads it sooner when the engine says
that another connection committed (`persched._engine.pickup`): on SQLite a
``PRAGMA data_version`` every `pickup_check_seconds` that reads no file, on
PostgreSQL a listener thread woken by NOTIFY, which calls `request_pickup`;
either way at most once per `pickup_check_seconds`, so that a stream of
changes is read in batches. Those signals only hurry the pick-up; the poll
stays its backstop. While no connection commits, the SQLite check backs off,
each quiet check doubling the wait up to `QUIET_CHECK` (1 s, or
`pickup_seconds` if that is shorter, and then in the poll's wake-up), and the
first commit it sees brings it back to `pickup_check_seconds`: an idle
scheduler wakes about once a second, not ten times, and a change after a
quiet spell is picked up within a second.

With `membership` (`persched._engine.membership`), each round also renews
this instance's membership row and reads the others', and the database's
clock in the same transaction (`persched._engine.skew`: an instance whose
time is too far from it keeps to the database's time); when the instances
share the work and the view of the members changes, `repartition` hands the
dispatcher the new view (it keeps only the jobs this instance owns). A
member's join or leave moves the change counter too, so a pick-up that sees
the counter move also asks the membership whether a member came or went
(`Membership.notice`).

With `pause_ends` (`persched._engine.pause_ends`), the loop also wakes at the
earliest end of a timed pause and resumes the jobs whose pause has ended.

With the bounded heap (`persched._engine.horizon`), the pick-up asks only for the
changed jobs the heap's refills have passed (later ones are loaded by a
refill), and the thread also runs the start-up sweep, one batch after
another, between its periodic tasks.

``_cond`` guards only the stop flag and the pick-up request; it is the
condition the clock waits on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .._model.instant import US_PER_SECOND, Instant, Micros
from .._store.db import shares_one_connection
from ..errors import StoreError
from .liveness import provably_dead
from .pickup import ChangeListener, CommitWatch
from .tracebacks import describe

if TYPE_CHECKING:
    from .._store import OpenRun, Store, Stranded
    from .membership import Membership
    from .pause_ends import PauseEnds
    from .timebase import Timebase

__all__ = ["Heartbeat"]

logger = logging.getLogger(__name__)

_CHANGES_LOGGED: Final = 10  # picked-up changes named one by one per round; more are counted

# (next_run_at, job_id, generation): a recovered or changed job to queue.
QueueCallback = Callable[[Instant, str, int], None]

DEFAULT_PICKUP: Final = Micros(US_PER_SECOND)
DEFAULT_PICKUP_CHECK: Final = Micros(US_PER_SECOND // 10)  # SQLite's data_version check: 100 ms
QUIET_CHECK: Final = Micros(US_PER_SECOND)  # the longest wait between two checks while nothing commits
_NEVER: Final = 2**63  # monotonic µs: a task that has nothing left to do


class Heartbeat:
    """Renews this instance's leases and recovers expired ones of any instance.

    Args:
        store: The store.
        timebase: The scheduler's time frame.
        instance_id: This scheduler's instance id.
        lease: How long a lease lasts without renewal.
        period: How often to renew and look for expired leases.
        in_flight: Returns the run ids in flight in this process.
        queue: Called with each job that recovery put back on its grid, and
            each job that another instance (or the CLI) scheduled or replaced.
        pickup: How often to read the change counter for changes made
            elsewhere, whatever the signals below say; on PostgreSQL also how
            long the listener waits after a failed connect.
        pickup_check: How often to ask SQLite whether another connection
            committed (``data_version``) while commits come, backing off to
            `QUIET_CHECK` while none do; also the least time between two
            pick-ups that a signal asked for (a stream of changes is read in
            batches).
        lost: Called with each run this heartbeat recorded as lost (events).
        maintenance: Called after each round (run-history retention); it
            runs here, off the dispatch path.
        membership: This instance's membership row (every scheduler keeps one, for
            `persched._store.health`) and its view of the members sharing the work, renewed
            every round.
        repartition: Called with `Membership.shared` when the view changed.
        pause_ends: The timed pauses to resume at their end (`persched._engine.pause_ends`).
        cancels: Called at each pick-up that saw the counter move: stops the runs here that a cancel asked for.
    """

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        instance_id: str,
        lease: Micros,
        period: Micros,
        in_flight: Callable[[], set[int]],
        queue: QueueCallback,
        *,
        pickup: Micros = DEFAULT_PICKUP,
        pickup_check: Micros = DEFAULT_PICKUP_CHECK,
        lost: Callable[[OpenRun], None] | None = None,
        maintenance: Callable[[], None] | None = None,
        membership: Membership | None = None,
        repartition: Callable[[bool], None] | None = None,
        pause_ends: PauseEnds | None = None,
        cancels: Callable[[], None] | None = None,
    ) -> None:
        self._cancels = cancels  # at a pick-up: stop the runs here that cancel() asked for elsewhere
        self._store = store
        self._pause_ends = pause_ends
        self._ends_changed = False  # this process paused a job with an end (guarded by _cond)
        self._membership = membership
        self._repartition = repartition
        self._timebase = timebase
        self._instance_id = instance_id
        self._lease = lease
        self._period = period
        self._in_flight = in_flight
        self._queue = queue
        self._pickup = pickup
        self._pickup_check = pickup_check
        self._requested = False  # a signal asked for a pick-up (guarded by _cond)
        self._watch: CommitWatch | None = None
        self._listener: ChangeListener | None = None
        self._change_seq = 0
        self._announced = False  # the first round says which runs of other instances wait for their lease
        self._lost = lost
        self._maintenance = maintenance
        self._bound: Callable[[], Instant | None] | None = None
        self._sweep: Callable[[], bool] | None = None
        self._cond = threading.Condition()
        self._stopping = False
        # run_id -> (lease value seen, monotonic microseconds when it was first seen)
        self._seen: dict[int, tuple[object, int]] = {}
        # Open runs whose recovery failed (logged once each): the others' recovery goes on meanwhile.
        self._unrecovered: set[int] = set()
        # stranded row as seen -> monotonic µs when it was first seen so (see the module docstring)
        self._stranded: dict[Stranded, int] = {}
        self._unfreed: set[Stranded] = set()  # stranded rows whose freeing failed (logged once each)
        self._thread = threading.Thread(target=self._loop, name="persched-heartbeat", daemon=True)

    def start(
        self,
        change_seq: int,
        *,
        bound: Callable[[], Instant | None] | None = None,
        sweep: Callable[[], bool] | None = None,
    ) -> None:
        """Start the heartbeat thread; changes after `change_seq` will be picked up.

        `bound` (the bounded heap's `Dispatcher.pickup_bound`) limits the changed
        jobs queued to those due by then; `sweep` is one batch of the start-up
        sweep (`persched._engine.horizon`), run back to back until it returns False.
        """
        self._change_seq = change_seq
        self._bound = bound
        self._sweep = sweep
        engine, signal = self._store.engine, self._store.dialect.change_signal
        if signal == "data_version" and not shares_one_connection(engine):  # one connection: nobody else commits
            self._watch = CommitWatch(engine, self._store.dialect)
        elif signal == "notify":
            clock = self._timebase.clock
            self._listener = ChangeListener(engine, self._store.dialect, clock, self._pickup, self.request_pickup)
            self._listener.start()
        self._thread.start()

    def request_pickup(self) -> None:
        """Read the change counter at once (another connection committed); from any thread."""
        with self._cond:
            self._requested = True
            self._cond.notify_all()

    def pause_ending(self) -> None:
        """Read the earliest end of the timed pauses again (a job was paused with one); from any thread."""
        with self._cond:
            self._ends_changed = True
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the thread at its next wake (idempotent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._listener is not None:
            self._listener.stop()

    def join(self, timeout: float | None) -> None:
        """Wait for the thread (and the listener's) to end."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._listener is not None:
            self._listener.join(timeout)

    def beat(self) -> None:
        """Renew leases, then recover what has expired (one round)."""
        running_here = self._in_flight()
        if running_here:
            self._store.renew_leases(self._instance_id, Instant(self._timebase.now() + self._lease), running_here)
        open_runs = [run for run in self._store.open_runs() if run.run_id not in running_here]
        self._unrecovered.intersection_update(run.run_id for run in open_runs)
        open_runs = self._recover_dead_owners(open_runs)
        mono = self._timebase.clock.monotonic_us()
        seen: dict[int, tuple[object, int]] = {}
        for run in open_runs:
            previous = self._seen.get(run.run_id)
            first_seen = previous[1] if previous is not None and previous[0] == run.lease_until else mono
            seen[run.run_id] = (run.lease_until, first_seen)
            if mono - first_seen >= self._lease:
                self._recover(run)
        self._seen = seen
        self._free_stranded(mono)

    def _free_stranded(self, mono: int) -> None:
        stranded = {row: self._stranded.get(row, mono) for row in self._store.stranded_jobs()}
        self._stranded = stranded
        self._unfreed.intersection_update(stranded)
        for row, first_seen in stranded.items():
            if mono - first_seen < self._lease:
                continue
            try:
                due = self._store.free_stranded_job(row, self._timebase.now(), self._instance_id)
            except StoreError as exc:  # one row must not hold back the others; it is tried again each round
                if row not in self._unfreed:
                    self._unfreed.add(row)
                    logger.warning("freeing the stranded job %s failed; tried again each round: %s", row.job_id, exc)
                continue
            if due is not None:
                self._queue(due, row.job_id, row.generation)

    def renew_membership(self) -> None:
        """Renew this instance's membership and read the others'; repartition on a new view."""
        if self._membership is not None and self._membership.beat() and self._repartition is not None:
            self._repartition(self._membership.shared)

    def _recover_dead_owners(self, open_runs: list[OpenRun]) -> list[OpenRun]:
        """Recover at once the runs whose owner is provably gone (same host and boot,
        its process ended); return the others, which wait out their lease as before."""
        waiting = []
        for run in open_runs:
            if run.instance_id != self._instance_id and provably_dead(run.instance_id):
                self._recover(run, "belongs to an instance whose process is gone (same host and boot)")
            else:
                waiting.append(run)
        if not self._announced:
            self._announced = True
            others = sorted({run.instance_id for run in waiting if run.instance_id != self._instance_id})
            if others:
                # Say it now, not only in lease_seconds: a restart after a crash is otherwise silent.
                logger.info(
                    "%d run%s in flight on other instances (%s): if those are gone, their runs are recorded "
                    "as lost after %g s without a lease renewal",
                    len(waiting),
                    "" if len(waiting) == 1 else "s",
                    ", ".join(others),
                    self._lease / US_PER_SECOND,
                )
        return waiting

    def _recover(self, run: OpenRun, why: str = "lost its lease") -> None:
        try:
            result = self._store.recover_run(run, self._timebase.now)  # read under the write lock
        except Exception as exc:  # noqa: BLE001 - one run that cannot be recovered must not hold back the others
            if run.run_id not in self._unrecovered:
                self._unrecovered.add(run.run_id)
                logger.warning(
                    "recovering run %d of %s generation %d (instance %s) failed; tried again each round: %s",
                    run.run_id,
                    run.job_id,
                    run.generation,
                    run.instance_id,
                    exc if isinstance(exc, StoreError) else describe(exc),
                )
            return
        self._unrecovered.discard(run.run_id)
        if not result.lost:
            return
        logger.warning(
            "run %d of %s generation %d on instance %s %s; recorded as lost",
            run.run_id,
            run.job_id,
            run.generation,
            run.instance_id,
            why,
        )
        if result.due is not None:
            self._queue(result.due, run.job_id, run.generation)
        if self._lost is not None:
            self._lost(run)

    def pick_up_changes(self) -> None:
        """Queue the jobs that were scheduled or replaced elsewhere since the last look.

        One cheap read of the change counter when nothing changed. Correctness
        never depends on this: a stale heap entry's claim simply fails.
        """
        if self._store.change_seq() == self._change_seq:
            return
        with self._cond:  # a change made elsewhere may be a pause with an end
            self._ends_changed = True
        if self._membership is not None and self._membership.notice() and self._repartition is not None:
            self._repartition(self._membership.shared)  # a member joined or left (persched._engine.membership)
        before = self._change_seq
        # Read before the changes: a row due later is loaded by a refill not begun yet (persched._engine.horizon).
        upto = None if self._bound is None else self._bound()
        # With now: a row written elsewhere by a clock that was ahead is put back on its grid (persched._store.ahead).
        self._change_seq, changed = self._store.changes_since(self._change_seq, upto, self._timebase.now())
        if logger.isEnabledFor(logging.INFO):
            self._log_changes(before, self._change_seq)  # before queueing: a claim would change the rows
        for due_at, job_id, generation in changed:
            self._queue(due_at, job_id, generation)
        logger.debug("picked up %d changed jobs (change %d)", len(changed), self._change_seq)
        if self._cancels is not None:
            self._cancels()

    def _log_changes(self, after: int, upto: int) -> None:
        """Tell the operator what another process or the CLI changed; a bulk change is cut short."""
        notes = self._store.changes_made_elsewhere(after, upto)
        for note in notes[:_CHANGES_LOGGED]:
            logger.info(
                "picked up a change made elsewhere: %s generation %d %s", note.job_id, note.generation, note.words
            )
        if len(notes) > _CHANGES_LOGGED:
            logger.info("picked up %d more changes made elsewhere", len(notes) - _CHANGES_LOGGED)

    def _loop(self) -> None:
        try:
            self._run()
        finally:
            if self._watch is not None:
                self._watch.close()

    def _run(self) -> None:
        clock = self._timebase.clock
        next_beat = next_pickup = earliest = clock.monotonic_us()
        next_check = next_beat if self._watch is not None else _NEVER
        next_sweep = _NEVER
        next_end = _NEVER  # monotonic µs: the earliest end of a timed pause
        if self._sweep is not None:
            next_sweep = next_beat
        owed = False  # a signal asked for a pick-up, which runs at `earliest`
        check_every: int = self._pickup_check  # microseconds; backs off while nothing commits
        while True:
            with self._cond:
                owed, self._requested = owed or self._requested, False
                ends_changed, self._ends_changed = self._ends_changed, False
            if ends_changed:
                next_end = self._read_pause_ends(next_end, resume=False)
            checked = False
            if self._watch is not None and clock.monotonic_us() >= next_check:
                checked = True
                if self._watch.changed():
                    owed, check_every = True, self._pickup_check
                else:  # quiet: wait twice as long each time, up to QUIET_CHECK
                    check_every = max(self._pickup_check, min(2 * check_every, self._pickup, QUIET_CHECK))
            now = clock.monotonic_us()
            if now >= next_pickup or (owed and now >= earliest):
                owed = False
                # At most one pick-up per pickup_check: under a stream of changes each reads many.
                earliest, next_pickup = now + self._pickup_check, now + self._pickup
                _guarded(self.pick_up_changes, "picking up changes")
            if checked:  # no later than the poll, so that a quiet scheduler wakes once for both
                next_check = min(now + check_every, max(next_pickup, now + self._pickup_check))
            if clock.monotonic_us() >= next_beat:
                next_beat = clock.monotonic_us() + self._period
                _guarded(self.renew_membership, "renewing membership")
                _guarded(self.beat, "heartbeat")
                next_end = self._read_pause_ends(next_end, resume=False)
                if self._maintenance is not None:
                    _guarded(self._maintenance, "run-history maintenance")
            if clock.monotonic_us() >= next_end:
                next_end = self._read_pause_ends(next_end, resume=True)
            if self._sweep is not None and clock.monotonic_us() >= next_sweep:
                next_sweep = self._sweep_once(next_beat)
            wake_at = min(next_beat, next_pickup, next_check, next_sweep, next_end, earliest if owed else _NEVER)
            with self._cond:
                while (
                    not self._stopping
                    and not (self._requested and not owed)
                    and (left := wake_at - clock.monotonic_us()) > 0
                ):
                    clock.wait(self._cond, left / US_PER_SECOND)
                if self._stopping:
                    return

    def _read_pause_ends(self, previous: int, *, resume: bool) -> int:
        """Resume the pauses that ended (with `resume`), and return when the next one ends
        (monotonic µs; `previous` again after a failure, retried at the next round)."""
        if self._pause_ends is None:
            return _NEVER
        try:
            end = self._pause_ends.resume_ended() if resume else self._pause_ends.next_end()
        except BaseException as exc:  # noqa: BLE001 - a periodic task must never stop the others
            if isinstance(exc, StoreError):
                logger.warning("resuming the timed pauses failed, will retry: %s", exc)
            else:
                logger.error("resuming the timed pauses failed, will retry\n%s", describe(exc))
            return max(previous, self._timebase.clock.monotonic_us() + self._period) if resume else previous
        if end is None:
            return _NEVER
        return self._timebase.clock.monotonic_us() + max(0, end - self._timebase.now())

    def _sweep_once(self, retry_at: int) -> int:
        """One batch of the sweep; return when to run the next (monotonic µs): at once while rows
        are left, at `retry_at` after a failure, never once it is done."""
        assert self._sweep is not None
        try:
            more = self._sweep()
        except StoreError as exc:
            logger.warning("checking the stored jobs failed, will retry: %s", exc)
            return retry_at
        except BaseException as exc:  # noqa: BLE001 - a periodic task must never stop the others
            logger.error("checking the stored jobs failed, will retry\n%s", describe(exc))
            return retry_at
        if more:
            return self._timebase.clock.monotonic_us()
        self._sweep = None
        return _NEVER


def _guarded(task: Callable[[], None], what: str) -> None:
    """Run one periodic task; a failure is logged and the task runs again next time."""
    try:
        task()
    except StoreError as exc:
        logger.warning("%s failed, will retry: %s", what, exc)
    except BaseException as exc:  # noqa: BLE001 - a periodic task must never stop the others
        logger.error("%s failed, will retry\n%s", what, describe(exc))
