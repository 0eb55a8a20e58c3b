"""``persched next JOB``: the coming slots of a job in UTC and in its zone, daylight-saving changes marked.

The same slots as `JobScheduler.next_runs`, read from the job's row (`persched._store.coming`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from .._interfaces.present import iso
from .._model.instant import to_datetime
from .._store.coming import coming_slots
from .._store.mappers import plain_job
from .exits import EXIT_OK
from .lookup import missing_job, require_job_id, with_store
from .output import fit_table, json_text, printable, say, table_width

if TYPE_CHECKING:
    import argparse

    from .._model.plain_models import PlainJob
    from .._store import Store
    from .._store._rows import StoredRow

__all__ = ["cmd_next"]


def _offset(at: datetime) -> str:
    offset = at.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _rows(slots: list[datetime], zone: str) -> list[list[str]]:
    """One row per slot: UTC, local time (abbreviation, offset), and a mark where the offset changed."""
    tz = ZoneInfo(zone)
    rows, previous = [], None
    for slot in slots:
        local = slot.astimezone(tz)
        offset = _offset(local)
        change = "" if previous in (None, offset) else f"daylight saving: {previous} -> {offset}"
        rows.append([iso(slot), f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({offset})", change])
        previous = offset
    return rows


def cmd_next(args: argparse.Namespace) -> int:
    job_id = require_job_id(args.job_id)

    def read(row: StoredRow) -> tuple[PlainJob, list[datetime]]:
        return plain_job(row), [to_datetime(slot) for slot in coming_slots(row, args.count)]

    def body(store: Store) -> int:
        found = store.get_job_as(read, job_id)
        if found is None:
            raise missing_job(store, job_id)
        job, slots = found
        if args.json:
            say(json_text([slot.isoformat().replace("+00:00", "Z") for slot in slots]))
            return EXIT_OK
        if not slots:
            why = (
                "it is paused without an end (`persched resume` continues it)"
                if job.paused
                else "its schedule has ended"
                if job.state.value == "finished"
                else "it cannot be read"
            )
            say(f"no coming slots for {job_id!r}: {why}")
            return EXIT_OK
        say(f"next {len(slots)} slots of {job_id!r} ({job.schedule}):")
        say(fit_table(["UTC", printable(job.timezone), ""], _rows(slots, job.timezone), table_width(args)))
        return EXIT_OK

    return with_store(args, body, read_only=True)
