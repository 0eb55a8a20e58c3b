"""`JobSpec`, one job of an application's declared set, and `DeclareResult`, what ``declare()`` did."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Final

from ..errors import InvalidJobError
from .models import KEYWORD_OPTIONS, validate_job_id

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Mapping

    from .models import Job, Policies

__all__ = ["SCHEDULE_OPTIONS", "DeclareResult", "JobSpec", "SharedChecks", "check_specs"]

SUMMARY_IDS: Final = 10  # ids a summary line names per kind of change; the rest are counted

# The keyword-only arguments of schedule(); a test keeps this list in step with it.
SCHEDULE_OPTIONS: Final = frozenset({"args", "kwargs", "start_in", *(option.name for option in KEYWORD_OPTIONS)})


class JobSpec:
    """One declared job: the arguments of ``schedule()``, kept for ``declare()``.

    ``JobSpec("report", send_report, 60.0, kwargs={"to": "ops"})`` declares what the same arguments
    to ``schedule()`` would schedule. ``declare()`` checks them all before it writes anything; an
    unknown option name is refused here.

    Raises:
        InvalidJobError: An option is not one of ``schedule()``'s.
    """

    __slots__ = ("fn", "interval_seconds", "job_id", "options")

    def __init__(
        self,
        job_id: str,
        fn: Callable[..., Any] | str,
        interval_seconds: float | None = None,
        **options: Any,  # noqa: ANN401 - schedule()'s keyword arguments, checked by declare()
    ) -> None:
        unknown = sorted(set(options) - SCHEDULE_OPTIONS)
        if unknown:
            raise InvalidJobError(unknown[0], f"is not an option of schedule(); use one of {sorted(SCHEDULE_OPTIONS)}")
        self.job_id = job_id
        self.fn = fn
        self.interval_seconds = interval_seconds
        self.options: Mapping[str, Any] = dict(options)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in sorted(self.options.items()))
        return f"JobSpec({self.job_id!r}, {self.fn!r}, {self.interval_seconds!r}{extra})"


def check_specs(specs: object) -> list[JobSpec]:
    """Return `specs` as a list if it is an iterable of `JobSpec` naming each job id once."""
    if isinstance(specs, (str, bytes, JobSpec)) or not hasattr(specs, "__iter__"):
        raise InvalidJobError("specs", f"must be an iterable of JobSpec, got {type(specs).__name__}")
    checked: list[JobSpec] = []
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, JobSpec):
            raise InvalidJobError("specs", f"must hold JobSpec values, got {type(spec).__name__}: {spec!r}")
        validate_job_id(spec.job_id)
        if spec.job_id in seen:
            raise InvalidJobError("specs", f"job id {spec.job_id!r} is declared twice")
        seen.add(spec.job_id)
        checked.append(spec)
    return checked


class SharedChecks:
    """A declaration's checks of targets and options, made once per distinct value, not once per spec.

    A value that cannot be a dict key, or a check that raises, is checked again each time.

    Args:
        reference: ``reference_of`` with the scheduler's allowed modules.
        policies: ``validate_policies``.
    """

    __slots__ = ("_policies", "_policies_of", "_reference", "_references")

    def __init__(self, reference: Callable[[object], str], policies: Callable[..., Policies]) -> None:
        self._reference = reference
        self._policies = policies
        self._references: dict[Hashable, str] = {}
        self._policies_of: dict[Hashable, Policies] = {}

    def reference(self, fn: object) -> str:
        """Return the checked ``"module:qualname"`` of `fn`."""
        # Only kinds whose equality is their identity or their text: equal keys, equal references.
        if not isinstance(fn, (str, types.FunctionType)):
            return self._reference(fn)
        key = (type(fn), fn)
        found = self._references.get(key)
        if found is None:
            found = self._references[key] = self._reference(fn)
        return found

    def policies(self, interval_seconds: object, options: Mapping[str, object]) -> Policies:
        """Return the checked `Policies` of a spec's interval and schedule options."""
        # Type and repr as well as the value: 60 and 60.0 and True, or one instant in two time zones,
        # are equal values that schedule() may read differently.
        given = (("interval_seconds", interval_seconds), *options.items())
        key = tuple((name, type(value), repr(value), value) for name, value in given)
        try:
            found = self._policies_of.get(key)
        except TypeError:  # an unhashable value (a list): checked each time
            return self._policies(interval_seconds, **options)
        if found is None:
            found = self._policies_of[key] = self._policies(interval_seconds, **options)
        return found


class DeclareResult(list["Job"]):
    """What ``declare()`` did: the declared jobs as stored, in the order of the specs, and what changed.

    A list of `Job`; its attributes name the ids by change, and `summary()` says it in one line.

    Attributes:
        namespace: The namespace declared.
        created: Ids of the jobs made by this declaration (new, or descheduled before).
        replaced: Ids of the jobs whose definition changed (a new generation, a fresh grid).
        unchanged: Ids of the jobs declared identically (same generation, same grid).
        pruned: Ids of the declared jobs that `specs` left out, descheduled (with ``prune=True``).
    """

    __slots__ = ("created", "namespace", "pruned", "replaced", "unchanged")

    def __init__(self, namespace: str, changes: Iterable[tuple[Job, str]], pruned: Iterable[str] = ()) -> None:
        super().__init__()
        ids: dict[str, list[str]] = {"created": [], "replaced": [], "unchanged": []}
        for job, change in changes:  # once, one pair at a time: a declaration may hold 100,000
            self.append(job)
            if change in ids:
                ids[change].append(job.job_id)
        self.namespace = namespace
        self.created: tuple[str, ...] = tuple(ids["created"])
        self.replaced: tuple[str, ...] = tuple(ids["replaced"])
        self.unchanged: tuple[str, ...] = tuple(ids["unchanged"])
        self.pruned: tuple[str, ...] = tuple(pruned)

    @property
    def changed(self) -> bool:
        """Whether the declaration created, replaced or pruned a job."""
        return bool(self.created or self.replaced or self.pruned)

    def summary(self) -> str:
        """Return one line for a log, naming at most `SUMMARY_IDS` ids per kind of change.

        ``declared 4 jobs in namespace 'app': 1 created (a), 0 replaced, 3 unchanged, 1 pruned (x)``
        """
        parts = []
        for word in ("created", "replaced", "unchanged", "pruned"):
            ids: tuple[str, ...] = getattr(self, word)
            parts.append(f"{len(ids)} {word}" + (f" ({_listed(ids)})" if ids and word != "unchanged" else ""))
        jobs = "job" if len(self) == 1 else "jobs"
        return f"declared {len(self)} {jobs} in namespace {self.namespace!r}: {', '.join(parts)}"

    def __repr__(self) -> str:
        return (
            f"DeclareResult(namespace={self.namespace!r}, created={self.created!r}, replaced={self.replaced!r}, "
            f"unchanged={self.unchanged!r}, pruned={self.pruned!r})"
        )


def _listed(ids: tuple[str, ...]) -> str:
    shown = ", ".join(ids[:SUMMARY_IDS])
    return shown if len(ids) <= SUMMARY_IDS else f"{shown} and {len(ids) - SUMMARY_IDS} more"
