"""What an upsert compares and returns, worked out once per shape of definition.

The specs of a declaration mostly share a handful of targets and schedules:
a shape. `Shapes` (one per transaction) reads and compares a row's policy
columns once per distinct raw value, and makes a row's `Job` from its shape's
first, with the row's own fields over it. A row that cannot be read goes the
whole way, `mappers.to_job`, alone.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

from .._model.instant import from_datetime
from .._model.models import POLICY_COLUMNS
from ._rows import StoredRow, read_rows
from .mappers import JOB_COLUMNS, OWN_JOB_COLUMNS, own_job_fields, policies_of, to_job
from .schema import UTCDateTime, jobs

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping
    from datetime import datetime
    from typing import TypeAlias

    from .._model.instant import Instant
    from .._model.models import JobDefinition, Policies
    from .._model.public_models import Job

    RawRow: TypeAlias = tuple[Any, ...]

__all__ = ["Shapes", "raw_row", "raw_value", "written_over"]

# A raw row (`RawRow`): the driver's values of `mappers.JOB_COLUMNS`, in order, as read or bound: no dict each.
_INDEX: Final = {column.name: i for i, column in enumerate(JOB_COLUMNS)}
_TARGET: Final = _INDEX["target"]
_all_values: Final = itemgetter(*_INDEX)  # a row by column name -> raw
_own_values: Final = itemgetter(*(_INDEX[column.name] for column in OWN_JOB_COLUMNS))
_POLICY_COLUMNS: Final = tuple(jobs.c[name] for name in POLICY_COLUMNS)
_policy_values: Final = itemgetter(*(_INDEX[name] for name in POLICY_COLUMNS))  # a shape's key, with the target
_INSTANT_POLICY_COLUMNS: Final = frozenset(
    column.name for column in _POLICY_COLUMNS if isinstance(column.type, UTCDateTime)
)


def raw_row(values: Mapping[str, Any]) -> RawRow:
    """A row given by column name (every column of `mappers.JOB_COLUMNS`), raw."""
    return _all_values(values)  # type: ignore[no-any-return]  # a tuple: more than one name


def raw_value(row: RawRow, name: str) -> Any:  # noqa: ANN401 - a driver's value
    """The value of the column `name` of a raw row."""
    return row[_INDEX[name]]


def written_over(row: RawRow, values: Mapping[str, Any]) -> RawRow:
    """The raw `row` with the columns `values` written over it (a column it does not hold is left out)."""
    changed = list(row)
    for name, value in values.items():
        if name in _INDEX:  # not owner_bucket, which no row read holds
            changed[_INDEX[name]] = value
    return tuple(changed)


class Shapes:
    """The shapes of one transaction's raw rows (`RawRow`).

    Two raw values that are equal are read alike: the drivers return one Python type per column
    (SQLite's column affinity turns a hand-written 60 into 60.0 in a float column, and 2.0 into 2 in
    an integer one), so a shape is keyed by its raw values as they are.
    """

    __slots__ = ("_bound", "_instants", "_job_over", "_policies", "_templates")

    def __init__(self) -> None:
        from .._model.public_models import job_over  # pydantic, which the read commands do without

        self._job_over = job_over
        self._instants: dict[Any, datetime] = {}  # raw -> read: the rows of one declaration share most
        self._policies: dict[Hashable, Policies | None] = {}  # raw policy values -> read (None: unreadable)
        self._templates: dict[Hashable, Job] = {}  # (raw target, raw policy values) -> a readable Job
        self._bound: dict[int, tuple[Policies, dict[str, Any]]] = {}  # by id: checked Policies are not hashed

    def bound_columns(self, policies: Policies, bind_instant: Callable[[Instant], object]) -> dict[str, Any]:
        """The policy columns of `policies` as the driver binds them (instants by `bind_instant`); do not
        change the dict: rows of one shape share it."""
        found = self._bound.get(id(policies))
        if found is None or found[0] is not policies:  # kept with its Policies, so its id is not reused
            columns = {
                name: bind_instant(from_datetime(value))
                if value is not None and name in _INSTANT_POLICY_COLUMNS
                else value
                for name, value in policies.columns().items()
            }
            found = self._bound[id(policies)] = (policies, columns)
        return found[1]

    def read(self, row: RawRow) -> StoredRow:
        """The columns a row holds of its own (`mappers.OWN_JOB_COLUMNS`), read."""
        return read_rows(OWN_JOB_COLUMNS, (_own_values(row),), self._instants)[0]

    def holds(self, row: RawRow, own: StoredRow, definition: JobDefinition) -> bool:
        """True if the `row` (its own columns read: `own`) can be read and holds `definition` as it is,
        its target, arguments and policies: scheduling it again changes nothing."""
        return (
            not own.problems
            and own.args == definition.args_json
            and own.kwargs == definition.kwargs_json
            and row[_TARGET] == definition.target  # text (readable) if it is equal
            and self._stored_policies(row) == definition.policies  # None (unreadable) never is
        )

    def _stored_policies(self, row: RawRow) -> Policies | None:
        key = _policy_values(row)
        try:
            return self._policies[key]
        except KeyError:
            pass
        read = read_rows(_POLICY_COLUMNS, (key,))[0]
        found = self._policies[key] = None if read.problems else policies_of(read)
        return found

    def job(self, row: RawRow, own: StoredRow | None = None) -> Job:
        """The `Job` of the `row`, as `mappers.to_job` makes it; `own`: its own columns, read already."""
        own = self.read(row) if own is None else own
        key = (row[_TARGET], _policy_values(row))
        template = self._templates.get(key)
        if template is not None and not own.problems:
            problems: dict[str, str] = {}
            fields = own_job_fields(own, problems)
            if not problems:
                # Every field the template does not share with this row is in `fields`, of the type
                # validation gives it (read_row's, as to_job's): a copy need not validate again.
                return self._job_over(template, fields)
        job = to_job(read_rows(JOB_COLUMNS, (row,))[0])
        if template is None and job.unreadable is None:
            self._templates[key] = job  # its target, policy fields and schedule are its shape's
        return job
