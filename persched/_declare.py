"""`JobSpec`: one job of an application's declared set, for ``declare(specs, prune=...)`` (issue 16)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._models import KEYWORD_OPTIONS, validate_job_id
from .errors import InvalidJobError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["SCHEDULE_OPTIONS", "JobSpec", "check_specs"]

# The keyword-only arguments of schedule(); a test keeps this list in step with it.
SCHEDULE_OPTIONS: Final = frozenset({"args", "kwargs", "start_in", *(option.name for option in KEYWORD_OPTIONS)})


class JobSpec:
    """One declared job: the arguments of ``schedule()``, kept for ``declare()``.

    ``JobSpec("report", send_report, 60.0, kwargs={"to": "ops"})`` declares
    what ``schedule("report", send_report, 60.0, kwargs={"to": "ops"})``
    would schedule. The arguments are checked by ``declare()``, all before
    anything is written; an unknown option name is refused here.

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
